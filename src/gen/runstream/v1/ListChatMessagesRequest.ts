// Original file: runstream/v1/history.proto

import type { Long } from '@grpc/proto-loader';

export interface ListChatMessagesRequest {
  'thread_id'?: (string);
  'run_id'?: (string);
  'after_seq'?: (number | string | Long);
  'before_seq'?: (number | string | Long);
  'limit'?: (number);
  'user_id'?: (string);
}

export interface ListChatMessagesRequest__Output {
  'thread_id': (string);
  'run_id': (string);
  'after_seq': (number);
  'before_seq': (number);
  'limit': (number);
  'user_id': (string);
}
