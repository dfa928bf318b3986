// Original file: runstream/v1/subscriber.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { SubscribeRequest as _runstream_v1_SubscribeRequest, SubscribeRequest__Output as _runstream_v1_SubscribeRequest__Output } from './SubscribeRequest.js';
import type { SubscribeResponse as _runstream_v1_SubscribeResponse, SubscribeResponse__Output as _runstream_v1_SubscribeResponse__Output } from './SubscribeResponse.js';

export interface SubscriberClient extends grpc.Client {
  Subscribe(argument: _runstream_v1_SubscribeRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_runstream_v1_SubscribeResponse__Output>;
  Subscribe(argument: _runstream_v1_SubscribeRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_runstream_v1_SubscribeResponse__Output>;
  subscribe(argument: _runstream_v1_SubscribeRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_runstream_v1_SubscribeResponse__Output>;
  subscribe(argument: _runstream_v1_SubscribeRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_runstream_v1_SubscribeResponse__Output>;
  
}

export interface SubscriberHandlers extends grpc.UntypedServiceImplementation {
  Subscribe: grpc.handleServerStreamingCall<_runstream_v1_SubscribeRequest__Output, _runstream_v1_SubscribeResponse>;
  
}

export interface SubscriberDefinition extends grpc.ServiceDefinition {
  Subscribe: MethodDefinition<_runstream_v1_SubscribeRequest, _runstream_v1_SubscribeResponse, _runstream_v1_SubscribeRequest__Output, _runstream_v1_SubscribeResponse__Output>
}
