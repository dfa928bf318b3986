// Original file: runstream/v1/history.proto


export interface DeleteRunRequest {
  'thread_id'?: (string);
  'run_id'?: (string);
  'user_id'?: (string);
}

export interface DeleteRunRequest__Output {
  'thread_id': (string);
  'run_id': (string);
  'user_id': (string);
}
