// Original file: runstream/v1/runstream.proto

import type { Category as _runstream_v1_Category, Category__Output as _runstream_v1_Category__Output } from '../../runstream/v1/Category.js';
import type { Timestamp as _google_protobuf_Timestamp, Timestamp__Output as _google_protobuf_Timestamp__Output } from '../../google/protobuf/Timestamp.js';
import type { Long } from '@grpc/proto-loader';

export interface Event {
  'thread_id'?: (string);
  'run_id'?: (string);
  'event_type'?: (string);
  'category'?: (_runstream_v1_Category);
  'content_json'?: (string);
  'metadata_json'?: (string);
  'event_id'?: (string);
  'created_at'?: (_google_protobuf_Timestamp | null);
  'user_id'?: (string);
  'category_name'?: (string);
  'created_at_text'?: (string);
  'seq'?: (number | string | Long);
  'offset'?: (number | string | Long);
}

export interface Event__Output {
  'thread_id': (string);
  'run_id': (string);
  'event_type': (string);
  'category': (_runstream_v1_Category__Output);
  'content_json': (string);
  'metadata_json': (string);
  'event_id': (string);
  'created_at': (_google_protobuf_Timestamp__Output | null);
  'user_id': (string);
  'category_name': (string);
  'created_at_text': (string);
  'seq': (number);
  'offset': (number);
}
