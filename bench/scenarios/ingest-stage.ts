/**
 * Scenario 2 on the ingest stage alone: a broker process with `RS_ROLES=ingest` (no
 * persister, no fan-out in it, as an ingest node is deployed) and the same full-speed
 * producer as scenario 1: requests of 100 events of one thread, 4 PublishStreams, 8
 * requests in flight each, ACCEPTED acks. What it measures is what ingest costs: validation,
 * log messages and JetStream acks, without the persister and fan-out that share the
 * all-in-one process's single event loop in scenario 1.
 */
import type { BenchBroker } from '../lib/bench-broker.js';
import { type CpuMs, coresUsed, cpuPerEvent, cpuSnapshot } from '../lib/cpu.js';
import { forkLoadgen } from '../lib/loadgen.js';
import type { Measured } from '../lib/measured.js';
import { makeThreads } from '../lib/payload.js';
import type { ProducerArgs, ProducerInfo, ProducerResult } from '../loadgen/producer.js';

export interface IngestStageOptions {
  readonly events: number;
  readonly threads: number;
  readonly streams: number;
  readonly batchSize: number;
  readonly window: number;
  readonly timeoutMs: number;
}

export interface IngestStageResult extends Measured {
  readonly acked: number;
  readonly failedRequests: number;
  readonly firstError: string | undefined;
  readonly ingestEventsPerS: number;
  readonly cores: CpuMs | undefined;
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
}

export async function runIngestStage(broker: BenchBroker, o: IngestStageOptions): Promise<IngestStageResult> {
  const threads = makeThreads(o.threads).map(({ threadId, runId }) => ({ threadId, runId }));
  await using producer = await forkLoadgen<ProducerResult, ProducerInfo>('producer', {
    grpcTarget: broker.grpcTarget,
    threads,
    streams: o.streams,
    ack: 'ACCEPTED',
    mixed: false,
    batchSize: o.batchSize,
    load: { kind: 'closed', events: o.events, window: o.window },
  } satisfies ProducerArgs);
  const before = cpuSnapshot(broker.pids);
  const t0 = performance.now();
  const fromEpoch = Date.now();
  producer.go();
  const p = await producer.result(o.timeoutMs);
  const after = cpuSnapshot(broker.pids);
  return {
    acked: p.acked,
    failedRequests: p.failedRequests,
    firstError: p.firstError,
    ingestEventsPerS: (p.acked / (p.lastAckAtMs - p.firstSendAtMs)) * 1000,
    cores: coresUsed(before, after, performance.now() - t0),
    cpuUsPerEvent: cpuPerEvent(before, after, p.acked),
    windowEpochMs: [fromEpoch, Date.now()],
  };
}
