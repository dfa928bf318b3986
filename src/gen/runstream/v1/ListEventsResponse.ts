// Original file: runstream/v1/history.proto

import type { Event as _runstream_v1_Event, Event__Output as _runstream_v1_Event__Output } from './Event.js';
import type { Long } from '@grpc/proto-loader';

export interface ListEventsResponse {
  'events'?: (_runstream_v1_Event)[];
  'next_after_seq'?: (number | string | Long);
  'next_before_seq'?: (number | string | Long);
  'has_more'?: (boolean);
}

export interface ListEventsResponse__Output {
  'events': (_runstream_v1_Event__Output)[];
  'next_after_seq': (number);
  'next_before_seq': (number);
  'has_more': (boolean);
}
