// Original file: runstream/v1/runstream.proto

import type { Long } from '@grpc/proto-loader';

export interface EventAck {
  'event_id'?: (string);
  'duplicate'?: (boolean);
  'seq'?: (number | string | Long);
  'offset'?: (number | string | Long);
  'rejected'?: (string);
}

export interface EventAck__Output {
  'event_id': (string);
  'duplicate': (boolean);
  'seq': (number);
  'offset': (number);
  'rejected': (string);
}
