import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { Timestamp as _google_protobuf_Timestamp, Timestamp__Output as _google_protobuf_Timestamp__Output } from './google/protobuf/Timestamp.js';
import type { CancelRun as _runstream_v1_CancelRun, CancelRun__Output as _runstream_v1_CancelRun__Output } from './runstream/v1/CancelRun.js';
import type { ChatMessage as _runstream_v1_ChatMessage, ChatMessage__Output as _runstream_v1_ChatMessage__Output } from './runstream/v1/ChatMessage.js';
import type { ChatToolCall as _runstream_v1_ChatToolCall, ChatToolCall__Output as _runstream_v1_ChatToolCall__Output } from './runstream/v1/ChatToolCall.js';
import type { Control as _runstream_v1_Control, Control__Output as _runstream_v1_Control__Output } from './runstream/v1/Control.js';
import type { CountMessagesRequest as _runstream_v1_CountMessagesRequest, CountMessagesRequest__Output as _runstream_v1_CountMessagesRequest__Output } from './runstream/v1/CountMessagesRequest.js';
import type { CountMessagesResponse as _runstream_v1_CountMessagesResponse, CountMessagesResponse__Output as _runstream_v1_CountMessagesResponse__Output } from './runstream/v1/CountMessagesResponse.js';
import type { DeleteResponse as _runstream_v1_DeleteResponse, DeleteResponse__Output as _runstream_v1_DeleteResponse__Output } from './runstream/v1/DeleteResponse.js';
import type { DeleteRunRequest as _runstream_v1_DeleteRunRequest, DeleteRunRequest__Output as _runstream_v1_DeleteRunRequest__Output } from './runstream/v1/DeleteRunRequest.js';
import type { DeleteThreadRequest as _runstream_v1_DeleteThreadRequest, DeleteThreadRequest__Output as _runstream_v1_DeleteThreadRequest__Output } from './runstream/v1/DeleteThreadRequest.js';
import type { Event as _runstream_v1_Event, Event__Output as _runstream_v1_Event__Output } from './runstream/v1/Event.js';
import type { EventAck as _runstream_v1_EventAck, EventAck__Output as _runstream_v1_EventAck__Output } from './runstream/v1/EventAck.js';
import type { GetRunRequest as _runstream_v1_GetRunRequest, GetRunRequest__Output as _runstream_v1_GetRunRequest__Output } from './runstream/v1/GetRunRequest.js';
import type { HistoryClient as _runstream_v1_HistoryClient, HistoryDefinition as _runstream_v1_HistoryDefinition } from './runstream/v1/History.js';
import type { IngestClient as _runstream_v1_IngestClient, IngestDefinition as _runstream_v1_IngestDefinition } from './runstream/v1/Ingest.js';
import type { ListChatMessagesRequest as _runstream_v1_ListChatMessagesRequest, ListChatMessagesRequest__Output as _runstream_v1_ListChatMessagesRequest__Output } from './runstream/v1/ListChatMessagesRequest.js';
import type { ListChatMessagesResponse as _runstream_v1_ListChatMessagesResponse, ListChatMessagesResponse__Output as _runstream_v1_ListChatMessagesResponse__Output } from './runstream/v1/ListChatMessagesResponse.js';
import type { ListEventsRequest as _runstream_v1_ListEventsRequest, ListEventsRequest__Output as _runstream_v1_ListEventsRequest__Output } from './runstream/v1/ListEventsRequest.js';
import type { ListEventsResponse as _runstream_v1_ListEventsResponse, ListEventsResponse__Output as _runstream_v1_ListEventsResponse__Output } from './runstream/v1/ListEventsResponse.js';
import type { ListMessagesByRunRequest as _runstream_v1_ListMessagesByRunRequest, ListMessagesByRunRequest__Output as _runstream_v1_ListMessagesByRunRequest__Output } from './runstream/v1/ListMessagesByRunRequest.js';
import type { ListMessagesRequest as _runstream_v1_ListMessagesRequest, ListMessagesRequest__Output as _runstream_v1_ListMessagesRequest__Output } from './runstream/v1/ListMessagesRequest.js';
import type { ListRunsRequest as _runstream_v1_ListRunsRequest, ListRunsRequest__Output as _runstream_v1_ListRunsRequest__Output } from './runstream/v1/ListRunsRequest.js';
import type { ListRunsResponse as _runstream_v1_ListRunsResponse, ListRunsResponse__Output as _runstream_v1_ListRunsResponse__Output } from './runstream/v1/ListRunsResponse.js';
import type { PublishRequest as _runstream_v1_PublishRequest, PublishRequest__Output as _runstream_v1_PublishRequest__Output } from './runstream/v1/PublishRequest.js';
import type { PublishResponse as _runstream_v1_PublishResponse, PublishResponse__Output as _runstream_v1_PublishResponse__Output } from './runstream/v1/PublishResponse.js';
import type { Run as _runstream_v1_Run, Run__Output as _runstream_v1_Run__Output } from './runstream/v1/Run.js';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  google: {
    protobuf: {
      Timestamp: MessageTypeDefinition<_google_protobuf_Timestamp, _google_protobuf_Timestamp__Output>
    }
  }
  runstream: {
    v1: {
      AckLevel: EnumTypeDefinition
      CancelRun: MessageTypeDefinition<_runstream_v1_CancelRun, _runstream_v1_CancelRun__Output>
      Category: EnumTypeDefinition
      ChatMessage: MessageTypeDefinition<_runstream_v1_ChatMessage, _runstream_v1_ChatMessage__Output>
      ChatRole: EnumTypeDefinition
      ChatToolCall: MessageTypeDefinition<_runstream_v1_ChatToolCall, _runstream_v1_ChatToolCall__Output>
      Control: MessageTypeDefinition<_runstream_v1_Control, _runstream_v1_Control__Output>
      CountMessagesRequest: MessageTypeDefinition<_runstream_v1_CountMessagesRequest, _runstream_v1_CountMessagesRequest__Output>
      CountMessagesResponse: MessageTypeDefinition<_runstream_v1_CountMessagesResponse, _runstream_v1_CountMessagesResponse__Output>
      DeleteResponse: MessageTypeDefinition<_runstream_v1_DeleteResponse, _runstream_v1_DeleteResponse__Output>
      DeleteRunRequest: MessageTypeDefinition<_runstream_v1_DeleteRunRequest, _runstream_v1_DeleteRunRequest__Output>
      DeleteThreadRequest: MessageTypeDefinition<_runstream_v1_DeleteThreadRequest, _runstream_v1_DeleteThreadRequest__Output>
      Event: MessageTypeDefinition<_runstream_v1_Event, _runstream_v1_Event__Output>
      EventAck: MessageTypeDefinition<_runstream_v1_EventAck, _runstream_v1_EventAck__Output>
      GetRunRequest: MessageTypeDefinition<_runstream_v1_GetRunRequest, _runstream_v1_GetRunRequest__Output>
      History: SubtypeConstructor<typeof grpc.Client, _runstream_v1_HistoryClient> & { service: _runstream_v1_HistoryDefinition }
      Ingest: SubtypeConstructor<typeof grpc.Client, _runstream_v1_IngestClient> & { service: _runstream_v1_IngestDefinition }
      ListChatMessagesRequest: MessageTypeDefinition<_runstream_v1_ListChatMessagesRequest, _runstream_v1_ListChatMessagesRequest__Output>
      ListChatMessagesResponse: MessageTypeDefinition<_runstream_v1_ListChatMessagesResponse, _runstream_v1_ListChatMessagesResponse__Output>
      ListEventsRequest: MessageTypeDefinition<_runstream_v1_ListEventsRequest, _runstream_v1_ListEventsRequest__Output>
      ListEventsResponse: MessageTypeDefinition<_runstream_v1_ListEventsResponse, _runstream_v1_ListEventsResponse__Output>
      ListMessagesByRunRequest: MessageTypeDefinition<_runstream_v1_ListMessagesByRunRequest, _runstream_v1_ListMessagesByRunRequest__Output>
      ListMessagesRequest: MessageTypeDefinition<_runstream_v1_ListMessagesRequest, _runstream_v1_ListMessagesRequest__Output>
      ListRunsRequest: MessageTypeDefinition<_runstream_v1_ListRunsRequest, _runstream_v1_ListRunsRequest__Output>
      ListRunsResponse: MessageTypeDefinition<_runstream_v1_ListRunsResponse, _runstream_v1_ListRunsResponse__Output>
      PublishRequest: MessageTypeDefinition<_runstream_v1_PublishRequest, _runstream_v1_PublishRequest__Output>
      PublishResponse: MessageTypeDefinition<_runstream_v1_PublishResponse, _runstream_v1_PublishResponse__Output>
      Run: MessageTypeDefinition<_runstream_v1_Run, _runstream_v1_Run__Output>
      RunStatus: EnumTypeDefinition
    }
  }
}

