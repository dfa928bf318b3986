/**
 * B-grpc, the gRPC baseline for ingest: a bare grpc-js server (its own process) with one
 * client-streaming method that decodes the broker's PublishRequest messages and does
 * nothing else, fed the same token events in batches by a load-generator client.
 */

import { type CpuMs, coresUsed, cpuPerEvent, cpuSnapshot } from '../lib/cpu.js';
import { forkLoadgen } from '../lib/loadgen.js';
import type { GrpcBaselineClientArgs, GrpcBaselineClientResult } from '../loadgen/grpc-baseline-client.js';
import type { GrpcBaselineServerInfo, GrpcBaselineServerResult } from '../loadgen/grpc-baseline-server.js';

export interface GrpcBaselineOptions {
  readonly events: number;
  readonly threads: number;
  readonly batchSize: number;
}

export interface GrpcBaselineResult {
  readonly events: number;
  /** Events the server decoded. */
  readonly received: number;
  readonly ms: number;
  readonly eventsPerS: number;
  /** The bare server's CPU is reported as "broker". */
  readonly cores: CpuMs | undefined;
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
}

export async function runGrpcBaseline(o: GrpcBaselineOptions): Promise<GrpcBaselineResult> {
  await using server = await forkLoadgen<GrpcBaselineServerResult, GrpcBaselineServerInfo>(
    'grpc-baseline-server',
    {},
  );
  await using client = await forkLoadgen<GrpcBaselineClientResult>('grpc-baseline-client', {
    target: `127.0.0.1:${server.info.port}`,
    ...o,
  } satisfies GrpcBaselineClientArgs);
  const before = cpuSnapshot([server.pid]);
  const t0 = performance.now();
  client.go();
  const sent = await client.result();
  const after = cpuSnapshot([server.pid]);
  const { events: received } = await server.result();
  return {
    events: sent.events,
    received,
    ms: sent.ms,
    eventsPerS: (received / sent.ms) * 1000,
    cores: coresUsed(before, after, performance.now() - t0),
    cpuUsPerEvent: cpuPerEvent(before, after, received),
  };
}
