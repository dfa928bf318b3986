// Original file: runstream/v1/subscriber.proto

import type { Event as _runstream_v1_Event, Event__Output as _runstream_v1_Event__Output } from './Event.js';
import type { Long } from '@grpc/proto-loader';

export interface _runstream_v1_SubscribeResponse_Deleted {
  'thread_id'?: (string);
  'run_id'?: (string);
}

export interface _runstream_v1_SubscribeResponse_Deleted__Output {
  'thread_id': (string);
  'run_id': (string);
}

export interface _runstream_v1_SubscribeResponse_End {
  'run_id'?: (string);
  'seq'?: (number | string | Long);
  'status'?: (string);
}

export interface _runstream_v1_SubscribeResponse_End__Output {
  'run_id': (string);
  'seq': (number);
  'status': (string);
}

export interface _runstream_v1_SubscribeResponse_Live {
  'seq'?: (number | string | Long);
}

export interface _runstream_v1_SubscribeResponse_Live__Output {
  'seq': (number);
}

export interface SubscribeResponse {
  'event'?: (_runstream_v1_Event | null);
  'live'?: (_runstream_v1_SubscribeResponse_Live | null);
  'end'?: (_runstream_v1_SubscribeResponse_End | null);
  'deleted'?: (_runstream_v1_SubscribeResponse_Deleted | null);
  'frame'?: "event"|"live"|"end"|"deleted";
}

export interface SubscribeResponse__Output {
  'event'?: (_runstream_v1_Event__Output | null);
  'live'?: (_runstream_v1_SubscribeResponse_Live__Output | null);
  'end'?: (_runstream_v1_SubscribeResponse_End__Output | null);
  'deleted'?: (_runstream_v1_SubscribeResponse_Deleted__Output | null);
  'frame'?: "event"|"live"|"end"|"deleted";
}
