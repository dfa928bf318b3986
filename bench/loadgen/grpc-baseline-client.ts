/**
 * Load generator side of B-grpc: one client-streaming call carrying the benchmark's
 * token events in batches (PublishRequest messages, ACCEPTED), written as fast as the
 * call's flow control allows; done when the server's response arrives.
 */
import type * as grpc from '@grpc/grpc-js';
import type { Event } from '../../src/client/ingest-client.js';
import type { PublishRequest } from '../../src/gen/runstream/v1/PublishRequest.js';
import { type LoadgenIo, runLoadgen } from '../lib/loadgen.js';
import { makeThreads, nextTokenEvent } from '../lib/payload.js';
import { baselineClient, startPublish } from './grpc-baseline.js';

export interface GrpcBaselineClientArgs {
  readonly target: string;
  readonly events: number;
  readonly threads: number;
  readonly batchSize: number;
}

export interface GrpcBaselineClientResult {
  readonly events: number;
  readonly ms: number;
}

async function main(a: GrpcBaselineClientArgs, io: LoadgenIo): Promise<GrpcBaselineClientResult> {
  const threads = makeThreads(a.threads);
  const requests: PublishRequest[] = [];
  for (let i = 0; i < a.events; i += a.batchSize) {
    const events: Event[] = [];
    for (let k = i; k < Math.min(i + a.batchSize, a.events); k++) {
      events.push(nextTokenEvent(threads[k % threads.length] as (typeof threads)[number]));
    }
    requests.push({ events, ack: 'ACCEPTED' });
  }
  const client = baselineClient(a.target);
  await new Promise<void>((resolve, reject) =>
    client.waitForReady(Date.now() + 10_000, (err) => (err ? reject(err) : resolve())),
  );
  io.ready();
  await io.go;

  const t0 = performance.now();
  let settle: (err: grpc.ServiceError | null) => void = () => undefined;
  const answered = new Promise<void>((resolve, reject) => {
    settle = (err) => (err ? reject(err) : resolve());
  });
  const writer = startPublish(client, (err) => settle(err));
  for (const r of requests) {
    if (!writer.write(r)) await new Promise((resolve) => writer.once('drain', resolve));
  }
  writer.end();
  await answered;
  const ms = performance.now() - t0;
  client.close();
  return { events: a.events, ms };
}

runLoadgen(main);
