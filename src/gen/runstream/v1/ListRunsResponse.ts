// Original file: runstream/v1/history.proto

import type { Run as _runstream_v1_Run, Run__Output as _runstream_v1_Run__Output } from './Run.js';
import type { Long } from '@grpc/proto-loader';

export interface ListRunsResponse {
  'runs'?: (_runstream_v1_Run)[];
  'next_before_seq'?: (number | string | Long);
  'has_more'?: (boolean);
}

export interface ListRunsResponse__Output {
  'runs': (_runstream_v1_Run__Output)[];
  'next_before_seq': (number);
  'has_more': (boolean);
}
