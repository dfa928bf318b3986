/**
 * Scenario 5, catch-up: N events are stored in one thread through the broker (a producer
 * load generator, ACCEPTED acks, then the bench waits until Postgres has them all); then
 * one subscriber, in a load-generator process, subscribes from after_seq 0 and receives
 * the whole history, checked to be seq 1..N once and in order.
 *
 * events/s = N / (last event received − subscribe sent), compared with B-ws at K = 1.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { BenchBroker } from '../lib/bench-broker.js';
import { type CpuMs, coresUsed, cpuPerEvent, cpuSnapshot } from '../lib/cpu.js';
import { oneThreadProducer } from '../lib/drive.js';
import type { Measured } from '../lib/measured.js';
import { type Ratio, ratioTo } from '../lib/ratio.js';
import { startWsLoad } from '../lib/ws-load.js';

export interface CatchupOptions {
  readonly events: number;
  readonly batchSize: number;
  /** Producer requests in flight while storing. */
  readonly window: number;
  /** Longest wait for storing, and for the replay. */
  readonly timeoutMs: number;
}

export const CATCHUP_TARGET = 0.5;

export interface CatchupResult extends Measured {
  readonly events: number;
  /** Storing the events through the broker, acked and persisted, ms. */
  readonly storeMs: number;
  readonly delivered: number;
  readonly outOfOrder: number;
  readonly complete: boolean;
  readonly ms: number;
  readonly eventsPerS: number;
  /** events/s vs B-ws at K = 1. */
  readonly ratio: Ratio;
  readonly cores: CpuMs | undefined;
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
  readonly errors: string[];
}

export async function runCatchup(
  broker: BenchBroker,
  o: CatchupOptions,
  wsBaselinePerS: number,
): Promise<CatchupResult> {
  const threadId = `cu-${randomBytes(4).toString('hex')}`;
  const storeStart = performance.now();
  {
    await using producer = await oneThreadProducer(broker.grpcTarget, threadId, o);
    producer.go();
    await producer.result(o.timeoutMs);
  }
  await waitStored(broker.databaseUrl, threadId, o.events, o.timeoutMs);
  const storeMs = performance.now() - storeStart;

  await using subscriber = await startWsLoad(broker.wsUrl, [threadId], 1, {
    expect: o.events,
    afterSeq: 0,
    subscribeOnGo: true,
    timeoutMs: o.timeoutMs,
  });
  const before = cpuSnapshot(broker.pids);
  const t0 = performance.now();
  const fromEpoch = Date.now();
  subscriber.go();
  const got = await subscriber.result(o.timeoutMs + 10_000);
  const after = cpuSnapshot(broker.pids);
  const ms = got.lastAtMs - got.goAtMs;
  const eventsPerS = got.complete === 1 ? (o.events / ms) * 1000 : Number.NaN;
  return {
    events: o.events,
    storeMs,
    delivered: got.delivered,
    outOfOrder: got.outOfOrder,
    complete: got.complete === 1,
    ms,
    eventsPerS,
    ratio: ratioTo(eventsPerS, wsBaselinePerS, CATCHUP_TARGET, 'events/s'),
    cores: coresUsed(before, after, performance.now() - t0),
    cpuUsPerEvent: cpuPerEvent(before, after, got.delivered),
    errors: got.errors,
    windowEpochMs: [fromEpoch, Date.now()],
  };
}

/** Polls Postgres until the thread's head is `events`. */
async function waitStored(
  databaseUrl: string,
  threadId: string,
  events: number,
  timeoutMs: number,
): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const until = performance.now() + timeoutMs;
    for (;;) {
      const { rows } = await client.query<{ head: string | null }>(
        'SELECT max(seq) AS head FROM run_events WHERE thread_id = $1',
        [threadId],
      );
      const head = Number(rows[0]?.head ?? 0);
      if (head >= events) return;
      if (performance.now() > until)
        throw new Error(`only ${head} of ${events} events stored in ${timeoutMs} ms`);
      await sleep(200);
    }
  } finally {
    await client.end();
  }
}
