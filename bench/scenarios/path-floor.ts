/**
 * Baseline B-path: scenario 3's load through the broker's processes and servers built from
 * the bare clients alone (bench/loadgen/path-floor.ts says what each does). Its latency is
 * the floor of the parts on this machine: what nats-server, Postgres, the WebSocket hop and
 * the event loops of three processes cost an event at this rate, with none of the broker's
 * work. Scenario 3's send → WebSocket latency at the same rate reads against it.
 *
 * At full speed (runPathFloorFullSpeed) the same parts carry scenario 1's load, 100 events a
 * message: its e2e events/s is the throughput floor scenario 1 reads against, and the relay's
 * CPU per event the floor of persister + fan-out at 100 events per request.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { createLogger } from '../../src/logger.js';
import { migrate } from '../../src/persist/migrate.js';
import type { Servers } from '../../test/helpers/stack.js';
import { deleteLog } from '../lib/bench-broker.js';
import { type CpuMs, coresUsed, cpuPerEvent, cpuSnapshot } from '../lib/cpu.js';
import { forkLoadgen } from '../lib/loadgen.js';
import { makeThreads } from '../lib/payload.js';
import { type LatencySummary, summarize } from '../lib/stats.js';
import {
  type ClosedLoad,
  FLOOR_TABLE,
  type PathFloorArgs,
  type ProducerResult,
  type RelayResult,
  type SubscribersResult,
} from '../loadgen/path-floor.js';

export interface PathFloorOptions {
  readonly rate: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  readonly threads: number;
  readonly partitions: number;
  readonly wsConnections: number;
  readonly tickMs: number;
  readonly drainTimeoutMs: number;
  /** The relay sends commit receipts and the producer times them (scenario 8's floor); costs core NATS messages. */
  readonly receipts: boolean;
}

export interface PathFloorResult {
  readonly rate: number;
  readonly receipts: boolean;
  readonly sent: number;
  readonly sentPerS: number;
  readonly received: number;
  /** Send → WebSocket receipt of the events sent after the warm-up, ms. */
  readonly e2eLatency: LatencySummary;
  /** Their delivery rate: count / (last receipt − first receipt), as scenario 3 counts it (subscribers.ts). */
  readonly receivedPerS: number;
  /** Send → read by the relay from JetStream, ms: the JetStream hop. */
  readonly readLatency: LatencySummary;
  /** Send → the relay's commit, ms. */
  readonly committedLatency: LatencySummary;
  /** Publish → the relay's commit receipt at the producer (what a PERSISTED ack waits for), ms; with `receipts`. */
  readonly receiptLatency: LatencySummary;
  readonly transactions: number;
  readonly eventsPerTransaction: number;
  /** Cores busy on average: `broker` is the relay. */
  readonly cores: CpuMs | undefined;
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
}

export interface PathFloorFullSpeedOptions {
  readonly events: number;
  readonly threads: number;
  readonly partitions: number;
  /** Events per message, and publishes in flight (the broker's producer: streams × window). */
  readonly batchSize: number;
  readonly window: number;
  readonly wsConnections: number;
  readonly timeoutMs: number;
}

export interface PathFloorFullSpeedResult {
  readonly events: number;
  readonly received: number;
  /** First publish → last WebSocket receipt, ms. */
  readonly e2eMs: number;
  /** Events received / e2eMs, as scenario 1 counts it. */
  readonly e2eEventsPerS: number;
  readonly transactions: number;
  readonly eventsPerTransaction: number;
  /** Cores busy on average: `broker` is the relay. */
  readonly cores: CpuMs | undefined;
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
}

/** What one pass through the bare parts returned: each process's result and the relay's CPU. */
interface Passed {
  readonly sent: ProducerResult;
  readonly seen: SubscribersResult;
  readonly stored: RelayResult;
  readonly cores: CpuMs | undefined;
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
}

/**
 * One pass of a load through the bare parts: a fresh database, table and log, the relay, the
 * subscribers and the producer; CPU from the start to the last event received, per event
 * received, as scenario 3 counts it (bench/lib/drive.ts). A lost or failed event fails it.
 */
async function pass(
  servers: Servers,
  o: {
    readonly threads: number;
    readonly partitions: number;
    readonly wsConnections: number;
    readonly receipts: boolean;
    readonly timeoutMs: number;
  },
  load: { readonly expected: number } & (
    | {
        readonly rate: number;
        readonly tickMs: number;
        readonly warmupMs: number;
        readonly durationMs: number;
      }
    | { readonly closed: ClosedLoad }
  ),
): Promise<Passed> {
  const databaseUrl = await servers.pg.createDatabase();
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  pool.on('error', () => undefined);
  const tag = randomBytes(4).toString('hex');
  const threads = makeThreads(o.threads);
  const common = {
    natsUrl: servers.nats.url,
    prefix: `bpath${tag}`,
    streamName: `BPATH_${tag}`,
    partitions: o.partitions,
    threads,
  };
  try {
    await migrate(pool, createLogger('warn'));
    await pool.query(`CREATE TABLE ${FLOOR_TABLE} (LIKE run_events INCLUDING ALL)`);
    await using relay = await forkLoadgen<RelayResult, { wsUrl: string }>('path-floor', {
      ...common,
      role: 'relay',
      databaseUrl,
      receipts: o.receipts,
    } satisfies PathFloorArgs);
    await using subscribers = await forkLoadgen<SubscribersResult>('path-floor', {
      role: 'subscribers',
      wsUrl: relay.info.wsUrl,
      connections: o.wsConnections,
      threads,
      expected: load.expected,
      timeoutMs: o.timeoutMs,
    } satisfies PathFloorArgs);
    await using producer = await forkLoadgen<ProducerResult>('path-floor', {
      ...common,
      role: 'producer',
      ...('closed' in load
        ? { rate: 0, tickMs: 0, warmupMs: 0, durationMs: 0, closed: load.closed }
        : { rate: load.rate, tickMs: load.tickMs, warmupMs: load.warmupMs, durationMs: load.durationMs }),
      receipts: o.receipts,
    } satisfies PathFloorArgs);
    const cpuBefore = cpuSnapshot([relay.pid]);
    const t0 = performance.now();
    producer.go();
    const sent = await producer.result();
    const seen = await subscribers.result();
    const ms = performance.now() - t0;
    const cpuAfter = cpuSnapshot([relay.pid]);
    relay.go(); // stop
    const stored = await relay.result();
    if (stored.error !== undefined) throw new Error(`B-path's relay could not store: ${stored.error}`);
    if (sent.failed > 0 || seen.received < sent.sent) {
      throw new Error(
        `B-path lost events: ${sent.failed} publishes failed, ${seen.received} of ${sent.sent} delivered`,
      );
    }
    return {
      sent,
      seen,
      stored,
      cores: coresUsed(cpuBefore, cpuAfter, ms),
      cpuUsPerEvent: cpuPerEvent(cpuBefore, cpuAfter, seen.received),
    };
  } finally {
    await pool.end();
    const name = decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
    await servers.db.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).catch(() => undefined);
    await deleteLog(servers.nats.url, common.streamName, o.partitions).catch(() => undefined);
  }
}

export async function runPathFloor(servers: Servers, o: PathFloorOptions): Promise<PathFloorResult> {
  const expected = Math.floor((o.rate * (o.warmupMs + o.durationMs)) / 1000);
  const { sent, seen, stored, cores, cpuUsPerEvent } = await pass(
    servers,
    { ...o, timeoutMs: o.warmupMs + o.durationMs + o.drainTimeoutMs },
    { expected, rate: o.rate, tickMs: o.tickMs, warmupMs: o.warmupMs, durationMs: o.durationMs },
  );
  // The window is the producer's: what it sent after its warm-up (its clock, as every stamp).
  const measured = (sentAt: readonly number[], samples: readonly number[]) =>
    summarize(samples.filter((_, i) => (sentAt[i] as number) >= sent.measuredFromMs));
  let count = 0;
  let firstReceipt = Number.POSITIVE_INFINITY;
  let lastReceipt = Number.NEGATIVE_INFINITY;
  for (const [i, at] of seen.sentAtMs.entries()) {
    if (at < sent.measuredFromMs) continue;
    const receipt = at + (seen.latenciesMs[i] as number);
    count++;
    if (receipt < firstReceipt) firstReceipt = receipt;
    if (receipt > lastReceipt) lastReceipt = receipt;
  }
  return {
    rate: o.rate,
    receipts: o.receipts,
    sent: sent.sent,
    sentPerS: sent.sentPerS,
    received: seen.received,
    e2eLatency: measured(seen.sentAtMs, seen.latenciesMs),
    receivedPerS:
      lastReceipt > firstReceipt ? ((count - 1) / (lastReceipt - firstReceipt)) * 1000 : Number.NaN,
    readLatency: measured(stored.readSentAtMs, stored.readMs),
    committedLatency: measured(stored.committedSentAtMs, stored.committedMs),
    receiptLatency: measured(sent.receiptSentAtMs, sent.receiptLatenciesMs),
    transactions: stored.transactions,
    eventsPerTransaction: stored.stored / Math.max(1, stored.transactions),
    cores,
    cpuUsPerEvent,
  };
}

export async function runPathFloorFullSpeed(
  servers: Servers,
  o: PathFloorFullSpeedOptions,
): Promise<PathFloorFullSpeedResult> {
  const { sent, seen, stored, cores, cpuUsPerEvent } = await pass(
    servers,
    { ...o, receipts: false },
    { expected: o.events, closed: { events: o.events, batchSize: o.batchSize, window: o.window } },
  );
  const e2eMs = seen.lastReceivedAtMs - sent.firstSendAtMs;
  return {
    events: sent.sent,
    received: seen.received,
    e2eMs,
    e2eEventsPerS: (seen.received / e2eMs) * 1000,
    transactions: stored.transactions,
    eventsPerTransaction: stored.stored / Math.max(1, stored.transactions),
    cores,
    cpuUsPerEvent,
  };
}
