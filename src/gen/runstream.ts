import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { Timestamp as _google_protobuf_Timestamp, Timestamp__Output as _google_protobuf_Timestamp__Output } from './google/protobuf/Timestamp.js';
import type { CancelRun as _runstream_v1_CancelRun, CancelRun__Output as _runstream_v1_CancelRun__Output } from './runstream/v1/CancelRun.js';
import type { Control as _runstream_v1_Control, Control__Output as _runstream_v1_Control__Output } from './runstream/v1/Control.js';
import type { Event as _runstream_v1_Event, Event__Output as _runstream_v1_Event__Output } from './runstream/v1/Event.js';
import type { EventAck as _runstream_v1_EventAck, EventAck__Output as _runstream_v1_EventAck__Output } from './runstream/v1/EventAck.js';
import type { IngestClient as _runstream_v1_IngestClient, IngestDefinition as _runstream_v1_IngestDefinition } from './runstream/v1/Ingest.js';
import type { PublishRequest as _runstream_v1_PublishRequest, PublishRequest__Output as _runstream_v1_PublishRequest__Output } from './runstream/v1/PublishRequest.js';
import type { PublishResponse as _runstream_v1_PublishResponse, PublishResponse__Output as _runstream_v1_PublishResponse__Output } from './runstream/v1/PublishResponse.js';

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
      Control: MessageTypeDefinition<_runstream_v1_Control, _runstream_v1_Control__Output>
      Event: MessageTypeDefinition<_runstream_v1_Event, _runstream_v1_Event__Output>
      EventAck: MessageTypeDefinition<_runstream_v1_EventAck, _runstream_v1_EventAck__Output>
      Ingest: SubtypeConstructor<typeof grpc.Client, _runstream_v1_IngestClient> & { service: _runstream_v1_IngestDefinition }
      PublishRequest: MessageTypeDefinition<_runstream_v1_PublishRequest, _runstream_v1_PublishRequest__Output>
      PublishResponse: MessageTypeDefinition<_runstream_v1_PublishResponse, _runstream_v1_PublishResponse__Output>
    }
  }
}

