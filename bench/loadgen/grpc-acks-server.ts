/**
 * Load generator side of B-grpc-acks: a bare grpc-js server serving the broker's own
 * `runstream.v1.Ingest` (the same proto-loader serializers), in its own process as the
 * broker is. Each request of a PublishStream is answered at once with one ack per event, as
 * the broker answers an ACCEPTED request, and nothing else is done: no validation, no log.
 * The producer load generator drives it exactly as it drives the broker in scenario 3, so its
 * CPU per event is what gRPC alone costs ingest at that load. It serves until it is killed.
 */
import * as grpc from '@grpc/grpc-js';
import type { PublishRequest__Output } from '../../src/gen/runstream/v1/PublishRequest.js';
import type { PublishResponse } from '../../src/gen/runstream/v1/PublishResponse.js';
import { loadProto } from '../../src/proto.js';
import { type LoadgenIo, runLoadgen } from '../lib/loadgen.js';

export interface GrpcAcksServerInfo {
  readonly port: number;
}

let offset = 0;

/** The broker's ACCEPTED answer: an ack per event, its log offset filled. */
function answer(req: PublishRequest__Output): PublishResponse {
  return {
    acks: req.events.map((e) => ({ event_id: e.event_id, duplicate: false, seq: 0, offset: ++offset })),
  };
}

async function main(_: object, io: LoadgenIo): Promise<never> {
  const server = new grpc.Server();
  server.addService(loadProto().proto.runstream.v1.Ingest.service, {
    Publish: (
      call: grpc.ServerUnaryCall<PublishRequest__Output, PublishResponse>,
      callback: grpc.sendUnaryData<PublishResponse>,
    ) => callback(null, answer(call.request)),
    PublishStream: (call: grpc.ServerDuplexStream<PublishRequest__Output, PublishResponse>) => {
      call.on('data', (req: PublishRequest__Output) => call.write(answer(req)));
      call.on('end', () => call.end());
      call.on('error', () => undefined);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  io.ready({ port } satisfies GrpcAcksServerInfo);
  return new Promise<never>(() => undefined);
}

runLoadgen(main);
