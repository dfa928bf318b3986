// Original file: proto/runstream/v1/runstream.proto

import type { EventAck as _runstream_v1_EventAck, EventAck__Output as _runstream_v1_EventAck__Output } from '../../runstream/v1/EventAck.js';

export interface PublishResponse {
  'acks'?: (_runstream_v1_EventAck)[];
}

export interface PublishResponse__Output {
  'acks': (_runstream_v1_EventAck__Output)[];
}
