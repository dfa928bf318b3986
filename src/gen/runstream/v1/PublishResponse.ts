// Original file: runstream/v1/runstream.proto

import type { EventAck as _runstream_v1_EventAck, EventAck__Output as _runstream_v1_EventAck__Output } from './EventAck.js';
import type { Control as _runstream_v1_Control, Control__Output as _runstream_v1_Control__Output } from './Control.js';

export interface PublishResponse {
  'acks'?: (_runstream_v1_EventAck)[];
  'control'?: (_runstream_v1_Control | null);
}

export interface PublishResponse__Output {
  'acks': (_runstream_v1_EventAck__Output)[];
  'control': (_runstream_v1_Control__Output | null);
}
