// Original file: runstream/v1/history.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { CountMessagesRequest as _runstream_v1_CountMessagesRequest, CountMessagesRequest__Output as _runstream_v1_CountMessagesRequest__Output } from './CountMessagesRequest.js';
import type { CountMessagesResponse as _runstream_v1_CountMessagesResponse, CountMessagesResponse__Output as _runstream_v1_CountMessagesResponse__Output } from './CountMessagesResponse.js';
import type { DeleteResponse as _runstream_v1_DeleteResponse, DeleteResponse__Output as _runstream_v1_DeleteResponse__Output } from './DeleteResponse.js';
import type { DeleteRunRequest as _runstream_v1_DeleteRunRequest, DeleteRunRequest__Output as _runstream_v1_DeleteRunRequest__Output } from './DeleteRunRequest.js';
import type { DeleteThreadRequest as _runstream_v1_DeleteThreadRequest, DeleteThreadRequest__Output as _runstream_v1_DeleteThreadRequest__Output } from './DeleteThreadRequest.js';
import type { GetRunRequest as _runstream_v1_GetRunRequest, GetRunRequest__Output as _runstream_v1_GetRunRequest__Output } from './GetRunRequest.js';
import type { ListChatMessagesRequest as _runstream_v1_ListChatMessagesRequest, ListChatMessagesRequest__Output as _runstream_v1_ListChatMessagesRequest__Output } from './ListChatMessagesRequest.js';
import type { ListChatMessagesResponse as _runstream_v1_ListChatMessagesResponse, ListChatMessagesResponse__Output as _runstream_v1_ListChatMessagesResponse__Output } from './ListChatMessagesResponse.js';
import type { ListEventsRequest as _runstream_v1_ListEventsRequest, ListEventsRequest__Output as _runstream_v1_ListEventsRequest__Output } from './ListEventsRequest.js';
import type { ListEventsResponse as _runstream_v1_ListEventsResponse, ListEventsResponse__Output as _runstream_v1_ListEventsResponse__Output } from './ListEventsResponse.js';
import type { ListMessagesByRunRequest as _runstream_v1_ListMessagesByRunRequest, ListMessagesByRunRequest__Output as _runstream_v1_ListMessagesByRunRequest__Output } from './ListMessagesByRunRequest.js';
import type { ListMessagesRequest as _runstream_v1_ListMessagesRequest, ListMessagesRequest__Output as _runstream_v1_ListMessagesRequest__Output } from './ListMessagesRequest.js';
import type { ListRunsRequest as _runstream_v1_ListRunsRequest, ListRunsRequest__Output as _runstream_v1_ListRunsRequest__Output } from './ListRunsRequest.js';
import type { ListRunsResponse as _runstream_v1_ListRunsResponse, ListRunsResponse__Output as _runstream_v1_ListRunsResponse__Output } from './ListRunsResponse.js';
import type { Run as _runstream_v1_Run, Run__Output as _runstream_v1_Run__Output } from './Run.js';

export interface HistoryClient extends grpc.Client {
  CountMessages(argument: _runstream_v1_CountMessagesRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_CountMessagesResponse__Output>): grpc.ClientUnaryCall;
  CountMessages(argument: _runstream_v1_CountMessagesRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_CountMessagesResponse__Output>): grpc.ClientUnaryCall;
  CountMessages(argument: _runstream_v1_CountMessagesRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_CountMessagesResponse__Output>): grpc.ClientUnaryCall;
  CountMessages(argument: _runstream_v1_CountMessagesRequest, callback: grpc.requestCallback<_runstream_v1_CountMessagesResponse__Output>): grpc.ClientUnaryCall;
  countMessages(argument: _runstream_v1_CountMessagesRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_CountMessagesResponse__Output>): grpc.ClientUnaryCall;
  countMessages(argument: _runstream_v1_CountMessagesRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_CountMessagesResponse__Output>): grpc.ClientUnaryCall;
  countMessages(argument: _runstream_v1_CountMessagesRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_CountMessagesResponse__Output>): grpc.ClientUnaryCall;
  countMessages(argument: _runstream_v1_CountMessagesRequest, callback: grpc.requestCallback<_runstream_v1_CountMessagesResponse__Output>): grpc.ClientUnaryCall;
  
  DeleteRun(argument: _runstream_v1_DeleteRunRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  DeleteRun(argument: _runstream_v1_DeleteRunRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  DeleteRun(argument: _runstream_v1_DeleteRunRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  DeleteRun(argument: _runstream_v1_DeleteRunRequest, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  deleteRun(argument: _runstream_v1_DeleteRunRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  deleteRun(argument: _runstream_v1_DeleteRunRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  deleteRun(argument: _runstream_v1_DeleteRunRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  deleteRun(argument: _runstream_v1_DeleteRunRequest, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  
  DeleteThread(argument: _runstream_v1_DeleteThreadRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  DeleteThread(argument: _runstream_v1_DeleteThreadRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  DeleteThread(argument: _runstream_v1_DeleteThreadRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  DeleteThread(argument: _runstream_v1_DeleteThreadRequest, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  deleteThread(argument: _runstream_v1_DeleteThreadRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  deleteThread(argument: _runstream_v1_DeleteThreadRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  deleteThread(argument: _runstream_v1_DeleteThreadRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  deleteThread(argument: _runstream_v1_DeleteThreadRequest, callback: grpc.requestCallback<_runstream_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  
  GetRun(argument: _runstream_v1_GetRunRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_Run__Output>): grpc.ClientUnaryCall;
  GetRun(argument: _runstream_v1_GetRunRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_Run__Output>): grpc.ClientUnaryCall;
  GetRun(argument: _runstream_v1_GetRunRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_Run__Output>): grpc.ClientUnaryCall;
  GetRun(argument: _runstream_v1_GetRunRequest, callback: grpc.requestCallback<_runstream_v1_Run__Output>): grpc.ClientUnaryCall;
  getRun(argument: _runstream_v1_GetRunRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_Run__Output>): grpc.ClientUnaryCall;
  getRun(argument: _runstream_v1_GetRunRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_Run__Output>): grpc.ClientUnaryCall;
  getRun(argument: _runstream_v1_GetRunRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_Run__Output>): grpc.ClientUnaryCall;
  getRun(argument: _runstream_v1_GetRunRequest, callback: grpc.requestCallback<_runstream_v1_Run__Output>): grpc.ClientUnaryCall;
  
  ListChatMessages(argument: _runstream_v1_ListChatMessagesRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListChatMessagesResponse__Output>): grpc.ClientUnaryCall;
  ListChatMessages(argument: _runstream_v1_ListChatMessagesRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_ListChatMessagesResponse__Output>): grpc.ClientUnaryCall;
  ListChatMessages(argument: _runstream_v1_ListChatMessagesRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListChatMessagesResponse__Output>): grpc.ClientUnaryCall;
  ListChatMessages(argument: _runstream_v1_ListChatMessagesRequest, callback: grpc.requestCallback<_runstream_v1_ListChatMessagesResponse__Output>): grpc.ClientUnaryCall;
  listChatMessages(argument: _runstream_v1_ListChatMessagesRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListChatMessagesResponse__Output>): grpc.ClientUnaryCall;
  listChatMessages(argument: _runstream_v1_ListChatMessagesRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_ListChatMessagesResponse__Output>): grpc.ClientUnaryCall;
  listChatMessages(argument: _runstream_v1_ListChatMessagesRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListChatMessagesResponse__Output>): grpc.ClientUnaryCall;
  listChatMessages(argument: _runstream_v1_ListChatMessagesRequest, callback: grpc.requestCallback<_runstream_v1_ListChatMessagesResponse__Output>): grpc.ClientUnaryCall;
  
  ListEvents(argument: _runstream_v1_ListEventsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  ListEvents(argument: _runstream_v1_ListEventsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  ListEvents(argument: _runstream_v1_ListEventsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  ListEvents(argument: _runstream_v1_ListEventsRequest, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listEvents(argument: _runstream_v1_ListEventsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listEvents(argument: _runstream_v1_ListEventsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listEvents(argument: _runstream_v1_ListEventsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listEvents(argument: _runstream_v1_ListEventsRequest, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  
  ListMessages(argument: _runstream_v1_ListMessagesRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  ListMessages(argument: _runstream_v1_ListMessagesRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  ListMessages(argument: _runstream_v1_ListMessagesRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  ListMessages(argument: _runstream_v1_ListMessagesRequest, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listMessages(argument: _runstream_v1_ListMessagesRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listMessages(argument: _runstream_v1_ListMessagesRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listMessages(argument: _runstream_v1_ListMessagesRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listMessages(argument: _runstream_v1_ListMessagesRequest, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  
  ListMessagesByRun(argument: _runstream_v1_ListMessagesByRunRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  ListMessagesByRun(argument: _runstream_v1_ListMessagesByRunRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  ListMessagesByRun(argument: _runstream_v1_ListMessagesByRunRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  ListMessagesByRun(argument: _runstream_v1_ListMessagesByRunRequest, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listMessagesByRun(argument: _runstream_v1_ListMessagesByRunRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listMessagesByRun(argument: _runstream_v1_ListMessagesByRunRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listMessagesByRun(argument: _runstream_v1_ListMessagesByRunRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listMessagesByRun(argument: _runstream_v1_ListMessagesByRunRequest, callback: grpc.requestCallback<_runstream_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  
  ListRuns(argument: _runstream_v1_ListRunsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListRunsResponse__Output>): grpc.ClientUnaryCall;
  ListRuns(argument: _runstream_v1_ListRunsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_ListRunsResponse__Output>): grpc.ClientUnaryCall;
  ListRuns(argument: _runstream_v1_ListRunsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListRunsResponse__Output>): grpc.ClientUnaryCall;
  ListRuns(argument: _runstream_v1_ListRunsRequest, callback: grpc.requestCallback<_runstream_v1_ListRunsResponse__Output>): grpc.ClientUnaryCall;
  listRuns(argument: _runstream_v1_ListRunsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListRunsResponse__Output>): grpc.ClientUnaryCall;
  listRuns(argument: _runstream_v1_ListRunsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_ListRunsResponse__Output>): grpc.ClientUnaryCall;
  listRuns(argument: _runstream_v1_ListRunsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_ListRunsResponse__Output>): grpc.ClientUnaryCall;
  listRuns(argument: _runstream_v1_ListRunsRequest, callback: grpc.requestCallback<_runstream_v1_ListRunsResponse__Output>): grpc.ClientUnaryCall;
  
}

export interface HistoryHandlers extends grpc.UntypedServiceImplementation {
  CountMessages: grpc.handleUnaryCall<_runstream_v1_CountMessagesRequest__Output, _runstream_v1_CountMessagesResponse>;
  
  DeleteRun: grpc.handleUnaryCall<_runstream_v1_DeleteRunRequest__Output, _runstream_v1_DeleteResponse>;
  
  DeleteThread: grpc.handleUnaryCall<_runstream_v1_DeleteThreadRequest__Output, _runstream_v1_DeleteResponse>;
  
  GetRun: grpc.handleUnaryCall<_runstream_v1_GetRunRequest__Output, _runstream_v1_Run>;
  
  ListChatMessages: grpc.handleUnaryCall<_runstream_v1_ListChatMessagesRequest__Output, _runstream_v1_ListChatMessagesResponse>;
  
  ListEvents: grpc.handleUnaryCall<_runstream_v1_ListEventsRequest__Output, _runstream_v1_ListEventsResponse>;
  
  ListMessages: grpc.handleUnaryCall<_runstream_v1_ListMessagesRequest__Output, _runstream_v1_ListEventsResponse>;
  
  ListMessagesByRun: grpc.handleUnaryCall<_runstream_v1_ListMessagesByRunRequest__Output, _runstream_v1_ListEventsResponse>;
  
  ListRuns: grpc.handleUnaryCall<_runstream_v1_ListRunsRequest__Output, _runstream_v1_ListRunsResponse>;
  
}

export interface HistoryDefinition extends grpc.ServiceDefinition {
  CountMessages: MethodDefinition<_runstream_v1_CountMessagesRequest, _runstream_v1_CountMessagesResponse, _runstream_v1_CountMessagesRequest__Output, _runstream_v1_CountMessagesResponse__Output>
  DeleteRun: MethodDefinition<_runstream_v1_DeleteRunRequest, _runstream_v1_DeleteResponse, _runstream_v1_DeleteRunRequest__Output, _runstream_v1_DeleteResponse__Output>
  DeleteThread: MethodDefinition<_runstream_v1_DeleteThreadRequest, _runstream_v1_DeleteResponse, _runstream_v1_DeleteThreadRequest__Output, _runstream_v1_DeleteResponse__Output>
  GetRun: MethodDefinition<_runstream_v1_GetRunRequest, _runstream_v1_Run, _runstream_v1_GetRunRequest__Output, _runstream_v1_Run__Output>
  ListChatMessages: MethodDefinition<_runstream_v1_ListChatMessagesRequest, _runstream_v1_ListChatMessagesResponse, _runstream_v1_ListChatMessagesRequest__Output, _runstream_v1_ListChatMessagesResponse__Output>
  ListEvents: MethodDefinition<_runstream_v1_ListEventsRequest, _runstream_v1_ListEventsResponse, _runstream_v1_ListEventsRequest__Output, _runstream_v1_ListEventsResponse__Output>
  ListMessages: MethodDefinition<_runstream_v1_ListMessagesRequest, _runstream_v1_ListEventsResponse, _runstream_v1_ListMessagesRequest__Output, _runstream_v1_ListEventsResponse__Output>
  ListMessagesByRun: MethodDefinition<_runstream_v1_ListMessagesByRunRequest, _runstream_v1_ListEventsResponse, _runstream_v1_ListMessagesByRunRequest__Output, _runstream_v1_ListEventsResponse__Output>
  ListRuns: MethodDefinition<_runstream_v1_ListRunsRequest, _runstream_v1_ListRunsResponse, _runstream_v1_ListRunsRequest__Output, _runstream_v1_ListRunsResponse__Output>
}
