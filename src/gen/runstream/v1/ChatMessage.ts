// Original file: runstream/v1/history.proto

import type { ChatRole as _runstream_v1_ChatRole, ChatRole__Output as _runstream_v1_ChatRole__Output } from './ChatRole.js';
import type { ChatToolCall as _runstream_v1_ChatToolCall, ChatToolCall__Output as _runstream_v1_ChatToolCall__Output } from './ChatToolCall.js';
import type { Timestamp as _google_protobuf_Timestamp, Timestamp__Output as _google_protobuf_Timestamp__Output } from '../../google/protobuf/Timestamp.js';
import type { Long } from '@grpc/proto-loader';

export interface ChatMessage {
  'role'?: (_runstream_v1_ChatRole);
  'id'?: (string);
  'run_id'?: (string);
  'content'?: (string);
  'tool_calls'?: (_runstream_v1_ChatToolCall)[];
  'tool_call_id'?: (string);
  'name'?: (string);
  'is_error'?: (boolean);
  'first_seq'?: (number | string | Long);
  'last_seq'?: (number | string | Long);
  'event_count'?: (number);
  'created_at'?: (_google_protobuf_Timestamp | null);
  'metadata_json'?: (string);
  'user_id'?: (string);
}

export interface ChatMessage__Output {
  'role': (_runstream_v1_ChatRole__Output);
  'id': (string);
  'run_id': (string);
  'content': (string);
  'tool_calls': (_runstream_v1_ChatToolCall__Output)[];
  'tool_call_id': (string);
  'name': (string);
  'is_error': (boolean);
  'first_seq': (number);
  'last_seq': (number);
  'event_count': (number);
  'created_at': (_google_protobuf_Timestamp__Output | null);
  'metadata_json': (string);
  'user_id': (string);
}
