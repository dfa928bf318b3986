// Original file: runstream/v1/history.proto

import type { Long } from '@grpc/proto-loader';

export interface DeleteResponse {
  'deleted_events'?: (number | string | Long);
  'deleted_runs'?: (number | string | Long);
  'purged_messages'?: (number | string | Long);
  'head_seq'?: (number | string | Long);
}

export interface DeleteResponse__Output {
  'deleted_events': (number);
  'deleted_runs': (number);
  'purged_messages': (number);
  'head_seq': (number);
}
