/**
 * Load generator: the broker's WebSocket subscribers for the producer scenarios, one
 * subscription per thread spread over a few connections (bench/lib/subscribers.ts; the
 * fan-out and connection scenarios use ws-subscribers.ts, one subscription per connection).
 * Ready once every subscription is live. After `go` it counts deliveries (per 100 ms, for
 * the timeline), checks each thread's seqs run 1, 2, 3, ..., and with `latency` records
 * send → receipt per event from the send stamp the producer puts in each event (epoch ms,
 * the same clock in every process). The result comes once `expected` events arrived, or
 * after `idleTimeoutMs` without a delivery, or at `timeoutMs`.
 */
import type { WireEvent } from '../../src/client/ws-subscriber.js';
import { type LoadgenIo, runLoadgen } from '../lib/loadgen.js';
import { sentAtOf } from '../lib/payload.js';
import { type BucketCounts, Counts } from '../lib/progress.js';
import { type StageBreakdown, stageBreakdown } from '../lib/stages.js';
import { type LatencySummary, summarize } from '../lib/stats.js';
import { Subscribers } from '../lib/subscribers.js';

export interface SubscribersArgs {
  readonly wsUrl: string;
  readonly threadIds: readonly string[];
  readonly connections: number;
  readonly expected: number;
  /** Record send → receipt latency (the events carry send stamps). */
  readonly latency?: {
    /** Events sent within this long of the first send are the warm-up, not counted. */
    readonly warmupMs: number;
    /** With it, each measured event's latency is split into stages from its stored row. */
    readonly databaseUrl?: string;
  };
  /** Give up this long after `go`. */
  readonly timeoutMs: number;
  /** Give up when nothing arrived for this long (after a first delivery). */
  readonly idleTimeoutMs: number;
}

export interface SubscribersLatency {
  /** Send → WebSocket receipt per measured event, ms. */
  readonly e2e: LatencySummary;
  /** e2e p50 of the events sent in each second of the window, ms: flat if the broker keeps up. */
  readonly p50BySecond: number[];
  /** Delivery rate of the measured events: their count / (last receipt − first receipt). Below the
   * offered rate past saturation, when the broker delivers a growing backlog at its own pace. */
  readonly receivedPerS: number;
  readonly stages: StageBreakdown | undefined;
}

export interface SubscribersResult {
  readonly delivered: number;
  /** Events whose seq was not the previous one + 1 on their subscription. */
  readonly outOfOrder: number;
  readonly complete: boolean;
  /** Epoch ms of the first and the last delivery. */
  readonly firstDeliveryAtMs: number;
  readonly lastDeliveryAtMs: number;
  /** Events delivered, per 100 ms. */
  readonly deliveries: BucketCounts;
  readonly latency: SubscribersLatency | undefined;
  readonly errors: string[];
  /** This process's CPU from `go` to the last delivery awaited, ms. */
  readonly cpuMs: number;
}

const POLL_MS = 200;

async function main(a: SubscribersArgs, io: LoadgenIo): Promise<SubscribersResult> {
  const deliveries = new Counts();
  // Per delivered event: its send stamp, its receipt, and (for the stages) its thread/seq.
  const sentAt: number[] = [];
  const receivedAt: number[] = [];
  const keys: string[] = [];
  const onEvent = (event: WireEvent, at: number) => {
    const atMs = performance.timeOrigin + at;
    deliveries.add(1, atMs);
    if (!a.latency) return;
    const t = sentAtOf(event.content);
    if (t === undefined) return;
    sentAt.push(t);
    receivedAt.push(atMs);
    if (a.latency.databaseUrl) keys.push(`${event.thread_id}/${event.seq}`);
  };
  await using subs = await Subscribers.open(a.wsUrl, a.threadIds, a.connections, onEvent);
  io.ready();
  await io.go;

  const cpuBefore = process.cpuUsage();
  const giveUpAt = performance.now() + a.timeoutMs;
  let complete = false;
  while (!complete && performance.now() < giveUpAt) {
    complete = await subs.waitDelivered(a.expected, POLL_MS);
    if (subs.delivered > 0 && performance.now() - subs.lastDeliveryAtMs > a.idleTimeoutMs) break;
  }
  const cpu = process.cpuUsage(cpuBefore);

  return {
    delivered: subs.delivered,
    outOfOrder: subs.outOfOrder,
    complete,
    firstDeliveryAtMs: performance.timeOrigin + subs.firstDeliveryAtMs,
    lastDeliveryAtMs: performance.timeOrigin + subs.lastDeliveryAtMs,
    deliveries: deliveries.snapshot(),
    latency: a.latency ? await latencyOf(sentAt, receivedAt, keys, a.latency) : undefined,
    errors: subs.errors.slice(0, 5),
    cpuMs: (cpu.user + cpu.system) / 1000,
  };
}

async function latencyOf(
  sentAt: readonly number[],
  receivedAt: readonly number[],
  keys: readonly string[],
  o: NonNullable<SubscribersArgs['latency']>,
): Promise<SubscribersLatency> {
  const from = sentAt.reduce((m, t) => Math.min(m, t), Number.POSITIVE_INFINITY) + o.warmupMs;
  const e2e: number[] = [];
  const bySecond: number[][] = [];
  const stageKeys = new Map<string, number>();
  let firstReceipt = Number.POSITIVE_INFINITY;
  let lastReceipt = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < sentAt.length; i++) {
    const t = sentAt[i] as number;
    const at = receivedAt[i] as number;
    if (t < from) continue;
    if (at < firstReceipt) firstReceipt = at;
    if (at > lastReceipt) lastReceipt = at;
    e2e.push(at - t);
    const second = Math.floor((t - from) / 1000);
    const bucket = bySecond[second] ?? [];
    bucket.push(at - t);
    bySecond[second] = bucket;
    if (keys.length > 0) stageKeys.set(keys[i] as string, at);
  }
  return {
    e2e: summarize(e2e),
    p50BySecond: Array.from(bySecond, (xs) => (xs ? Math.round(summarize(xs).p50 * 10) / 10 : Number.NaN)),
    receivedPerS:
      lastReceipt > firstReceipt ? ((e2e.length - 1) / (lastReceipt - firstReceipt)) * 1000 : Number.NaN,
    stages: o.databaseUrl ? await stageBreakdown(o.databaseUrl, stageKeys) : undefined,
  };
}

runLoadgen(main);
