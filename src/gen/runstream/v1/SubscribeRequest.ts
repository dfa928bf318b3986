// Original file: runstream/v1/subscriber.proto

import type { Category as _runstream_v1_Category, Category__Output as _runstream_v1_Category__Output } from '../../runstream/v1/Category.js';
import type { Long } from '@grpc/proto-loader';

export interface SubscribeRequest {
  'thread_id'?: (string);
  'after_seq'?: (number | string | Long);
  'from_offset'?: (number | string | Long);
  'live_only'?: (boolean);
  'run_id'?: (string);
  'categories'?: (_runstream_v1_Category)[];
  'event_types'?: (string)[];
  'category_names'?: (string)[];
  'start'?: "after_seq"|"from_offset"|"live_only";
}

export interface SubscribeRequest__Output {
  'thread_id': (string);
  'after_seq'?: (number);
  'from_offset'?: (number);
  'live_only'?: (boolean);
  'run_id': (string);
  'categories': (_runstream_v1_Category__Output)[];
  'event_types': (string)[];
  'category_names': (string)[];
  'start'?: "after_seq"|"from_offset"|"live_only";
}
