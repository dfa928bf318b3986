// Original file: runstream/v1/history.proto


export interface DeleteThreadRequest {
  'thread_id'?: (string);
  'user_id'?: (string);
}

export interface DeleteThreadRequest__Output {
  'thread_id': (string);
  'user_id': (string);
}
