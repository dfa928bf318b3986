// Original file: runstream/v1/history.proto

import type { Long } from '@grpc/proto-loader';

export interface ChatToolCall {
  'id'?: (string);
  'name'?: (string);
  'arguments'?: (string);
  'seq'?: (number | string | Long);
}

export interface ChatToolCall__Output {
  'id': (string);
  'name': (string);
  'arguments': (string);
  'seq': (number);
}
