// Original file: runstream/v1/runstream.proto

import type { CancelRun as _runstream_v1_CancelRun, CancelRun__Output as _runstream_v1_CancelRun__Output } from './CancelRun.js';

export interface Control {
  'cancel'?: (_runstream_v1_CancelRun | null);
  'kind'?: "cancel";
}

export interface Control__Output {
  'cancel'?: (_runstream_v1_CancelRun__Output | null);
  'kind'?: "cancel";
}
