/**
 * Full speed with ACCEPTED acks (issue 5 scenarios 1, 2 and 7): every event is built
 * before the clock starts; the producer load generator sends requests of up to
 * `batchSize` events of one thread each, round-robin over the threads, as fast as a
 * bounded window of unacked requests per stream allows, while a subscriber load generator
 * holds one WebSocket subscription per thread.
 *
 * - e2e events/s    = events delivered to subscribers / (last delivery − first send)
 * - ingest events/s = events acked to the producer   / (last ack − first send)
 * - persister lag   = acked − stored, the most over the 250 ms timeline; "bounded" when
 *   it stays under {@link LAG_BOUND_S} of e2e throughput.
 */
import { DEFAULT_WS_MAX_SUBSCRIPTIONS } from '../../src/config.js';
import type { BenchBroker } from '../lib/bench-broker.js';
import type { CpuMs } from '../lib/cpu.js';
import { type Driven, drive } from '../lib/drive.js';
import type { Measured } from '../lib/measured.js';
import { makeThreads } from '../lib/payload.js';
import { maxPersisterLag, type ProgressPoint } from '../lib/progress.js';

/** The persister's lag counts as bounded below this many seconds of e2e throughput. */
const LAG_BOUND_S = 1;

export interface FullSpeedOptions {
  readonly events: number;
  readonly threads: number;
  /** Concurrent PublishStreams; thread i is always sent on stream i % streams, so its order holds. */
  readonly streams: number;
  /** Most events per request; fewer when there are fewer than that per thread. */
  readonly batchSize: number;
  /** Requests per stream sent and not yet acked. */
  readonly window: number;
  readonly wsConnections: number;
  /** The old request shape: tokens of many threads mixed in each request. */
  readonly mixed: boolean;
  /** Give up waiting for deliveries after this long. */
  readonly timeoutMs: number;
}

export interface FullSpeedResult extends Measured {
  readonly threads: number;
  readonly events: number;
  readonly acked: number;
  readonly delivered: number;
  readonly outOfOrder: number;
  readonly failedRequests: number;
  readonly firstError: string | undefined;
  readonly subscriberErrors: string[];
  readonly eventsPerRequest: number;
  readonly ingestMs: number;
  readonly e2eMs: number;
  readonly ingestEventsPerS: number;
  /** NaN when not every event was delivered in time. */
  readonly e2eEventsPerS: number;
  readonly persisterLag: {
    /** Most events acked and not yet stored at a timeline sample. */
    readonly maxEvents: number;
    /** The same in seconds of e2e throughput. */
    readonly maxSeconds: number;
    readonly bounded: boolean;
  };
  readonly cores: CpuMs | undefined;
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
  /** CPU µs per delivered event of each broker process by name (see drive.ts). */
  readonly processCpuUsPerEvent: Readonly<Record<string, number>>;
  /** Events stored per persister transaction, on average. */
  readonly eventsPerTransaction: number;
  /** Read and write system calls per delivered event of each broker process by name (see drive.ts). */
  readonly processSyscallsPerEvent: Driven['processSyscallsPerEvent'];
  readonly loadgenCpuMs: { readonly producer: number; readonly subscribers: number };
  readonly timeline: readonly ProgressPoint[];
}

export async function runFullSpeed(broker: BenchBroker, o: FullSpeedOptions): Promise<FullSpeedResult> {
  const threads = makeThreads(o.threads).map(({ threadId, runId }) => ({ threadId, runId }));
  const batchSize = o.mixed
    ? o.batchSize
    : Math.max(1, Math.min(o.batchSize, Math.floor(o.events / o.threads)));
  const d = await drive(
    broker,
    {
      threads,
      streams: o.streams,
      ack: 'ACCEPTED',
      mixed: o.mixed,
      batchSize,
      load: { kind: 'closed', events: o.events, window: o.window },
    },
    {
      // The broker takes at most RS_WS_MAX_SUBSCRIPTIONS per connection: more threads, more connections.
      connections: Math.max(o.wsConnections, Math.ceil(o.threads / DEFAULT_WS_MAX_SUBSCRIPTIONS)),
      timeoutMs: o.timeoutMs,
      idleTimeoutMs: o.timeoutMs,
    },
  );
  const p = d.producer;
  const s = d.subscribers;
  const ingestMs = p.lastAckAtMs - p.firstSendAtMs;
  const e2eMs = s.lastDeliveryAtMs - p.firstSendAtMs;
  const e2eEventsPerS = s.complete ? (s.delivered / e2eMs) * 1000 : Number.NaN;
  const lag = maxPersisterLag(d.timeline);
  const lagSeconds = lag / (Number.isFinite(e2eEventsPerS) ? e2eEventsPerS : (s.delivered / e2eMs) * 1000);
  return {
    threads: o.threads,
    events: p.sent,
    acked: p.acked,
    delivered: s.delivered,
    outOfOrder: s.outOfOrder,
    failedRequests: p.failedRequests,
    firstError: p.firstError,
    subscriberErrors: s.errors,
    eventsPerRequest: Math.round(p.meanEventsPerRequest * 10) / 10,
    ingestMs,
    e2eMs,
    ingestEventsPerS: (p.acked / ingestMs) * 1000,
    e2eEventsPerS,
    persisterLag: {
      maxEvents: lag,
      maxSeconds: Math.round(lagSeconds * 100) / 100,
      bounded: lagSeconds <= LAG_BOUND_S,
    },
    cores: d.cores,
    cpuUsPerEvent: d.cpuUsPerEvent,
    processCpuUsPerEvent: d.processCpuUsPerEvent,
    eventsPerTransaction: d.eventsPerTransaction,
    processSyscallsPerEvent: d.processSyscallsPerEvent,
    loadgenCpuMs: d.loadgenCpuMs,
    timeline: d.timeline,
    windowEpochMs: d.windowEpochMs,
  };
}
