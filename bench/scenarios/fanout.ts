/**
 * Scenario 4, fan-out: one thread, many WebSocket subscribers (one subscription per
 * connection, spread over a few load-generator processes), and a producer load generator
 * publishing to that thread at full speed (Ingest PublishStream, ACCEPTED acks).
 *
 * delivered messages/s = events received by all subscribers / (last receipt − first receipt),
 * compared with B-ws at the same K. Every subscriber must get every seq once, in order.
 */
import { randomBytes } from 'node:crypto';
import type { BenchBroker } from '../lib/bench-broker.js';
import { type CpuMs, coresUsed, cpuPerEvent, cpuSnapshot } from '../lib/cpu.js';
import { oneThreadProducer } from '../lib/drive.js';
import type { Measured } from '../lib/measured.js';
import { type Ratio, ratioTo } from '../lib/ratio.js';
import { startWsLoad } from '../lib/ws-load.js';

export interface FanoutOptions {
  readonly subscribers: number;
  /** Load-generator processes the subscribers are spread over. */
  readonly processes: number;
  readonly events: number;
  readonly batchSize: number;
  /** Producer requests in flight. */
  readonly window: number;
  readonly timeoutMs: number;
}

export const FANOUT_TARGET = 0.7;

export interface FanoutResult extends Measured {
  readonly subscribers: number;
  readonly events: number;
  readonly acked: number;
  readonly delivered: number;
  /** Subscriptions that got every seq 1..events once and in order. */
  readonly complete: number;
  readonly outOfOrder: number;
  readonly ms: number;
  readonly deliveredPerS: number;
  /** Events/s acked to the producer. */
  readonly ingestEventsPerS: number;
  /** delivered messages/s vs B-ws at the same K. */
  readonly ratio: Ratio;
  readonly cores: CpuMs | undefined;
  /** CPU per delivered message, µs. */
  readonly cpuUsPerMessage: Omit<CpuMs, 'other'> | undefined;
  readonly errors: string[];
}

export async function runFanout(
  broker: BenchBroker,
  o: FanoutOptions,
  wsBaselinePerS: number,
): Promise<FanoutResult> {
  const threadId = `fan-${randomBytes(4).toString('hex')}`;
  await using subscribers = await startWsLoad(
    broker.wsUrl,
    Array.from({ length: o.subscribers }, () => threadId),
    o.processes,
    { expect: o.events, timeoutMs: o.timeoutMs },
  );
  await using producer = await oneThreadProducer(broker.grpcTarget, threadId, o);

  const before = cpuSnapshot(broker.pids);
  const t0 = performance.now();
  const fromEpoch = Date.now();
  subscribers.go();
  producer.go();
  const [sent, got] = await Promise.all([
    producer.result(o.timeoutMs),
    subscribers.result(o.timeoutMs + 10_000),
  ]);
  const after = cpuSnapshot(broker.pids);
  const ms = got.lastAtMs - got.firstAtMs;
  const deliveredPerS = (got.delivered / ms) * 1000;
  return {
    subscribers: o.subscribers,
    events: o.events,
    acked: sent.acked,
    delivered: got.delivered,
    complete: got.complete,
    outOfOrder: got.outOfOrder,
    ms,
    deliveredPerS,
    ingestEventsPerS: (sent.acked / (sent.lastAckAtMs - sent.firstSendAtMs)) * 1000,
    ratio: ratioTo(deliveredPerS, wsBaselinePerS, FANOUT_TARGET, 'messages/s'),
    cores: coresUsed(before, after, performance.now() - t0),
    cpuUsPerMessage: cpuPerEvent(before, after, got.delivered),
    errors: got.errors,
    windowEpochMs: [fromEpoch, Date.now()],
  };
}
