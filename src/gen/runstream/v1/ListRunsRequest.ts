// Original file: runstream/v1/history.proto

import type { RunStatus as _runstream_v1_RunStatus, RunStatus__Output as _runstream_v1_RunStatus__Output } from './RunStatus.js';
import type { Long } from '@grpc/proto-loader';

export interface ListRunsRequest {
  'thread_id'?: (string);
  'before_seq'?: (number | string | Long);
  'limit'?: (number);
  'statuses'?: (_runstream_v1_RunStatus)[];
  'user_id'?: (string);
}

export interface ListRunsRequest__Output {
  'thread_id': (string);
  'before_seq': (number);
  'limit': (number);
  'statuses': (_runstream_v1_RunStatus__Output)[];
  'user_id': (string);
}
