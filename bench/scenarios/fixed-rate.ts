/**
 * A fixed offered rate, open loop (issue 5 scenarios 3 and 8): the producer load generator
 * sends each thread's due events as one request per thread every `tickMs` (an agent
 * emitting tokens), never waiting for acks, so a slow broker shows up as latency, not as
 * a lower offered rate. Each event carries its send stamp (epoch ms); the subscriber load
 * generator reads it on receipt: send → WebSocket latency per event, across processes on
 * one clock. Each request's ack is timed too (with PERSISTED acks, that is scenario 8).
 * Events sent in the first `warmupMs` are not counted (JIT, connection pools, first batches).
 *
 * Rising offered rates make the latency curve ({@link curvePoint}), up to the first one
 * that is {@link saturated}; bench/run.ts runs them.
 */
import type { AckLevel } from '../../src/client/ingest-client.js';
import type { BenchBroker } from '../lib/bench-broker.js';
import type { CpuMs } from '../lib/cpu.js';
import { type Driven, drive, openLoad } from '../lib/drive.js';
import type { Measured } from '../lib/measured.js';
import { makeThreads } from '../lib/payload.js';
import type { StageBreakdown } from '../lib/stages.js';
import { type LatencySummary, summarize } from '../lib/stats.js';
import type { CurvePoint } from '../lib/svg.js';
import type { SubscribersLatency } from '../loadgen/subscribers.js';

export interface FixedRateOptions {
  /** Events per second offered, in all. */
  readonly rate: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  readonly ack: AckLevel;
  readonly threads: number;
  readonly streams: number;
  readonly wsConnections: number;
  readonly tickMs: number;
  /** Most events per request. */
  readonly batchSize: number;
  /** The old request shape: each stream's due events of all its threads in one request. */
  readonly mixed: boolean;
  /** Give up waiting for acks and deliveries after this long past the last send. */
  readonly drainTimeoutMs: number;
  /** Send through the client library's batching Publisher with this linger, ms (producer.ts). */
  readonly linger?: number;
}

export interface FixedRateResult extends Measured {
  readonly rate: number;
  readonly ack: AckLevel;
  /** Sent through the client library's Publisher with this linger, ms; raw requests if absent. */
  readonly linger?: number;
  readonly sent: number;
  readonly acked: number;
  readonly delivered: number;
  readonly failedRequests: number;
  readonly firstError: string | undefined;
  readonly outOfOrder: number;
  readonly subscriberErrors: string[];
  /** Events/s the producer sent after the warm-up (the offered rate, if it kept up). */
  readonly sentPerS: number;
  /** Events/s the subscribers received from the end of the warm-up to the last send. */
  readonly receivedPerS: number;
  /** Send → WebSocket receipt, per event sent after the warm-up, ms. */
  readonly e2eLatency: LatencySummary;
  /** e2e p50 of the events sent in each second after the warm-up, ms: flat if the broker keeps up. */
  readonly e2eP50BySecond: number[];
  /** Send → ack, per request sent after the warm-up, ms. */
  readonly ackLatency: LatencySummary;
  readonly meanEventsPerRequest: number;
  /** How late the producer's ticks woke up, ms: large values mean the producer, not the broker, lagged. */
  readonly producerTickLateMs: LatencySummary;
  readonly stages: StageBreakdown | undefined;
  readonly cores: CpuMs | undefined;
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
  /** CPU µs per delivered event of each broker process by name (see drive.ts). */
  readonly processCpuUsPerEvent: Readonly<Record<string, number>>;
  /** Events stored per persister transaction, on average. */
  readonly eventsPerTransaction: number;
  /** Read and write system calls per delivered event of each broker process by name (see drive.ts). */
  readonly processSyscallsPerEvent: Driven['processSyscallsPerEvent'];
  readonly loadgenCpuMs: { readonly producer: number; readonly subscribers: number };
}

const NO_LATENCY: SubscribersLatency = {
  e2e: summarize([]),
  p50BySecond: [],
  receivedPerS: Number.NaN,
  stages: undefined,
};

export async function runFixedRate(broker: BenchBroker, o: FixedRateOptions): Promise<FixedRateResult> {
  const threads = makeThreads(o.threads).map(({ threadId, runId }) => ({ threadId, runId }));
  const d = await drive(
    broker,
    {
      threads,
      streams: o.streams,
      ack: o.ack,
      mixed: o.mixed,
      batchSize: o.batchSize,
      load: openLoad(o),
      ...(o.linger === undefined ? {} : { linger: o.linger }),
    },
    {
      connections: o.wsConnections,
      latency: { warmupMs: o.warmupMs, databaseUrl: broker.databaseUrl },
      timeoutMs: o.warmupMs + o.durationMs + o.drainTimeoutMs,
      idleTimeoutMs: o.drainTimeoutMs,
    },
  );
  const p = d.producer;
  const s = d.subscribers;
  const l = s.latency ?? NO_LATENCY;
  return {
    rate: o.rate,
    ack: o.ack,
    ...(o.linger === undefined ? {} : { linger: o.linger }),
    sent: p.sent,
    acked: p.acked,
    delivered: s.delivered,
    failedRequests: p.failedRequests,
    firstError: p.firstError,
    outOfOrder: s.outOfOrder,
    subscriberErrors: s.errors,
    sentPerS: p.sentPerS,
    receivedPerS: l.receivedPerS,
    e2eLatency: l.e2e,
    e2eP50BySecond: l.p50BySecond,
    ackLatency: p.ackLatency,
    meanEventsPerRequest: Math.round(p.meanEventsPerRequest * 100) / 100,
    producerTickLateMs: p.tickLateMs,
    stages: l.stages,
    cores: d.cores,
    cpuUsPerEvent: d.cpuUsPerEvent,
    processCpuUsPerEvent: d.processCpuUsPerEvent,
    eventsPerTransaction: d.eventsPerTransaction,
    processSyscallsPerEvent: d.processSyscallsPerEvent,
    loadgenCpuMs: d.loadgenCpuMs,
    windowEpochMs: d.windowEpochMs,
  };
}

/** The share of the offered rate below which a rate counts as past saturation. */
const SATURATED_BELOW = 0.9;
/** A p50 above this (ms) also ends the curve: the broker is queueing, not keeping up. */
const SATURATED_P50_MS = 1_000;

/** What the curve needs of a fixed-rate measurement: the broker's (scenario 3) or the floor's (B-path). */
export type CurveMeasure = Pick<FixedRateResult, 'rate' | 'receivedPerS' | 'e2eLatency'>;

export function curvePoint(r: CurveMeasure): CurvePoint {
  return {
    offered: r.rate,
    achieved: Math.round(r.receivedPerS),
    p50: r.e2eLatency.p50,
    p99: r.e2eLatency.p99,
    p999: r.e2eLatency.p999,
  };
}

/** True when this rate is at or past saturation: the curve stops here. */
export function saturated(r: CurveMeasure): boolean {
  return !(r.receivedPerS >= SATURATED_BELOW * r.rate) || r.e2eLatency.p50 > SATURATED_P50_MS;
}
