// Original file: runstream/v1/history.proto

import type { RunStatus as _runstream_v1_RunStatus, RunStatus__Output as _runstream_v1_RunStatus__Output } from './RunStatus.js';
import type { Timestamp as _google_protobuf_Timestamp, Timestamp__Output as _google_protobuf_Timestamp__Output } from '../../google/protobuf/Timestamp.js';
import type { Long } from '@grpc/proto-loader';

export interface Run {
  'thread_id'?: (string);
  'run_id'?: (string);
  'user_id'?: (string);
  'status'?: (_runstream_v1_RunStatus);
  'first_seq'?: (number | string | Long);
  'last_seq'?: (number | string | Long);
  'end_seq'?: (number | string | Long);
  'event_count'?: (number | string | Long);
  'message_count'?: (number | string | Long);
  'trace_count'?: (number | string | Long);
  'lifecycle_count'?: (number | string | Long);
  'started_at'?: (_google_protobuf_Timestamp | null);
  'updated_at'?: (_google_protobuf_Timestamp | null);
  'ended_at'?: (_google_protobuf_Timestamp | null);
  'metadata_json'?: (string);
  'outcome_json'?: (string);
}

export interface Run__Output {
  'thread_id': (string);
  'run_id': (string);
  'user_id': (string);
  'status': (_runstream_v1_RunStatus__Output);
  'first_seq': (number);
  'last_seq': (number);
  'end_seq': (number);
  'event_count': (number);
  'message_count': (number);
  'trace_count': (number);
  'lifecycle_count': (number);
  'started_at': (_google_protobuf_Timestamp__Output | null);
  'updated_at': (_google_protobuf_Timestamp__Output | null);
  'ended_at': (_google_protobuf_Timestamp__Output | null);
  'metadata_json': (string);
  'outcome_json': (string);
}
