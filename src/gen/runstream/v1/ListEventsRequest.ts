// Original file: runstream/v1/history.proto

import type { Category as _runstream_v1_Category, Category__Output as _runstream_v1_Category__Output } from '../../runstream/v1/Category.js';
import type { Long } from '@grpc/proto-loader';

export interface ListEventsRequest {
  'thread_id'?: (string);
  'run_id'?: (string);
  'categories'?: (_runstream_v1_Category)[];
  'event_types'?: (string)[];
  'after_seq'?: (number | string | Long);
  'before_seq'?: (number | string | Long);
  'limit'?: (number);
  'user_id'?: (string);
  'category_names'?: (string)[];
  'metadata_task_id'?: (string);
}

export interface ListEventsRequest__Output {
  'thread_id': (string);
  'run_id': (string);
  'categories': (_runstream_v1_Category__Output)[];
  'event_types': (string)[];
  'after_seq': (number);
  'before_seq': (number);
  'limit': (number);
  'user_id': (string);
  'category_names': (string)[];
  'metadata_task_id': (string);
}
