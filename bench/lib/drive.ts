/**
 * One producer-side measurement against a broker, from outside it: a producer load
 * generator (bench/loadgen/producer.ts) and a subscriber load generator
 * (bench/loadgen/subscribers.ts, one WebSocket subscription per thread), released together
 * once the subscriptions are live and the producer is connected. Around them the bench
 * samples CPU per process role and the stored event count for the timeline.
 */
import { readFileSync } from 'node:fs';
import type { OpenLoad, ProducerArgs, ProducerInfo, ProducerResult } from '../loadgen/producer.js';
import type { SubscribersArgs, SubscribersResult } from '../loadgen/subscribers.js';
import type { BenchBroker } from './bench-broker.js';
import { type CpuMs, coresUsed, cpuPerEvent, cpuSnapshot } from './cpu.js';
import { forkLoadgen } from './loadgen.js';
import { type ProgressPoint, StoredProgress } from './progress.js';
import { processNs } from './schedstat.js';

/** The producer's open load (a fixed offered rate) with a scenario's rate, warm-up, window and ticks. */
export function openLoad(o: Omit<OpenLoad, 'kind'>): OpenLoad {
  return {
    kind: 'open',
    rate: o.rate,
    warmupMs: o.warmupMs,
    durationMs: o.durationMs,
    tickMs: o.tickMs,
    drainTimeoutMs: o.drainTimeoutMs,
  };
}

export interface Driven {
  readonly producer: ProducerResult;
  readonly subscribers: SubscribersResult;
  /** Average cores busy per process role, from `go` to both results (load generators count as bench). */
  readonly cores: CpuMs | undefined;
  /** CPU per delivered event, µs, per process role: steadier than events/s on a shared machine. */
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
  /**
   * CPU per delivered event, µs, of each broker process by name (scheduler ns, not ticks): in the
   * stages layout (bench-broker.ts) that is ingest, persister and fan-out delivery apart.
   */
  readonly processCpuUsPerEvent: Readonly<Record<string, number>>;
  /**
   * Read and write system calls per delivered event of each broker process by name
   * (/proc/<pid>/io `syscr`/`syscw`: socket reads and writes, which libuv makes with
   * read/write/writev): a count of work that the machine's noise does not blur as it does CPU.
   */
  readonly processSyscallsPerEvent: Readonly<
    Record<string, { readonly reads: number; readonly writes: number }>
  >;
  /** Events stored per persister transaction, on average (batching at this load). */
  readonly eventsPerTransaction: number;
  /** CPU of each load generator over its run, ms. */
  readonly loadgenCpuMs: { readonly producer: number; readonly subscribers: number };
  /** Acked / stored / delivered every 250 ms, from the first send. */
  readonly timeline: readonly ProgressPoint[];
  /** Date.now() at `go` and at the end. */
  readonly windowEpochMs: readonly [number, number];
}

export async function drive(
  broker: BenchBroker,
  producerArgs: Omit<ProducerArgs, 'grpcTarget'>,
  subscriberArgs: Omit<SubscribersArgs, 'wsUrl' | 'threadIds' | 'expected'>,
): Promise<Driven> {
  await using producer = await forkLoadgen<ProducerResult, ProducerInfo>('producer', {
    ...producerArgs,
    grpcTarget: broker.grpcTarget,
  } satisfies ProducerArgs);
  await using subscribers = await forkLoadgen<SubscribersResult>('subscribers', {
    ...subscriberArgs,
    wsUrl: broker.wsUrl,
    threadIds: producerArgs.threads.map((t) => t.threadId),
    expected: producer.info.events,
  } satisfies SubscribersArgs);
  await using progress = await StoredProgress.start(broker.databaseUrl);

  const cpuBefore = cpuSnapshot(broker.pids);
  const nsBefore = processesNs(broker.pidsByName);
  const ioBefore = processesIo(broker.pidsByName);
  const t0 = performance.now();
  const fromEpoch = Date.now();
  subscribers.go();
  producer.go();
  const timeoutMs = subscriberArgs.timeoutMs + 30_000;
  const [p, s] = await Promise.all([producer.result(timeoutMs), subscribers.result(timeoutMs)]);
  const cpuAfter = cpuSnapshot(broker.pids);
  const nsAfter = processesNs(broker.pidsByName);
  const ioAfter = processesIo(broker.pidsByName);
  const processSyscallsPerEvent: Record<string, { reads: number; writes: number }> = {};
  const perEvent = (n: number) => Math.round((n / Math.max(1, s.delivered)) * 1000) / 1000;
  for (const [name, io] of Object.entries(ioAfter)) {
    const b = ioBefore[name];
    if (!b || !io) continue;
    processSyscallsPerEvent[name] = {
      reads: perEvent(io.reads - b.reads),
      writes: perEvent(io.writes - b.writes),
    };
  }
  const processCpuUsPerEvent: Record<string, number> = {};
  for (const [name, ns] of Object.entries(nsAfter)) {
    const used = ns - (nsBefore[name] ?? 0);
    if (s.delivered > 0) processCpuUsPerEvent[name] = Math.round((used / 1000 / s.delivered) * 10) / 10;
  }
  const eventsPerTransaction = await progress.eventsPerTransaction().catch(() => Number.NaN);
  return {
    producer: p,
    subscribers: s,
    cores: coresUsed(cpuBefore, cpuAfter, performance.now() - t0),
    cpuUsPerEvent: cpuPerEvent(cpuBefore, cpuAfter, s.delivered),
    processCpuUsPerEvent,
    processSyscallsPerEvent,
    eventsPerTransaction,
    loadgenCpuMs: { producer: Math.round(p.cpuMs), subscribers: Math.round(s.cpuMs) },
    timeline: progress.timeline(p.firstSendAtMs, p.acks, s.deliveries),
    windowEpochMs: [fromEpoch, Date.now()],
  };
}

function processesIo(
  pids: Readonly<Record<string, number>>,
): Record<string, { reads: number; writes: number } | undefined> {
  return Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, syscallCounts(pid)]));
}

/** A process's read and write system calls so far (Linux; undefined elsewhere or once it has exited). */
function syscallCounts(pid: number): { reads: number; writes: number } | undefined {
  try {
    const io = readFileSync(`/proc/${pid}/io`, 'utf8');
    const field = (name: string) => Number(new RegExp(`^${name}: (\\d+)$`, 'm').exec(io)?.[1] ?? Number.NaN);
    return { reads: field('syscr'), writes: field('syscw') };
  } catch {
    return undefined;
  }
}

function processesNs(pids: Readonly<Record<string, number>>): Record<string, number> {
  return Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, processNs(pid)]));
}

/**
 * A producer process sending `events` token events to one thread, `batchSize` per
 * request, at most `window` requests unacked (fan-out and catch-up scenarios).
 */
export function oneThreadProducer(
  grpcTarget: string,
  threadId: string,
  o: { readonly events: number; readonly batchSize: number; readonly window: number },
) {
  return forkLoadgen<ProducerResult>('producer', {
    grpcTarget,
    threads: [{ threadId, runId: 'run-000' }],
    streams: 1,
    ack: 'ACCEPTED',
    mixed: false,
    batchSize: o.batchSize,
    load: { kind: 'closed', events: o.events, window: o.window },
  } satisfies ProducerArgs);
}
