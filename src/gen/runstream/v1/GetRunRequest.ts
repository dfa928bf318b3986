// Original file: runstream/v1/history.proto


export interface GetRunRequest {
  'thread_id'?: (string);
  'run_id'?: (string);
  'user_id'?: (string);
}

export interface GetRunRequest__Output {
  'thread_id': (string);
  'run_id': (string);
  'user_id': (string);
}
