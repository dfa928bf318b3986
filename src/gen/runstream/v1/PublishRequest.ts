// Original file: runstream/v1/runstream.proto

import type { Event as _runstream_v1_Event, Event__Output as _runstream_v1_Event__Output } from './Event.js';
import type { AckLevel as _runstream_v1_AckLevel, AckLevel__Output as _runstream_v1_AckLevel__Output } from './AckLevel.js';

export interface PublishRequest {
  'events'?: (_runstream_v1_Event)[];
  'ack'?: (_runstream_v1_AckLevel);
}

export interface PublishRequest__Output {
  'events': (_runstream_v1_Event__Output)[];
  'ack': (_runstream_v1_AckLevel__Output);
}
