/**
 * Load generator side of B-grpc: the bare grpc-js server, in its own process as the
 * broker is. It decodes every PublishRequest of a client stream, counts the events and
 * answers when the stream ends. The result comes after the first call is over.
 */
import * as grpc from '@grpc/grpc-js';
import type { PublishRequest__Output } from '../../src/gen/runstream/v1/PublishRequest.js';
import type { PublishResponse } from '../../src/gen/runstream/v1/PublishResponse.js';
import { type LoadgenIo, runLoadgen } from '../lib/loadgen.js';
import { baselineService } from './grpc-baseline.js';

export interface GrpcBaselineServerInfo {
  readonly port: number;
}

export interface GrpcBaselineServerResult {
  readonly events: number;
}

async function main(_: object, io: LoadgenIo): Promise<GrpcBaselineServerResult> {
  const server = new grpc.Server({ 'grpc.max_receive_message_length': 64 * 1024 * 1024 });
  const served = new Promise<number>((resolve) => {
    server.addService(baselineService(), {
      Publish: (
        call: grpc.ServerReadableStream<PublishRequest__Output, PublishResponse>,
        callback: grpc.sendUnaryData<PublishResponse>,
      ) => {
        let events = 0;
        call.on('data', (req: PublishRequest__Output) => {
          events += req.events.length;
        });
        call.on('end', () => {
          callback(null, { acks: [] });
          resolve(events);
        });
      },
    });
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  io.ready({ port } satisfies GrpcBaselineServerInfo);
  // The server stays up (answering) until the parent kills this process.
  return { events: await served };
}

runLoadgen(main);
