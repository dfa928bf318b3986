/**
 * Scenario A, full speed: every event is ready before the clock starts; several
 * PublishStreams send batches as fast as their bounded in-flight windows allow, with
 * ACCEPTED acks, while one WebSocket subscription per thread receives them.
 *
 * - e2e events/s    = events delivered to subscribers / (last delivery - first send)
 * - ingest events/s = events acked to the producer   / (last ack      - first send)
 */
import { type Event, IngestClient, type PublishStream } from '../../src/client/ingest-client.js';
import type { BenchBroker } from '../lib/bench-broker.js';
import { type CpuMs, coresUsed, cpuPerEvent, cpuSnapshot } from '../lib/cpu.js';
import type { Measured } from '../lib/measured.js';
import { makeThreads, nextTokenEvent } from '../lib/payload.js';
import { Progress, type ProgressPoint } from '../lib/progress.js';
import { Subscribers } from '../lib/subscribers.js';

export interface FullSpeedOptions {
  readonly events: number;
  readonly threads: number;
  /** Concurrent PublishStreams; thread i is always sent on stream i % streams, so its order holds. */
  readonly streams: number;
  readonly batchSize: number;
  /** Requests per stream sent and not yet acked. */
  readonly window: number;
  readonly wsConnections: number;
  /** Give up waiting for deliveries after this long past the last ack. */
  readonly drainTimeoutMs: number;
}

export interface FullSpeedResult extends Measured {
  readonly events: number;
  readonly acked: number;
  readonly delivered: number;
  readonly outOfOrder: number;
  readonly subscriberErrors: string[];
  readonly ingestMs: number;
  readonly e2eMs: number;
  readonly ingestEventsPerS: number;
  /** NaN when not every event was delivered in time. */
  readonly e2eEventsPerS: number;
  /** Average cores busy per process role, first send to last delivery. */
  readonly cores: CpuMs | undefined;
  /** CPU time per delivered event, µs, per process role: steadier than events/s on a shared machine. */
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
  /** Acked / stored / delivered, once a second. */
  readonly timeline: readonly ProgressPoint[];
}

export async function runFullSpeed(broker: BenchBroker, o: FullSpeedOptions): Promise<FullSpeedResult> {
  const threads = makeThreads(o.threads);
  // Batches per stream, built up front so the clock measures the broker, not the generator.
  // Each batch takes tokens round-robin from the stream's threads (a gateway multiplexing its agents).
  const batches: Event[][][] = Array.from({ length: o.streams }, () => []);
  const perStream = Math.ceil(o.events / o.streams);
  for (let s = 0; s < o.streams; s++) {
    const own = threads.filter((t) => t.index % o.streams === s);
    const count = Math.min(perStream, o.events - s * perStream);
    let batch: Event[] = [];
    for (let i = 0; i < count; i++) {
      batch.push(nextTokenEvent(own[i % own.length] as (typeof own)[number]));
      if (batch.length === o.batchSize) {
        batches[s]?.push(batch);
        batch = [];
      }
    }
    if (batch.length > 0) batches[s]?.push(batch);
  }
  const total = batches.flat().reduce((n, b) => n + b.length, 0);

  await using subs = await Subscribers.open(
    broker.wsUrl,
    threads.map((t) => t.threadId),
    o.wsConnections,
  );
  using client = new IngestClient(broker.grpcTarget);
  const streams: PublishStream[] = Array.from({ length: o.streams }, () => client.openStream());

  let acked = 0;
  let lastAckAt = Number.NaN;
  await using progress = await Progress.start(broker.databaseUrl, () => ({
    acked,
    delivered: subs.delivered,
  }));
  const cpuBefore = cpuSnapshot(broker.pids);
  const t0 = performance.now();
  const fromEpoch = Date.now();
  progress.origin = t0;
  await Promise.all(
    streams.map(async (stream, s) => {
      const inFlight = new Set<Promise<void>>();
      for (const batch of batches[s] ?? []) {
        while (inFlight.size >= o.window) await Promise.race(inFlight);
        const p: Promise<void> = stream.send(batch, 'ACCEPTED').then(() => {
          acked += batch.length;
          lastAckAt = performance.now();
          inFlight.delete(p);
        });
        inFlight.add(p);
      }
      await Promise.all(inFlight);
    }),
  );
  const complete = await subs.waitDelivered(total, o.drainTimeoutMs);
  const end = complete ? subs.lastDeliveryAtMs : performance.now();
  const cpuAfter = cpuSnapshot(broker.pids);
  const windowEpochMs = [fromEpoch, Date.now()] as const;
  await Promise.all(streams.map((s) => s.end()));

  const ingestMs = lastAckAt - t0;
  const e2eMs = subs.lastDeliveryAtMs - t0;
  return {
    events: total,
    acked,
    delivered: subs.delivered,
    outOfOrder: subs.outOfOrder,
    subscriberErrors: subs.errors.slice(0, 5),
    ingestMs,
    e2eMs,
    ingestEventsPerS: (acked / ingestMs) * 1000,
    e2eEventsPerS: complete ? (subs.delivered / e2eMs) * 1000 : Number.NaN,
    cores: coresUsed(cpuBefore, cpuAfter, end - t0),
    cpuUsPerEvent: cpuPerEvent(cpuBefore, cpuAfter, subs.delivered),
    timeline: progress.points,
    windowEpochMs,
  };
}
