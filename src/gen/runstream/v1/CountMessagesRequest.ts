// Original file: runstream/v1/history.proto


export interface CountMessagesRequest {
  'thread_id'?: (string);
  'run_id'?: (string);
  'user_id'?: (string);
}

export interface CountMessagesRequest__Output {
  'thread_id': (string);
  'run_id': (string);
  'user_id': (string);
}
