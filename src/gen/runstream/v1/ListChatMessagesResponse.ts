// Original file: runstream/v1/history.proto

import type { ChatMessage as _runstream_v1_ChatMessage, ChatMessage__Output as _runstream_v1_ChatMessage__Output } from './ChatMessage.js';
import type { Long } from '@grpc/proto-loader';

export interface ListChatMessagesResponse {
  'messages'?: (_runstream_v1_ChatMessage)[];
  'next_after_seq'?: (number | string | Long);
  'next_before_seq'?: (number | string | Long);
  'has_more'?: (boolean);
}

export interface ListChatMessagesResponse__Output {
  'messages': (_runstream_v1_ChatMessage__Output)[];
  'next_after_seq': (number);
  'next_before_seq': (number);
  'has_more': (boolean);
}
