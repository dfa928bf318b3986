/**
 * B-grpc-acks, the floor of ingest's gRPC at token rates: scenario 3's producer, load and
 * streams (one PublishStream per thread, its due events each tick as one request) against a
 * bare grpc-js server that answers every request with its acks at once
 * (bench/loadgen/grpc-acks-server.ts). The server's CPU per event is what grpc-js and the
 * broker's protobuf serializers alone cost at that load, before any of ingest's work; the
 * producer's send → ack latency is the gRPC round trip.
 *
 * B-ingest is the same with the bare server publishing each request to JetStream before it
 * answers (grpc-acks-server.ts `publish`), into a log with the broker's stream settings on the
 * run's nats-server: the CPU floor of ingest as a whole (gRPC and the log), and its send → ack
 * latency the floor of an ACCEPTED ack.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { DEFAULT_DUPLICATE_WINDOW_MS, DEFAULT_STREAM_MAX_AGE_MS } from '../../src/config.js';
import { DEFAULT_PARTITIONS } from '../../src/domain/partition.js';
import { ensureLogStream, partitionStream } from '../../src/log/streams.js';
import { Subjects } from '../../src/log/subjects.js';
import type { Servers } from '../../test/helpers/stack.js';
import { type CpuMs, coresUsed, cpuPerEvent, cpuSnapshot } from '../lib/cpu.js';
import { openLoad } from '../lib/drive.js';
import { forkLoadgen } from '../lib/loadgen.js';
import { makeThreads } from '../lib/payload.js';
import type { LatencySummary } from '../lib/stats.js';
import type { GrpcAcksServerArgs, GrpcAcksServerInfo } from '../loadgen/grpc-acks-server.js';
import type { ProducerArgs, ProducerInfo, ProducerResult } from '../loadgen/producer.js';

export interface GrpcAcksOptions {
  readonly rate: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  readonly threads: number;
  readonly streams: number;
  readonly batchSize: number;
  readonly mixed: boolean;
  readonly tickMs: number;
  readonly drainTimeoutMs: number;
}

export interface GrpcAcksResult {
  readonly rate: number;
  readonly sent: number;
  readonly acked: number;
  readonly sentPerS: number;
  readonly meanEventsPerRequest: number;
  /** Send → ack of the requests sent after the warm-up, ms. */
  readonly ackLatency: LatencySummary;
  /** The bare server's CPU is reported as "broker". */
  readonly cores: CpuMs | undefined;
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
}

/**
 * B-grpc-acks; with `servers`, B-ingest: the bare server publishes each request into a fresh
 * log on the run's nats-server (deleted after) before answering it.
 */
export async function runGrpcAcks(o: GrpcAcksOptions, servers?: Servers): Promise<GrpcAcksResult> {
  await using log = servers ? await floorLog(servers.nats.url) : undefined;
  await using server = await forkLoadgen<never, GrpcAcksServerInfo>('grpc-acks-server', {
    ...(log ? { publish: log.args } : {}),
  } satisfies GrpcAcksServerArgs);
  const threads = makeThreads(o.threads).map(({ threadId, runId }) => ({ threadId, runId }));
  await using producer = await forkLoadgen<ProducerResult, ProducerInfo>('producer', {
    grpcTarget: `127.0.0.1:${server.info.port}`,
    threads,
    streams: o.streams,
    ack: 'ACCEPTED',
    mixed: o.mixed,
    batchSize: o.batchSize,
    load: openLoad(o),
  } satisfies ProducerArgs);
  const before = cpuSnapshot([server.pid]);
  const t0 = performance.now();
  producer.go();
  const p = await producer.result(o.warmupMs + o.durationMs + o.drainTimeoutMs + 30_000);
  const after = cpuSnapshot([server.pid]);
  if (p.failedRequests > 0 || p.acked < p.sent) {
    throw new Error(
      `${servers ? 'B-ingest' : 'B-grpc-acks'}: ${p.acked} of ${p.sent} events acked, ${p.failedRequests} requests failed` +
        (p.firstError === undefined ? '' : ` (${p.firstError})`),
    );
  }
  return {
    rate: o.rate,
    sent: p.sent,
    acked: p.acked,
    sentPerS: p.sentPerS,
    meanEventsPerRequest: Math.round(p.meanEventsPerRequest * 100) / 100,
    ackLatency: p.ackLatency,
    cores: coresUsed(before, after, performance.now() - t0),
    cpuUsPerEvent: cpuPerEvent(before, after, p.acked),
  };
}

/** A log with the broker's stream settings for B-ingest; its streams are deleted on dispose. */
async function floorLog(
  natsUrl: string,
): Promise<{ args: NonNullable<GrpcAcksServerArgs['publish']> } & AsyncDisposable> {
  const tag = Math.random().toString(36).slice(2, 10);
  const subjectPrefix = `bingest${tag}`;
  const streamName = `BINGEST_${tag}`;
  const nc = await connect({ servers: natsUrl });
  const jsm = await jetstreamManager(nc);
  await ensureLogStream(jsm, {
    streamName,
    subjects: new Subjects(subjectPrefix, DEFAULT_PARTITIONS),
    maxAgeMs: DEFAULT_STREAM_MAX_AGE_MS,
    duplicateWindowMs: DEFAULT_DUPLICATE_WINDOW_MS,
    replicas: 1,
  });
  return {
    args: { natsUrl, subjectPrefix, partitions: DEFAULT_PARTITIONS },
    async [Symbol.asyncDispose]() {
      for (let p = 0; p < DEFAULT_PARTITIONS; p++) {
        await jsm.streams.delete(partitionStream(streamName, p)).catch(() => undefined);
      }
      await nc.close();
    },
  };
}
