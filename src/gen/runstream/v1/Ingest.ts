// Original file: runstream/v1/runstream.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { PublishRequest as _runstream_v1_PublishRequest, PublishRequest__Output as _runstream_v1_PublishRequest__Output } from './PublishRequest.js';
import type { PublishResponse as _runstream_v1_PublishResponse, PublishResponse__Output as _runstream_v1_PublishResponse__Output } from './PublishResponse.js';

export interface IngestClient extends grpc.Client {
  Publish(argument: _runstream_v1_PublishRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_PublishResponse__Output>): grpc.ClientUnaryCall;
  Publish(argument: _runstream_v1_PublishRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_PublishResponse__Output>): grpc.ClientUnaryCall;
  Publish(argument: _runstream_v1_PublishRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_PublishResponse__Output>): grpc.ClientUnaryCall;
  Publish(argument: _runstream_v1_PublishRequest, callback: grpc.requestCallback<_runstream_v1_PublishResponse__Output>): grpc.ClientUnaryCall;
  publish(argument: _runstream_v1_PublishRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_PublishResponse__Output>): grpc.ClientUnaryCall;
  publish(argument: _runstream_v1_PublishRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_runstream_v1_PublishResponse__Output>): grpc.ClientUnaryCall;
  publish(argument: _runstream_v1_PublishRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_runstream_v1_PublishResponse__Output>): grpc.ClientUnaryCall;
  publish(argument: _runstream_v1_PublishRequest, callback: grpc.requestCallback<_runstream_v1_PublishResponse__Output>): grpc.ClientUnaryCall;
  
  PublishStream(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_runstream_v1_PublishRequest, _runstream_v1_PublishResponse__Output>;
  PublishStream(options?: grpc.CallOptions): grpc.ClientDuplexStream<_runstream_v1_PublishRequest, _runstream_v1_PublishResponse__Output>;
  publishStream(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_runstream_v1_PublishRequest, _runstream_v1_PublishResponse__Output>;
  publishStream(options?: grpc.CallOptions): grpc.ClientDuplexStream<_runstream_v1_PublishRequest, _runstream_v1_PublishResponse__Output>;
  
}

export interface IngestHandlers extends grpc.UntypedServiceImplementation {
  Publish: grpc.handleUnaryCall<_runstream_v1_PublishRequest__Output, _runstream_v1_PublishResponse>;
  
  PublishStream: grpc.handleBidiStreamingCall<_runstream_v1_PublishRequest__Output, _runstream_v1_PublishResponse>;
  
}

export interface IngestDefinition extends grpc.ServiceDefinition {
  Publish: MethodDefinition<_runstream_v1_PublishRequest, _runstream_v1_PublishResponse, _runstream_v1_PublishRequest__Output, _runstream_v1_PublishResponse__Output>
  PublishStream: MethodDefinition<_runstream_v1_PublishRequest, _runstream_v1_PublishResponse, _runstream_v1_PublishRequest__Output, _runstream_v1_PublishResponse__Output>
}
