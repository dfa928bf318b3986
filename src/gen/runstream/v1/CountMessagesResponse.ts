// Original file: runstream/v1/history.proto

import type { Long } from '@grpc/proto-loader';

export interface CountMessagesResponse {
  'count'?: (number | string | Long);
}

export interface CountMessagesResponse__Output {
  'count': (number);
}
