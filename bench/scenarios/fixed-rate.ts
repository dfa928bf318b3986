/**
 * Scenarios B and C, a fixed offered rate: every TICK_MS the producer sends the events
 * that are due by then (round-robin over the threads, one request per PublishStream
 * holding that stream's share), without waiting for earlier acks (open loop: a slow
 * broker shows up as latency, not as a lower offered rate).
 *
 * Each event carries `performance.now()` read just before its request is sent; the
 * subscriber in this process reads it back on receipt: send → WebSocket latency on one
 * clock. Each request's ack is timed too (with PERSISTED acks, that is scenario C).
 * Samples from the first `warmupMs` are dropped (JIT, connection pools, first batches).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import {
  type AckLevel,
  type Event,
  IngestClient,
  type PublishStream,
} from '../../src/client/ingest-client.js';
import type { BenchBroker } from '../lib/bench-broker.js';
import { type CpuMs, coresUsed, cpuPerEvent, cpuSnapshot } from '../lib/cpu.js';
import type { Measured } from '../lib/measured.js';
import { makeThreads, nextTokenEvent, sentAtOf } from '../lib/payload.js';
import { type LatencySummary, summarize } from '../lib/stats.js';
import { Subscribers } from '../lib/subscribers.js';

export const TICK_MS = 10;

export interface FixedRateOptions {
  /** Events per second offered, in all. */
  readonly rate: number;
  readonly durationMs: number;
  readonly warmupMs: number;
  readonly ack: AckLevel;
  readonly threads: number;
  readonly streams: number;
  readonly wsConnections: number;
  /** Give up waiting for acks and deliveries after this long past the last send. */
  readonly drainTimeoutMs: number;
}

export interface FixedRateResult extends Measured {
  readonly rate: number;
  readonly ack: AckLevel;
  readonly sent: number;
  readonly acked: number;
  readonly delivered: number;
  readonly failedRequests: number;
  readonly firstError: string | undefined;
  readonly outOfOrder: number;
  readonly subscriberErrors: string[];
  /** Events/s actually sent over the measured window (the offered rate, if the producer kept up). */
  readonly sentPerS: number;
  /** Send → WebSocket receipt, per event, ms. */
  readonly e2eLatency: LatencySummary;
  /** e2e p50 of the events sent in each second of the window, ms: flat if the broker keeps up, rising if not. */
  readonly e2eP50BySecond: number[];
  /** Send → ack, per request, ms. */
  readonly ackLatency: LatencySummary;
  readonly meanEventsPerRequest: number;
  /** Where the e2e latency went, per measured event, ms (see {@link stageBreakdown}). */
  readonly stages: StageBreakdown | undefined;
  readonly cores: CpuMs | undefined;
  /** CPU per event sent in the window (its drain included), µs, per process role. */
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
}

export interface StageBreakdown {
  /** Send → the broker's ingest stamped `created_at` (gRPC, decoding, validation; ms precision). */
  readonly sendToIngest: LatencySummary;
  /** `created_at` → `stored_at`, the start of the persister's transaction (JetStream publish, consumer
   * delivery, waiting for the persister's current batch and for a pooled connection). */
  readonly ingestToTxStart: LatencySummary;
  /** `stored_at` → WebSocket receipt (the transaction's statements and commit, the announcement, fan-out). */
  readonly txStartToReceipt: LatencySummary;
}

/**
 * Splits each measured event's latency at two instants the broker records in the row:
 * `created_at` (set by ingest when the producer gives none) and `stored_at` (`now()`,
 * the start of the persister's transaction). Wall clocks of one machine; the bench's
 * `performance.now()` is turned into wall time through `performance.timeOrigin`.
 */
async function stageBreakdown(
  databaseUrl: string,
  receivedAt: ReadonlyMap<string, number>,
): Promise<StageBreakdown | undefined> {
  const client = new pg.Client({ connectionString: databaseUrl });
  client.on('error', () => undefined);
  try {
    await client.connect();
    const { rows } = await client.query<{
      thread_id: string;
      seq: string;
      t: number;
      ingest: number;
      tx: number;
    }>(
      `SELECT thread_id, seq, (content->>'t')::float8 AS t,
              extract(epoch FROM created_at)::float8 * 1000 AS ingest,
              extract(epoch FROM stored_at)::float8 * 1000 AS tx
         FROM run_events`,
    );
    const origin = performance.timeOrigin;
    const a: number[] = [];
    const b: number[] = [];
    const c: number[] = [];
    for (const r of rows) {
      const at = receivedAt.get(`${r.thread_id}/${r.seq}`);
      if (at === undefined) continue;
      a.push(r.ingest - (origin + r.t));
      b.push(r.tx - r.ingest);
      c.push(origin + at - r.tx);
    }
    return { sendToIngest: summarize(a), ingestToTxStart: summarize(b), txStartToReceipt: summarize(c) };
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function runFixedRate(broker: BenchBroker, o: FixedRateOptions): Promise<FixedRateResult> {
  const threads = makeThreads(o.threads);
  const e2eSamples: number[] = [];
  const ackSamples: number[] = [];
  /** `thread/seq` → performance.now() at WebSocket receipt, for the stage breakdown. */
  const receivedAt = new Map<string, number>();
  /** e2e samples by the second (of the measured window) in which they were sent. */
  const bySecond: number[][] = [];
  let measureFrom = Number.POSITIVE_INFINITY;

  await using subs = await Subscribers.open(
    broker.wsUrl,
    threads.map((t) => t.threadId),
    o.wsConnections,
    (event, at) => {
      const sentAt = sentAtOf(event.content);
      if (sentAt === undefined || sentAt < measureFrom) return;
      e2eSamples.push(at - sentAt);
      const second = Math.floor((sentAt - measureFrom) / 1000);
      const bucket = bySecond[second] ?? [];
      bucket.push(at - sentAt);
      bySecond[second] = bucket;
      receivedAt.set(`${event.thread_id}/${event.seq}`, at);
    },
  );
  using client = new IngestClient(broker.grpcTarget);
  const streams: PublishStream[] = Array.from({ length: o.streams }, () => client.openStream());

  let sent = 0;
  let acked = 0;
  let requests = 0;
  let failedRequests = 0;
  let firstError: string | undefined;
  let next = 0; // round-robin over threads
  const pending = new Set<Promise<void>>();

  const start = performance.now();
  measureFrom = start + o.warmupMs;
  const endAt = measureFrom + o.durationMs;
  let sentAtMeasureFrom = -1;
  let cpuBefore: CpuMs | undefined;
  let fromEpoch = Date.now();
  for (let now = start; now < endAt; now = performance.now()) {
    if (sentAtMeasureFrom < 0 && now >= measureFrom) {
      sentAtMeasureFrom = sent;
      cpuBefore = cpuSnapshot(broker.pids);
      fromEpoch = Date.now();
    }
    const due = Math.floor(((now - start) / 1000) * o.rate) - sent;
    if (due > 0) {
      const perStream: Event[][] = streams.map(() => []);
      const sentAt = performance.now();
      for (let i = 0; i < due; i++) {
        const thread = threads[next++ % threads.length] as (typeof threads)[number];
        perStream[thread.index % o.streams]?.push(nextTokenEvent(thread, sentAt));
      }
      sent += due;
      perStream.forEach((events, s) => {
        if (events.length === 0) return;
        requests++;
        const t0 = performance.now();
        const p: Promise<void> = (streams[s] as PublishStream).send(events, o.ack).then(
          () => {
            if (t0 >= measureFrom) ackSamples.push(performance.now() - t0);
            acked += events.length;
            pending.delete(p);
          },
          (err: unknown) => {
            failedRequests++;
            firstError ??= (err as Error).message;
            pending.delete(p);
          },
        );
        pending.add(p);
      });
    }
    await sleep(TICK_MS);
  }
  const measuredMs = performance.now() - measureFrom;
  const sentMeasured = sent - Math.max(0, sentAtMeasureFrom);

  const drained = Promise.all(pending);
  await Promise.race([drained, sleep(o.drainTimeoutMs)]);
  await subs.waitDelivered(sent, o.drainTimeoutMs);
  const cpuAfter = cpuSnapshot(broker.pids);
  const windowEpochMs = [fromEpoch, Date.now()] as const;
  await Promise.race([Promise.all(streams.map((s) => s.end())), sleep(5_000)]);
  const stages = await stageBreakdown(broker.databaseUrl, receivedAt);

  return {
    rate: o.rate,
    ack: o.ack,
    sent,
    acked,
    delivered: subs.delivered,
    failedRequests,
    firstError,
    outOfOrder: subs.outOfOrder,
    subscriberErrors: subs.errors.slice(0, 5),
    sentPerS: (sentMeasured / measuredMs) * 1000,
    e2eLatency: summarize(e2eSamples),
    e2eP50BySecond: Array.from(bySecond, (xs) => (xs ? Math.round(summarize(xs).p50) : Number.NaN)),
    ackLatency: summarize(ackSamples),
    meanEventsPerRequest: sent / Math.max(1, requests),
    stages,
    cores: coresUsed(cpuBefore, cpuAfter, performance.now() - measureFrom),
    cpuUsPerEvent: cpuPerEvent(cpuBefore, cpuAfter, sentMeasured),
    windowEpochMs,
  };
}
