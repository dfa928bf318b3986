/**
 * B-grpc's wire contract: a bare client-streaming method carrying the broker's own
 * `PublishRequest` messages (and answering one `PublishResponse`), serialised by the
 * same proto-loader definitions the broker's Ingest service uses, so both sides pay
 * what the broker's ingest pays to decode and encode them, and nothing more.
 */
import * as grpc from '@grpc/grpc-js';
import type { MethodDefinition, ServiceDefinition } from '@grpc/proto-loader';
import type { PublishRequest, PublishRequest__Output } from '../../src/gen/runstream/v1/PublishRequest.js';
import type { PublishResponse, PublishResponse__Output } from '../../src/gen/runstream/v1/PublishResponse.js';
import { loadProto } from '../../src/proto.js';

type Publish = MethodDefinition<
  PublishRequest,
  PublishResponse,
  PublishRequest__Output,
  PublishResponse__Output
>;

function publishMethod(): Publish {
  const ingest = loadProto().packageDefinition['runstream.v1.Ingest'] as ServiceDefinition;
  return ingest.PublishStream as Publish;
}

const PATH = '/bench.BaselineIngest/Publish';

/** `bench.BaselineIngest/Publish`: stream PublishRequest → PublishResponse. */
export function baselineService(): grpc.ServiceDefinition {
  const m = publishMethod();
  return {
    Publish: {
      path: PATH,
      requestStream: true,
      responseStream: false,
      requestSerialize: m.requestSerialize,
      requestDeserialize: m.requestDeserialize,
      responseSerialize: m.responseSerialize,
      responseDeserialize: m.responseDeserialize,
    },
  };
}

export function baselineClient(target: string): grpc.Client {
  return new grpc.Client(target, grpc.credentials.createInsecure(), {
    'grpc.max_send_message_length': 64 * 1024 * 1024,
  });
}

/** Starts a Publish call; `done` gets the server's answer once the stream has ended. */
export function startPublish(
  client: grpc.Client,
  done: grpc.requestCallback<PublishResponse__Output>,
): grpc.ClientWritableStream<PublishRequest> {
  const m = publishMethod();
  return client.makeClientStreamRequest(PATH, m.requestSerialize, m.responseDeserialize, done);
}
