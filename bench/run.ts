/**
 * runstream's benchmark (issue 5): `node dist/bench/run.js [--quick] [--profile]
 * [--only=pg,e2e,ingest,latency,threads,persisted,...]` (experiments: `--threads=N`,
 * `--rates=1000,5000`, `--linger=0,5`, `--mixed`, `--split`, `--env RS_PG_POOL_SIZE=32`, repeatable).
 *
 * Starts its own nats-server and Postgres, and for every measurement a fresh broker
 * process (spawnBroker) on a fresh database and stream, driven by load-generator child
 * processes (bench/loadgen/), then measures:
 *  - pg        B-pg, raw `pg` baseline: the broker's seq protocol on the same rows, no broker;
 *  - js        B-js, raw JetStream publishes, per-message acks, 256 in flight;
 *  - ws        B-ws, a bare `ws` server sending the broker's event frames to K = 1,000 and K = 1 clients;
 *  - grpc      B-grpc, a bare grpc-js client stream of PublishRequests, 100 events each;
 *  - floor     B-path, scenario 3's (and 8's) load at 5,000 events/s through the broker's processes and
 *              servers built from the bare clients (nats.js, pg, ws): the latency floor of the parts;
 *              B-grpc-acks, the same load against a bare grpc-js Ingest server answering acks
 *              at once: the CPU floor of ingest's gRPC; B-ingest, that server publishing each
 *              request to JetStream before answering: the CPU floor of ingest;
 *  - e2e       1: full speed, ACCEPTED acks, delivered to a WebSocket subscription per thread:
 *              e2e events/s vs B-pg, and the persister's lag;
 *  - ingest    2: the same run's ACCEPTED acks, events/s vs B-js;
 *  - latency   3: open-loop offered rates up to saturation: send → WebSocket p50/p99/p99.9;
 *  - threads   7: full speed over 10,000 threads vs the 100-thread case;
 *  - persisted 8: PERSISTED acks at 5,000 events/s, producer-observed ack latency;
 *  - linger    scenario 3's load sent through the client library's batching Publisher, with
 *              each linger of `--linger=0,5` (ms), at `--linger-rates=5000` events/s: what a
 *              producer using it gets (not a target);
 *  - stages    CPU per event of each stage, each in a broker process of its own (ingest,
 *              persister, fan-out): at 1 event/request (scenario 3's load at 5,000 events/s)
 *              and at 100 events/request (the full-speed load), with nats-server, Postgres and
 *              the load generators beside them;
 *  - fanout    4: one thread → 1,000 WebSocket subscribers, delivered messages/s vs B-ws K=1000;
 *  - catchup   5: one subscriber replays 100,000 stored events, events/s vs B-ws K=1;
 *  - conns     6: 10,000 idle subscriptions, broker RSS growth per connection.
 * Requests carry events of one thread each (an agent streams its run); `--mixed` restores
 * requests mixing many threads, `--split` runs the persister in a broker process of its own,
 * `--pg-stats` reports each run's statements that took Postgres the most time (pg-statements.ts).
 * Each measurement runs 3 times (1 with --quick) and the median is reported: the machine
 * has 2 cores shared by every process here and by whatever else runs on it. Prints a
 * table and writes bench/results/<ISO date>[-quick].json; after a full run (or with
 * --write-docs) also the table and plots in docs/benchmarks.md. See docs/benchmarks.md.
 */
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { eventJson } from '../src/domain/event.js';
import { DEFAULT_PARTITIONS } from '../src/domain/partition.js';
import { findNatsServerBinary } from '../test/helpers/nats-server.js';
import { type Servers, startServers } from '../test/helpers/stack.js';
import { type BenchBroker, startBenchBroker } from './lib/bench-broker.js';
import { type CpuMs, waitForQuiet } from './lib/cpu.js';
import { reportInputFrom, writeDocsReportFromFile } from './lib/docs-report.js';
import { type LoopDelaySummary, type Measured, summarizeLoopDelay } from './lib/measured.js';
import { type BenchThread, logRecordBytes, makeThreads, nextTokenEvent } from './lib/payload.js';
import { PG_STATS_SETTINGS, statementsText } from './lib/pg-statements.js';
import { ratioTo, type Targeted, withinLimit } from './lib/ratio.js';
import {
  fmt,
  machineInfo,
  RESULTS_DIR,
  type Row,
  renderTable,
  summarizeRows,
  writeResults,
} from './lib/report.js';
import type { CurvePoint } from './lib/svg.js';
import { type CatchupResult, runCatchup } from './scenarios/catchup.js';
import { type ConnectionsResult, runConnections } from './scenarios/connections.js';
import { type FanoutResult, runFanout } from './scenarios/fanout.js';
import { curvePoint, type FixedRateResult, runFixedRate, saturated } from './scenarios/fixed-rate.js';
import { type FullSpeedResult, runFullSpeed } from './scenarios/full-speed.js';
import { type GrpcAcksResult, runGrpcAcks } from './scenarios/grpc-acks.js';
import { type GrpcBaselineResult, runGrpcBaseline } from './scenarios/grpc-baseline.js';
import { type IngestStageResult, runIngestStage } from './scenarios/ingest-stage.js';
import { type JsBaselineResult, runJsBaseline } from './scenarios/js-baseline.js';
import {
  type PathFloorFullSpeedResult,
  type PathFloorResult,
  runPathFloor,
  runPathFloorFullSpeed,
} from './scenarios/path-floor.js';
import { type PgBaselineResult, runPgBaseline } from './scenarios/pg-baseline.js';
import { runWsBaseline, type WsBaselineResult } from './scenarios/ws-baseline.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    runs: { type: 'string' },
    profile: { type: 'boolean', default: false },
    only: { type: 'string' },
    threads: { type: 'string' },
    rates: { type: 'string' },
    linger: { type: 'string' },
    'linger-rates': { type: 'string' },
    mixed: { type: 'boolean', default: false },
    split: { type: 'boolean', default: false },
    env: { type: 'string', multiple: true },
    'write-docs': { type: 'boolean', default: false },
    'pg-stats': { type: 'boolean', default: false },
  },
});
const quick = args.quick === true;
const only = new Set(
  (args.only ?? 'pg,js,ws,grpc,floor,e2e,ingest,latency,threads,persisted,linger,stages,fanout,catchup,conns')
    .split(',')
    .map((s) => s.trim()),
);
/** The full-speed run serves scenarios 1 and 2, and is the baseline of scenario 7. */
const fullSpeedWanted = only.has('e2e') || only.has('ingest') || only.has('threads');

const THREADS = args.threads ? Number(args.threads) : 100;
/** Extra environment for the broker processes (`--env RS_PG_POOL_SIZE=16`), for experiments. */
const BROKER_ENV = Object.fromEntries(
  (args.env ?? []).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
);
const STREAMS = 4;
const WS_CONNECTIONS = 4;
/** Requests of events of many threads each, as before issue 5 (for comparison). */
const MIXED = args.mixed === true;
/** The offered rate of the latency and PERSISTED-ack targets (100 threads × 50 events/s). */
const TARGET_RATE = 5_000;

const PLAN = {
  runs: args.runs ? Math.max(1, Number(args.runs)) : quick ? 1 : 3,
  /** The whole run is cut off here, whatever it is doing (children are killed on exit). */
  deadlineMs: quick ? 170_000 : 1_200_000,
  pg: { events: quick ? 20_000 : 100_000, threads: THREADS, batchSize: 500, connections: 4 },
  js: { events: quick ? 20_000 : 100_000, threads: THREADS, window: 256 },
  grpc: { events: quick ? 20_000 : 100_000, threads: THREADS, batchSize: 100 },
  /** Scenario 4 and B-ws at K = 1,000: one thread, one subscription per connection. */
  fanout: {
    subscribers: 1_000,
    processes: 2,
    events: quick ? 200 : 500,
    batchSize: 100,
    window: 8,
    timeoutMs: 60_000,
  },
  /** Scenario 5 and B-ws at K = 1. */
  catchup: { events: quick ? 20_000 : 100_000, batchSize: 100, window: 8, timeoutMs: 90_000 },
  /** Scenario 6. */
  conns: {
    connections: quick ? 2_000 : 10_000,
    processes: quick ? 2 : 4,
    settleMs: 3_000,
    timeoutMs: 60_000,
  },
  fullSpeed: {
    events: quick ? 20_000 : 100_000,
    threads: THREADS,
    streams: STREAMS,
    batchSize: 100,
    window: 8,
    wsConnections: WS_CONNECTIONS,
    mixed: MIXED,
    timeoutMs: 60_000,
  },
  /** Scenario 7: the full-speed run over this many threads (each request then has events/threads). */
  manyThreads: { threads: quick ? 2_000 : 10_000 },
  fixedRate: {
    /** Rising offered rates; the curve stops at the first saturated one (see fixed-rate.ts). */
    rates: args.rates
      ? args.rates.split(',').map(Number)
      : [1_000, 2_500, 5_000, 10_000, 20_000, 40_000, 80_000],
    durationMs: quick ? 2_000 : 6_000,
    warmupMs: quick ? 1_000 : 3_000,
    threads: THREADS,
    /** One PublishStream per thread, as agents stream their runs (the broker bounds each stream's
     * in-flight requests); --mixed multiplexes the threads over a few streams, as before. */
    streams: MIXED ? STREAMS : THREADS,
    wsConnections: WS_CONNECTIONS,
    tickMs: 10,
    batchSize: 100,
    mixed: MIXED,
    drainTimeoutMs: quick ? 10_000 : 20_000,
  },
  /** The lingers (ms) of the `linger` measurements: none (the client's default), and 5 ms. */
  lingers: args.linger ? args.linger.split(',').map(Number) : [0, 5],
  /** Their offered rates, events/s. */
  lingerRates: args['linger-rates'] ? args['linger-rates'].split(',').map(Number) : [TARGET_RATE],
} as const;

/** Rough cost of each measurement with its broker start and stop, for the time budget. */
const ESTIMATE_MS = {
  pg: quick ? 5_000 : 15_000,
  fullSpeed: quick ? 15_000 : 45_000,
  fixedRate: PLAN.fixedRate.warmupMs + PLAN.fixedRate.durationMs + 6_000,
  wsFanout: quick ? 12_000 : 25_000,
  wsCatchup: quick ? 4_000 : 8_000,
  grpc: quick ? 4_000 : 8_000,
  fanout: quick ? 18_000 : 35_000,
  catchup: quick ? 14_000 : 45_000,
  conns: quick ? 18_000 : 50_000,
};

interface RunResult {
  pg?: PgBaselineResult;
  js?: JsBaselineResult;
  /** B-ws at K = 1,000 (scenario 4's baseline) and K = 1 (scenario 5's). */
  wsFanout?: WsBaselineResult;
  wsCatchup?: WsBaselineResult;
  grpc?: GrpcBaselineResult;
  /** Scenarios 4, 5 and 6. */
  fanout?: Targeted<FanoutResult>;
  catchup?: Targeted<CatchupResult>;
  conns?: Targeted<ConnectionsResult>;
  /** Scenarios 1 (e2e) and 2 (ingest): one full-speed run over THREADS threads. */
  fullSpeed?: Targeted<FullSpeedResult>;
  /** Scenario 2 on a broker process with only the ingest role. */
  ingestStage?: Targeted<IngestStageResult>;
  /** Scenario 7: the same over PLAN.manyThreads.threads. */
  threads?: Targeted<FullSpeedResult>;
  /** Scenario 7's baseline: the 100-thread run with the same events per request as the many-thread run. */
  threadsBase?: FullSpeedResult;
  /** Scenario 3: one result per offered rate, up to the first saturated one. */
  latency: Targeted<FixedRateResult>[];
  /** Scenario 3's curve, from `latency`. */
  curve: CurvePoint[];
  /** Scenario 8. */
  persisted?: Targeted<FixedRateResult>;
  /** Scenario 3's load through the client library's Publisher, one result per linger (not a target). */
  linger: FixedRateResult[];
  /** B-path at the target rate: scenario 3's load through the bare parts (the latency floor). */
  floor?: PathFloorResult;
  /** B-path's curve: the floor at each of scenario 3's rates, up to its first saturated one. */
  floorCurve: CurvePoint[];
  /** The same with commit receipts sent and timed: scenario 8's floor. */
  floorReceipts?: PathFloorResult;
  /** B-grpc-acks: scenario 3's load against a bare gRPC server answering acks (ingest's CPU floor). */
  floorGrpc?: GrpcAcksResult;
  /** B-ingest: the same with the bare server publishing each request to JetStream first (ingest's floor). */
  floorIngest?: GrpcAcksResult;
  /** B-path at full speed, 100 events a message: scenario 1's throughput floor. */
  floorFullSpeed?: PathFloorFullSpeedResult;
  /** CPU per event by stage, one broker process per stage: at 1 and at 100 events per request. */
  stages?: StagesResult;
  errors: string[];
  brokerLogs: Record<string, string[]>;
}

const stamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
const profileDir = args.profile ? `${RESULTS_DIR}profiles-${stamp.replace(/:/g, '-')}` : undefined;

function log(line: string): void {
  process.stdout.write(`${line}\n`);
}

function loopText(l: Record<string, LoopDelaySummary> | undefined): string {
  if (!l) return '';
  return Object.entries(l)
    .map(
      ([name, d]) =>
        `${name} loop delay mean ${d.meanMs} ms, worst p99 ${d.p99MaxMs} ms, max ${d.maxMs} ms; ` +
        `GC ${d.gcPerSecond}/s, ${Math.round(d.gcShare * 100)}% of the time, longest ${d.gcMaxMs} ms`,
    )
    .join('; ');
}

function perEventText(c: Omit<CpuMs, 'other'> | undefined): string {
  if (!c) return '';
  return `CPU µs/event: broker ${c.broker}, nats ${c.nats}, pg ${c.postgres}, bench ${c.bench}`;
}

function coresText(c: CpuMs | undefined): string {
  if (!c) return '';
  return `cores: broker ${c.broker.toFixed(2)}, nats ${c.nats.toFixed(2)}, pg ${c.postgres.toFixed(2)}, bench ${c.bench.toFixed(2)}, other ${c.other.toFixed(2)}`;
}

/** Below this much CPU used by the rest of the machine, a measurement may start. */
const QUIET_OTHER_CORES = 0.3;
/** Longest wait for that before measuring anyway (the measurement records what "other" used). */
const QUIET_WAIT_MS = quick ? 3_000 : 8_000;
/** Time kept in hand at the end for cleanup and the report. */
const RESERVE_MS = 20_000;

/**
 * Before a measurement: false (and it is skipped) when it would not finish within the
 * deadline; otherwise waits a little for the machine to be quiet.
 */
async function ready(run: RunResult, label: string, estimateMs: number, startedAt: number): Promise<boolean> {
  const left = PLAN.deadlineMs - RESERVE_MS - (performance.now() - startedAt);
  if (estimateMs > left) {
    run.errors.push(`${label}: skipped, ${Math.round(left / 1000)} s left of the time budget`);
    log(`  ${label} skipped: ${Math.round(left / 1000)} s left of the time budget`);
    return false;
  }
  const other = await waitForQuiet(QUIET_OTHER_CORES, Math.min(QUIET_WAIT_MS, left - estimateMs));
  if (other !== undefined && other >= QUIET_OTHER_CORES) {
    log(`  (machine busy: other processes use ${other.toFixed(2)} cores; measuring anyway)`);
  }
  return true;
}

/** Runs one measurement on a fresh broker; a failure is recorded and the run goes on. */
async function withBroker<T extends Measured>(
  servers: Servers,
  run: RunResult,
  label: string,
  fn: (broker: BenchBroker) => Promise<T>,
  layout: { readonly roles?: string; readonly stages?: boolean } = {},
): Promise<T | undefined> {
  const { roles, stages } = layout;
  try {
    await using broker = await startBenchBroker(servers, {
      label,
      split: roles === undefined && stages !== true && args.split === true,
      ...(roles ? { roles } : {}),
      ...(stages ? { stages } : {}),
      env: BROKER_ENV,
      ...(profileDir ? { profileDir } : {}),
      ...(args['pg-stats'] ? { pgStats: true } : {}),
    });
    try {
      const result = await fn(broker).catch((err: unknown) => {
        // A broker that died explains the client's error better than the error does.
        if (broker.earlyExits.length === 0) throw err;
        throw new Error(`broker exited early: ${broker.earlyExits.join('; ')}`, { cause: err });
      });
      const delays = await broker.stop();
      result.loopDelay = {};
      for (const [name, seconds] of Object.entries(delays)) {
        const summary = summarizeLoopDelay(seconds, result.windowEpochMs);
        if (summary) result.loopDelay[name] = summary;
      }
      const statements = broker.statements();
      if (statements) {
        result.pgStatements = statements;
        log(
          `  postgres, most time (pg_stat_statements, the whole run):\n${statementsText(statements.slice(0, 5))}`,
        );
      }
      return result;
    } finally {
      if (broker.logCount() > 0) {
        run.brokerLogs[label] = [...broker.logLines];
        log(`  broker logged ${broker.logCount()} warning/error lines; last: ${broker.logLines.at(-1)}`);
      }
    }
  } catch (err) {
    run.errors.push(`${label}: ${(err as Error).message}`);
    log(`  ${label} FAILED: ${(err as Error).stack ?? err}`);
    return undefined;
  }
}

/** Runs one baseline (no broker) with its one-line report; a failure is recorded and the run goes on. */
async function baseline<T extends { cores: CpuMs | undefined }>(
  run: RunResult,
  tag: string,
  label: string,
  estimateMs: number,
  startedAt: number,
  fn: () => Promise<T>,
  describe: (res: T) => string,
): Promise<T | undefined> {
  if (!(await ready(run, label, estimateMs, startedAt))) return undefined;
  try {
    const res = await fn();
    log(
      `${tag} ${label.padEnd(11)} ${describe(res)}\n  ${coresText(res.cores)} (the bare server counts as broker)`,
    );
    return res;
  } catch (err) {
    run.errors.push(`${label}: ${(err as Error).message}`);
    log(`${tag} ${label} FAILED: ${(err as Error).stack ?? err}`);
    return undefined;
  }
}

/** `nats-server --version` and Postgres' `version()`, for the record. */
async function versions(servers: Servers): Promise<{ natsServer: string; postgres: string }> {
  let natsServer = 'unknown';
  try {
    natsServer = execFileSync(findNatsServerBinary(), ['--version'], { encoding: 'utf8' }).trim();
  } catch {
    // reported as unknown
  }
  const { rows } = await servers.db.query<{ v: string }>('SELECT version() AS v');
  return { natsServer, postgres: rows[0]?.v.split(' on ')[0] ?? 'unknown' };
}

async function main(): Promise<void> {
  const deadline = setTimeout(() => {
    process.stderr.write(`bench: deadline of ${PLAN.deadlineMs / 1000} s reached; stopping everything\n`);
    process.exit(3); // the helpers' exit hooks kill every server and broker and remove their temp dirs
  }, PLAN.deadlineMs);
  deadline.unref();
  process.setMaxListeners(100); // spawnBroker adds an exit hook per broker
  const startedAt = performance.now();
  const loadStart = os.loadavg();

  const [sampleThread] = makeThreads(1) as [BenchThread];
  const sample = nextTokenEvent(sampleThread);
  const payload = {
    logRecordBytes: logRecordBytes(sample),
    logRecordBytesWithTimestamp: logRecordBytes(nextTokenEvent(sampleThread, 12345.678)),
    wsEventBytes: Buffer.byteLength(
      eventJson({
        thread_id: sample.thread_id,
        run_id: sample.run_id,
        event_id: sample.event_id,
        event_type: 'ai_chunk',
        category: 'message',
        user_id: '',
        created_at: new Date().toISOString(),
        content_json: sample.content_json,
        metadata_json: sample.metadata_json,
        seq: 1234,
        offset: 123456,
      }),
    ),
    example: sample,
  };

  log(`runstream bench ${stamp} (${quick ? 'quick' : 'full'}: ${PLAN.runs} run(s), median reported)`);
  log(
    `machine: ${os.cpus().length} × ${os.cpus()[0]?.model ?? '?'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ` +
      `node ${process.version}, load ${loadStart.map((l) => l.toFixed(2)).join(' ')}`,
  );
  log(`payload: ${payload.logRecordBytes} B log record, ${payload.wsEventBytes} B WebSocket event JSON`);

  await using servers = await startServers({
    own: true,
    ...(args['pg-stats'] ? { pgSettings: PG_STATS_SETTINGS } : {}),
  });
  const v = await versions(servers);
  log(`servers: ${v.natsServer}, ${v.postgres} (fsync=off, as the test helpers run it)`);

  const runs: RunResult[] = [];
  for (let r = 1; r <= PLAN.runs; r++) {
    const run: RunResult = { latency: [], curve: [], floorCurve: [], linger: [], errors: [], brokerLogs: {} };
    runs.push(run);
    const tag = `[run ${r}/${PLAN.runs}]`;

    if (only.has('pg') && (await ready(run, 'B-pg', ESTIMATE_MS.pg, startedAt))) {
      try {
        const res = await runPgBaseline(servers, PLAN.pg);
        run.pg = res;
        log(
          `${tag} B-pg        ${fmt(res.eventsPerS, 0)} events/s (${res.stored}/${res.events} rows in ${res.batches} ` +
            `batches, ${(res.ms / 1000).toFixed(1)} s)\n  ${coresText(res.cores)}\n  ${perEventText(res.cpuUsPerEvent)}`,
        );
      } catch (err) {
        run.errors.push(`B-pg: ${(err as Error).message}`);
        log(`${tag} B-pg FAILED: ${(err as Error).stack ?? err}`);
      }
    }

    // As scenario 3 (no commit receipts) over the curve's rates up to twice the target's, as
    // scenario 3's curve goes (up to its first saturated rate, and the target rate whatever
    // happened before); then as scenario 8 (receipts sent and timed) at the target rate.
    const floorRates = only.has('latency')
      ? PLAN.fixedRate.rates.filter((rate) => rate <= 2 * TARGET_RATE)
      : [TARGET_RATE];
    const floorPlan = only.has('floor')
      ? [
          ...(floorRates.includes(TARGET_RATE) ? floorRates : [...floorRates, TARGET_RATE]).map((rate) => ({
            rate,
            receipts: false,
          })),
          { rate: TARGET_RATE, receipts: true },
        ]
      : [];
    let floorPast = false;
    for (const { rate, receipts } of floorPlan) {
      if (floorPast && !receipts && rate !== TARGET_RATE) continue;
      if (!(await ready(run, 'B-path', ESTIMATE_MS.fixedRate, startedAt))) break;
      const name = receipts ? 'B-path+receipts' : `B-path ${rate}`;
      try {
        const res = await runPathFloor(servers, {
          ...PLAN.fixedRate,
          rate,
          partitions: DEFAULT_PARTITIONS,
          receipts,
        });
        if (receipts) run.floorReceipts = res;
        else {
          if (rate === TARGET_RATE) run.floor = res;
          run.floorCurve.push(curvePoint(res));
          if (saturated(res)) floorPast = true;
        }
        log(`${tag} ${name.padEnd(15)} ${floorText(res)}`);
      } catch (err) {
        // Past its saturation the floor may not deliver everything within the drain timeout:
        // that ends its curve, and is an error only at the target rate.
        if (receipts || rate <= TARGET_RATE) run.errors.push(`${name}: ${(err as Error).message}`);
        else floorPast = true;
        log(`${tag} ${name} FAILED: ${(err as Error).stack ?? err}`);
      }
    }
    if (only.has('floor') && (await ready(run, 'B-grpc-acks', ESTIMATE_MS.fixedRate, startedAt))) {
      try {
        const res = await runGrpcAcks({ ...PLAN.fixedRate, rate: TARGET_RATE });
        run.floorGrpc = res;
        log(`${tag} B-grpc-acks     ${grpcAcksText(res)}`);
      } catch (err) {
        run.errors.push(`B-grpc-acks: ${(err as Error).message}`);
        log(`${tag} B-grpc-acks FAILED: ${(err as Error).stack ?? err}`);
      }
    }
    if (only.has('floor') && (await ready(run, 'B-ingest', ESTIMATE_MS.fixedRate, startedAt))) {
      try {
        const res = await runGrpcAcks({ ...PLAN.fixedRate, rate: TARGET_RATE }, servers);
        run.floorIngest = res;
        log(`${tag} B-ingest        ${grpcAcksText(res)}`);
      } catch (err) {
        run.errors.push(`B-ingest: ${(err as Error).message}`);
        log(`${tag} B-ingest FAILED: ${(err as Error).stack ?? err}`);
      }
    }
    if (only.has('floor') && (await ready(run, 'B-path full speed', ESTIMATE_MS.fullSpeed, startedAt))) {
      try {
        const f = PLAN.fullSpeed;
        const res = await runPathFloorFullSpeed(servers, {
          events: f.events,
          threads: f.threads,
          partitions: DEFAULT_PARTITIONS,
          batchSize: f.batchSize,
          window: f.streams * f.window,
          wsConnections: f.wsConnections,
          timeoutMs: f.timeoutMs,
        });
        run.floorFullSpeed = res;
        log(
          `${tag} B-path full    ${fmt(res.e2eEventsPerS, 0)} e2e events/s (${res.received}/${res.events} in ` +
            `${(res.e2eMs / 1000).toFixed(1)} s, ${fmt(res.eventsPerTransaction, 1)} events/transaction)\n  ` +
            `${coresText(res.cores)} (the relay counts as broker)\n  ${perEventText(res.cpuUsPerEvent)}`,
        );
      } catch (err) {
        run.errors.push(`B-path full speed: ${(err as Error).message}`);
        log(`${tag} B-path full speed FAILED: ${(err as Error).stack ?? err}`);
      }
    }

    if (only.has('js') && (await ready(run, 'B-js', ESTIMATE_MS.pg, startedAt))) {
      try {
        const res = await runJsBaseline(servers, PLAN.js);
        run.js = res;
        log(
          `${tag} B-js        ${fmt(res.eventsPerS, 0)} events/s (${res.acked}/${res.events} acked)\n  ${coresText(res.cores)}`,
        );
      } catch (err) {
        run.errors.push(`B-js: ${(err as Error).message}`);
        log(`${tag} B-js FAILED: ${(err as Error).stack ?? err}`);
      }
    }

    if (only.has('ws')) {
      const f = PLAN.fanout;
      run.wsFanout = await baseline(
        run,
        tag,
        'B-ws K=1000',
        ESTIMATE_MS.wsFanout,
        startedAt,
        () =>
          runWsBaseline({
            clients: f.subscribers,
            events: f.events,
            processes: f.processes,
            timeoutMs: f.timeoutMs,
          }),
        wsBaselineText,
      );
      const c = PLAN.catchup;
      run.wsCatchup = await baseline(
        run,
        tag,
        'B-ws K=1',
        ESTIMATE_MS.wsCatchup,
        startedAt,
        () => runWsBaseline({ clients: 1, events: c.events, processes: 1, timeoutMs: c.timeoutMs }),
        wsBaselineText,
      );
    }

    if (only.has('grpc')) {
      run.grpc = await baseline(
        run,
        tag,
        'B-grpc',
        ESTIMATE_MS.grpc,
        startedAt,
        () => runGrpcBaseline(PLAN.grpc),
        (res) => `${fmt(res.eventsPerS, 0)} events/s (${res.received}/${res.events} received)`,
      );
    }

    if (fullSpeedWanted && (await ready(run, 'e2e', ESTIMATE_MS.fullSpeed, startedAt))) {
      const res = await withBroker(servers, run, `e2e-run${r}`, (b) => runFullSpeed(b, PLAN.fullSpeed));
      if (res) {
        run.fullSpeed = res;
        log(`${tag} e2e+ingest  ${fullSpeedText(res)}`);
      }
    }

    if (only.has('ingest') && (await ready(run, 'ingest', ESTIMATE_MS.fullSpeed, startedAt))) {
      const res = await withBroker(
        servers,
        run,
        `ingest-stage-run${r}`,
        (b) => runIngestStage(b, PLAN.fullSpeed),
        { roles: 'ingest' },
      );
      if (res) {
        run.ingestStage = res;
        log(
          `${tag} ingest only ${fmt(res.ingestEventsPerS, 0)} events/s acked (${res.acked} acked, failed requests ${res.failedRequests}${res.firstError ? `: ${res.firstError}` : ''})` +
            `\n  ${coresText(res.cores)}\n  ${perEventText(res.cpuUsPerEvent)}`,
        );
      }
    }

    // Scenario 7 compares thread counts at one request size: with N events over 10,000
    // threads a request carries N / 10,000 events, so the 100-thread baseline does too.
    const manyThreadsBatch = Math.max(1, Math.floor(PLAN.fullSpeed.events / PLAN.manyThreads.threads));
    if (only.has('threads') && (await ready(run, 'threads', ESTIMATE_MS.fullSpeed, startedAt))) {
      const res = await withBroker(servers, run, `threads-base-run${r}`, (b) =>
        runFullSpeed(b, { ...PLAN.fullSpeed, batchSize: manyThreadsBatch }),
      );
      if (res) {
        run.threadsBase = res;
        log(`${tag} threads 100 ${fullSpeedText(res)}`);
      }
    }
    if (only.has('threads') && (await ready(run, 'threads', ESTIMATE_MS.fullSpeed, startedAt))) {
      const res = await withBroker(servers, run, `threads-run${r}`, (b) =>
        runFullSpeed(b, {
          ...PLAN.fullSpeed,
          threads: PLAN.manyThreads.threads,
          batchSize: manyThreadsBatch,
        }),
      );
      if (res) {
        run.threads = res;
        log(`${tag} threads     ${fullSpeedText(res)}`);
      }
    }

    if (only.has('latency')) {
      // Up to the first saturated rate; the target rate is measured even past it, for its target.
      let past = false;
      for (const rate of PLAN.fixedRate.rates) {
        if (past && rate !== TARGET_RATE) continue;
        if (!(await ready(run, `latency${rate}`, ESTIMATE_MS.fixedRate, startedAt))) break;
        const res = await withBroker(servers, run, `latency${rate}-run${r}`, (b) =>
          runFixedRate(b, { ...PLAN.fixedRate, rate, ack: 'ACCEPTED' }),
        );
        if (!res) break;
        run.latency.push(res);
        run.curve.push(curvePoint(res));
        log(`${tag} latency ${String(rate).padEnd(7)} ${fixedRateText(res)}`);
        if (!past && saturated(res)) {
          past = true;
          log(
            `  saturated (received ${fmt(res.receivedPerS, 0)}/s, p50 ${fmt(res.e2eLatency.p50, 1)} ms): curve ends` +
              `${rate < TARGET_RATE && PLAN.fixedRate.rates.includes(TARGET_RATE) ? `, but for ${fmt(TARGET_RATE, 0)} events/s` : ''}`,
          );
        }
      }
    }

    if (only.has('persisted') && (await ready(run, 'persisted', ESTIMATE_MS.fixedRate, startedAt))) {
      const res = await withBroker(servers, run, `persisted${TARGET_RATE}-run${r}`, (b) =>
        runFixedRate(b, { ...PLAN.fixedRate, rate: TARGET_RATE, ack: 'PERSISTED' }),
      );
      if (res) {
        run.persisted = res;
        log(`${tag} persisted ${String(TARGET_RATE).padEnd(5)} ${fixedRateText(res)}`);
      }
    }
    for (const rate of only.has('linger') ? PLAN.lingerRates : []) {
      for (const linger of PLAN.lingers) {
        if (!(await ready(run, `linger${linger}-${rate}`, ESTIMATE_MS.fixedRate, startedAt))) break;
        const res = await withBroker(servers, run, `linger${linger}-${rate}-run${r}`, (b) =>
          runFixedRate(b, { ...PLAN.fixedRate, rate, ack: 'ACCEPTED', linger }),
        );
        if (res) {
          run.linger.push(res);
          log(`${tag} Publisher, linger ${linger} ms, ${rate}/s: ${fixedRateText(res)}`);
        }
      }
    }
    if (only.has('stages')) {
      const at = (res: FullSpeedResult | FixedRateResult | undefined, eventsPerRequest: number) =>
        res && {
          eventsPerRequest,
          delivered: res.delivered,
          eventsPerTransaction: res.eventsPerTransaction,
          otherCores: res.cores?.other,
          processSyscallsPerEvent: res.processSyscallsPerEvent,
          processCpuUsPerEvent: res.processCpuUsPerEvent,
          cpuUsPerEvent: res.cpuUsPerEvent,
        };
      const one = (await ready(run, 'stages-1', ESTIMATE_MS.fixedRate, startedAt))
        ? await withBroker(
            servers,
            run,
            `stages-1-run${r}`,
            (b) => runFixedRate(b, { ...PLAN.fixedRate, rate: TARGET_RATE, ack: 'ACCEPTED' }),
            { stages: true },
          )
        : undefined;
      const hundred = (await ready(run, 'stages-100', ESTIMATE_MS.fullSpeed, startedAt))
        ? await withBroker(servers, run, `stages-100-run${r}`, (b) => runFullSpeed(b, PLAN.fullSpeed), {
            stages: true,
          })
        : undefined;
      run.stages = {
        ...(one ? { one: at(one, one.meanEventsPerRequest) } : {}),
        ...(hundred ? { hundred: at(hundred, hundred.eventsPerRequest) } : {}),
      };
      for (const [name, st] of Object.entries(run.stages)) {
        if (st) log(`${tag} stages ${name.padEnd(8)} ${stageText(st)}`);
      }
    }

    if (only.has('fanout') && (await ready(run, 'fanout', ESTIMATE_MS.fanout, startedAt))) {
      const res = await withBroker(servers, run, `fanout-run${r}`, (b) =>
        runFanout(b, PLAN.fanout, run.wsFanout?.deliveredPerS ?? Number.NaN),
      );
      if (res) {
        run.fanout = {
          ...res,
          scenario: `4 fan-out: 1 thread → ${fmt(res.subscribers, 0)} WebSocket subscribers`,
          metric: 'delivered messages/s vs B-ws K=1000',
        };
        log(
          `${tag} fan-out     ${fmt(res.deliveredPerS, 0)} messages/s delivered (${res.delivered}/${res.events * res.subscribers}, ` +
            `${res.complete}/${res.subscribers} subscribers complete, out of order ${res.outOfOrder}; ingest ` +
            `${fmt(res.ingestEventsPerS, 0)} events/s), ${fmt(res.ratio.ratio, 2)} × B-ws` +
            `${res.errors.map((e) => `\n  subscriber error: ${e}`).join('')}\n  ${coresText(res.cores)}` +
            `\n  CPU µs/message: broker ${res.cpuUsPerMessage?.broker}, bench ${res.cpuUsPerMessage?.bench}\n  ${loopText(res.loopDelay)}`,
        );
      }
    }

    if (only.has('catchup') && (await ready(run, 'catchup', ESTIMATE_MS.catchup, startedAt))) {
      const res = await withBroker(servers, run, `catchup-run${r}`, (b) =>
        runCatchup(b, PLAN.catchup, run.wsCatchup?.deliveredPerS ?? Number.NaN),
      );
      if (res) {
        run.catchup = {
          ...res,
          scenario: `5 catch-up: ${fmt(res.events, 0)} stored events to 1 subscriber`,
          metric: 'events/s vs B-ws K=1',
        };
        log(
          `${tag} catch-up    ${fmt(res.eventsPerS, 0)} events/s (${res.delivered}/${res.events} in ${(res.ms / 1000).toFixed(1)} s, ` +
            `out of order ${res.outOfOrder}; stored in ${(res.storeMs / 1000).toFixed(1)} s), ${fmt(res.ratio.ratio, 2)} × B-ws` +
            `${res.errors.map((e) => `\n  subscriber error: ${e}`).join('')}\n  ${coresText(res.cores)}` +
            `\n  ${perEventText(res.cpuUsPerEvent)}\n  ${loopText(res.loopDelay)}`,
        );
      }
    }

    if (only.has('conns') && (await ready(run, 'conns', ESTIMATE_MS.conns, startedAt))) {
      const res = await withBroker(servers, run, `conns-run${r}`, (b) => runConnections(b, PLAN.conns));
      if (res) {
        run.conns = {
          ...res,
          scenario: `6 connections: ${fmt(res.connections, 0)} idle subscriptions`,
          metric: 'broker RSS growth KB/connection',
        };
        log(
          `${tag} connections ${fmt(res.kbPerConnection, 1)} KB/connection (RSS ${fmt(res.rssBeforeKb / 1024, 0)} → ` +
            `${fmt(res.rssAfterKb / 1024, 0)} MB; ${res.open}/${res.connections} open; opened in ${(res.openMs / 1000).toFixed(1)} s)`,
        );
      }
    }
    attachTargets(run);
  }

  const rows = summarizeRows(tableRows(runs));
  const loadEnd = os.loadavg();
  const totalS = (performance.now() - startedAt) / 1000;
  log('');
  log(
    `Results, median of ${PLAN.runs} run(s) (${stamp}, ${quick ? 'quick' : 'full'}, ${totalS.toFixed(0)} s in all):`,
  );
  log(renderTable(rows));
  const errors = runs.flatMap((r) => r.errors);
  if (errors.length > 0) log(`\n${errors.length} measurement(s) failed:\n  ${errors.join('\n  ')}`);

  const body = {
    date: stamp,
    mode: quick ? 'quick' : 'full',
    totalSeconds: Math.round(totalS),
    machine: machineInfo(v, loadStart, loadEnd),
    plan: PLAN,
    payload,
    summary: rows.map(({ scenario, metric, median, values }) => ({ scenario, metric, median, values })),
    runs,
    profiles: profileDir,
  };
  // Every target's ratio and the latency curve, medians of the runs (as the docs show them).
  const { ratios, curve, floorCurve } = reportInputFrom(body);
  log('\nTargets (median of the runs):');
  for (const t of ratios) {
    log(
      `  ${t.meets ? 'met    ' : 'MISSED '} ${t.scenario}: ${t.metric} = ${fmt(t.value, 1)} ${t.unit}, ` +
        `ratio ${fmt(t.ratio, 2)} (target ${t.better === 'higher' ? '≥' : '≤'} ${t.target})`,
    );
  }
  const file = writeResults(stamp, `${quick ? '-quick' : ''}`, {
    ...body,
    targets: ratios,
    curve,
    floorCurve,
  });
  log(`\nwrote ${file}${profileDir ? `\nbroker CPU profiles in ${profileDir}` : ''}`);
  // The docs show full runs of every scenario only, unless asked (--write-docs): a part of a
  // run (--only, --runs) would replace the whole summary. bench/docs-report.ts redoes them from the file.
  const wholeRun = !quick && args.only === undefined && args.runs === undefined;
  if (wholeRun || args['write-docs']) {
    try {
      for (const written of writeDocsReportFromFile(file)) log(`wrote ${written}`);
    } catch (err) {
      log(`docs report FAILED: ${(err as Error).message}`);
      process.exitCode = 1;
    }
  }
  if (errors.length > 0) process.exitCode = 1;
}

function wsBaselineText(res: WsBaselineResult): string {
  return (
    `${fmt(res.deliveredPerS, 0)} messages/s delivered (${res.delivered}/${res.events * res.clients} ` +
    `in ${(res.ms / 1000).toFixed(1)} s, out of order ${res.outOfOrder})`
  );
}

function grpcAcksText(res: GrpcAcksResult): string {
  return (
    `sent ${fmt(res.sentPerS, 0)}/s, ${res.meanEventsPerRequest} events/request, send → ack p50 ` +
    `${fmt(res.ackLatency.p50, 2)} p99 ${fmt(res.ackLatency.p99, 1)} ms (acked ${res.acked}/${res.sent})\n  ` +
    `${coresText(res.cores)}\n  ${perEventText(res.cpuUsPerEvent)}`
  );
}

function floorText(res: PathFloorResult): string {
  const l = res.e2eLatency;
  const c = res.receiptLatency;
  return (
    `sent ${fmt(res.sentPerS, 0)}/s, e2e p50 ${fmt(l.p50, 1)} p99 ${fmt(l.p99, 1)} p99.9 ${fmt(l.p999, 1)} ms, ` +
    `${res.receipts ? `commit receipt p50 ${fmt(c.p50, 1)} p99 ${fmt(c.p99, 1)} ms, ` : ''}` +
    `${fmt(res.eventsPerTransaction, 1)} events/transaction ` +
    `(received ${res.received}/${res.sent})\n  stages ms: send→read from JetStream p50 ${fmt(res.readLatency.p50, 1)} ` +
    `p99 ${fmt(res.readLatency.p99, 1)} | send→committed p50 ${fmt(res.committedLatency.p50, 1)} ` +
    `p99 ${fmt(res.committedLatency.p99, 1)}\n  ${coresText(res.cores)}\n  ${perEventText(res.cpuUsPerEvent)}`
  );
}

function stageText(st: StageCpu): string {
  const p = st.processCpuUsPerEvent;
  const c = st.cpuUsPerEvent;
  return (
    `${fmt(st.eventsPerRequest, 1)} events/request, ${fmt(st.eventsPerTransaction, 1)} events/transaction, ${st.delivered} delivered, ` +
    `other processes ${st.otherCores?.toFixed(2) ?? '?'} cores; CPU µs/event: ingest ${p.ingest}, ` +
    `persister ${p.persister}, fan-out ${p.fanout}${c ? `; nats ${c.nats}, pg ${c.postgres}, load generators ${c.bench}` : ''}` +
    `\n  syscalls/event (reads + writes): ${Object.entries(st.processSyscallsPerEvent)
      .map(([name, n]) => `${name} ${fmt(n.reads, 2)} + ${fmt(n.writes, 2)}`)
      .join(', ')}`
  );
}

function stagesText(res: FixedRateResult): string {
  const s = res.stages;
  if (!s) return '';
  const p = (l: { p50: number; p99: number }) => `p50 ${fmt(l.p50, 1)} p99 ${fmt(l.p99, 1)}`;
  return (
    `stages ms: send→ingest ${p(s.sendToIngest)} | ingest→tx start ${p(s.ingestToTxStart)} | ` +
    `tx start→WebSocket ${p(s.txStartToReceipt)}`
  );
}

function fixedRateText(res: FixedRateResult): string {
  const l = res.e2eLatency;
  const a = res.ackLatency;
  return (
    `sent ${fmt(res.sentPerS, 0)}/s, received ${fmt(res.receivedPerS, 0)}/s (${res.meanEventsPerRequest.toFixed(1)} events/request), ` +
    `e2e p50 ${fmt(l.p50, 1)} p99 ${fmt(l.p99, 1)} p99.9 ${fmt(l.p999, 1)} max ${fmt(l.max, 1)} ms, ` +
    `${res.ack} ack p50 ${fmt(a.p50, 1)} p99 ${fmt(a.p99, 1)} ms, ${fmt(res.eventsPerTransaction, 1)} events/transaction ` +
    `(delivered ${res.delivered}/${res.sent}, failed requests ${res.failedRequests}, out of order ${res.outOfOrder})` +
    `${res.firstError ? ` first error: ${res.firstError}` : ''}\n  ${stagesText(res)}\n  ${coresText(res.cores)}` +
    `\n  ${perEventText(res.cpuUsPerEvent)}; load generators CPU ms: producer ${res.loadgenCpuMs.producer}, ` +
    `subscribers ${res.loadgenCpuMs.subscribers}` +
    `\n  e2e p50 by second sent (ms): ${res.e2eP50BySecond.join(' ')}; producer tick late p50 ` +
    `${fmt(res.producerTickLateMs.p50, 1)} p99 ${fmt(res.producerTickLateMs.p99, 1)} ms` +
    `\n  ${loopText(res.loopDelay)}`
  );
}

function fullSpeedText(res: FullSpeedResult): string {
  const lag = res.persisterLag;
  return (
    `e2e ${fmt(res.e2eEventsPerS, 0)} events/s, ingest ${fmt(res.ingestEventsPerS, 0)} events/s, ${res.threads} threads ` +
    `(${res.eventsPerRequest} events/request; delivered ${res.delivered}/${res.events} in ${(res.e2eMs / 1000).toFixed(1)} s, ` +
    `acked in ${(res.ingestMs / 1000).toFixed(1)} s, out of order ${res.outOfOrder}, failed requests ${res.failedRequests})` +
    `${res.firstError ? ` first error: ${res.firstError}` : ''}` +
    `\n  persister lag: max ${res.persisterLag.maxEvents} events acked and not stored = ${lag.maxSeconds} s of e2e ` +
    `(${lag.bounded ? 'bounded' : 'NOT bounded'})` +
    `\n  ${coresText(res.cores)}\n  ${perEventText(res.cpuUsPerEvent)}; load generators CPU ms: ` +
    `producer ${res.loadgenCpuMs.producer}, subscribers ${res.loadgenCpuMs.subscribers}` +
    `\n  timeline (s: acked/stored/delivered): ${res.timeline.map((p) => `${p.s}: ${p.acked}/${p.stored}/${p.delivered}`).join(', ')}` +
    `\n  ${loopText(res.loopDelay)}${res.subscriberErrors.map((e) => `\n  subscriber error: ${e}`).join('')}`
  );
}

/** Issue 5's targets, each a ratio to a baseline measured in this same run (or to an absolute limit). */
function attachTargets(run: RunResult): void {
  const f = run.fullSpeed;
  if (f) {
    run.fullSpeed = {
      ...f,
      scenario: `1+2 full speed, ${f.threads} threads, ACCEPTED`,
      ratios: {
        ...(only.has('e2e')
          ? {
              'e2e events/s vs B-pg': ratioTo(
                f.e2eEventsPerS,
                run.pg?.eventsPerS ?? Number.NaN,
                0.5,
                'events/s',
              ),
            }
          : {}),
        ...(only.has('ingest')
          ? {
              'ingest acked events/s vs B-js': ratioTo(
                f.ingestEventsPerS,
                run.js?.eventsPerS ?? Number.NaN,
                3,
                'events/s',
              ),
            }
          : {}),
      },
    };
  }
  const i = run.ingestStage;
  if (i) {
    run.ingestStage = {
      ...i,
      scenario: '2 ingest stage alone (RS_ROLES=ingest), ACCEPTED',
      metric: 'ingest acked events/s vs B-js',
      ratio: ratioTo(i.ingestEventsPerS, run.js?.eventsPerS ?? Number.NaN, 3, 'events/s'),
    };
  }
  const t = run.threads;
  if (t) {
    run.threads = {
      ...t,
      scenario: `7 many threads: ${fmt(t.threads, 0)} threads`,
      metric: `e2e events/s vs ${THREADS} threads, same request size`,
      ratio: ratioTo(t.e2eEventsPerS, run.threadsBase?.e2eEventsPerS ?? Number.NaN, 0.7, 'events/s'),
    };
  }
  run.latency = run.latency.map((l) =>
    l.rate === TARGET_RATE
      ? {
          ...l,
          scenario: `3 latency at ${fmt(TARGET_RATE, 0)} events/s, ACCEPTED`,
          ratios: {
            'send → WebSocket p50 ms': withinLimit(l.e2eLatency.p50, 3, 'ms'),
            'send → WebSocket p99 ms': withinLimit(l.e2eLatency.p99, 15, 'ms'),
          },
        }
      : l,
  );
  const p = run.persisted;
  if (p) {
    run.persisted = {
      ...p,
      scenario: `8 PERSISTED acks at ${fmt(TARGET_RATE, 0)} events/s`,
      metric: 'ack p99 ms',
      ratio: withinLimit(p.ackLatency.p99, 25, 'ms'),
    };
  }
}

/** CPU per event of the broker and the servers it needs (not the bench's own producer and subscribers). */
function stackCpu(c: Omit<CpuMs, 'other'> | undefined): number | undefined {
  return c ? c.broker + c.nats + c.postgres : undefined;
}

function tableRows(runs: readonly RunResult[]): Row[] {
  const col = (f: (r: RunResult) => number | undefined) => runs.map((r) => f(r) ?? Number.NaN);
  const rows: Row[] = [];
  if (only.has('pg')) {
    rows.push({
      scenario: 'B-pg raw pg, 500/batch, 4 conns',
      metric: 'events/s',
      values: col((r) => r.pg?.eventsPerS),
      digits: 0,
    });
    rows.push({
      scenario: 'B-pg raw pg, 500/batch, 4 conns',
      metric: 'pg CPU µs/event',
      values: col((r) => r.pg?.cpuUsPerEvent?.postgres),
      digits: 0,
    });
  }
  if (only.has('js')) {
    rows.push({
      scenario: 'B-js raw JetStream publish',
      metric: 'events/s',
      values: col((r) => r.js?.eventsPerS),
      digits: 0,
    });
  }
  if (only.has('ws')) {
    const name = (k: number) => `B-ws bare ws server, K=${fmt(k, 0)}`;
    const wsRow = (k: number, res: (r: RunResult) => WsBaselineResult | undefined) =>
      rows.push({
        scenario: name(k),
        metric: 'delivered messages/s',
        values: col((r) => res(r)?.deliveredPerS),
        digits: 0,
      });
    wsRow(PLAN.fanout.subscribers, (r) => r.wsFanout);
    rows.push({
      scenario: name(PLAN.fanout.subscribers),
      metric: 'server CPU µs/message',
      values: col((r) => r.wsFanout?.cpuUsPerEvent?.broker),
      digits: 1,
    });
    wsRow(1, (r) => r.wsCatchup);
  }
  if (only.has('grpc')) {
    rows.push({
      scenario: 'B-grpc bare client stream, 100/batch',
      metric: 'events/s',
      values: col((r) => r.grpc?.eventsPerS),
      digits: 0,
    });
  }

  const fullSpeedRows = (name: string, res: (r: RunResult) => FullSpeedResult | undefined) => {
    rows.push({
      scenario: name,
      metric: 'e2e events/s',
      values: col((r) => res(r)?.e2eEventsPerS),
      digits: 0,
    });
    rows.push({
      scenario: name,
      metric: 'ingest acked events/s',
      values: col((r) => res(r)?.ingestEventsPerS),
      digits: 0,
    });
    rows.push({
      scenario: name,
      metric: 'persister lag, max s',
      values: col((r) => res(r)?.persisterLag.maxSeconds),
      digits: 2,
    });
    rows.push({
      scenario: name,
      metric: 'broker CPU µs/event',
      values: col((r) => res(r)?.cpuUsPerEvent?.broker),
      digits: 0,
    });
    rows.push({
      scenario: name,
      metric: 'broker + nats + pg CPU µs/event',
      values: col((r) => stackCpu(res(r)?.cpuUsPerEvent)),
      digits: 0,
    });
  };
  if (fullSpeedWanted) fullSpeedRows(`1+2 full speed, ${THREADS} threads, ACCEPTED`, (r) => r.fullSpeed);
  if (only.has('ingest')) {
    const name = '2 ingest stage alone: RS_ROLES=ingest';
    rows.push({
      scenario: name,
      metric: 'ingest acked events/s',
      values: col((r) => r.ingestStage?.ingestEventsPerS),
      digits: 0,
    });
    rows.push({
      scenario: name,
      metric: 'broker CPU µs/event',
      values: col((r) => r.ingestStage?.cpuUsPerEvent?.broker),
      digits: 0,
    });
    rows.push({
      scenario: name,
      metric: 'broker + nats + pg CPU µs/event',
      values: col((r) => stackCpu(r.ingestStage?.cpuUsPerEvent)),
      digits: 0,
    });
  }
  if (only.has('threads')) {
    const perRequest = Math.max(1, Math.floor(PLAN.fullSpeed.events / PLAN.manyThreads.threads));
    fullSpeedRows(`7 baseline: ${THREADS} threads, ${perRequest} events/request`, (r) => r.threadsBase);
    fullSpeedRows(
      `7 full speed, ${fmt(PLAN.manyThreads.threads, 0)} threads, ${perRequest} events/request`,
      (r) => r.threads,
    );
  }
  if (only.has('latency')) {
    for (const rate of PLAN.fixedRate.rates) {
      const res = (r: RunResult) => r.latency.find((x) => x.rate === rate);
      if (!runs.some(res)) continue;
      const name = `3 latency, ${fmt(rate, 0)} events/s offered`;
      rows.push({
        scenario: name,
        metric: 'received events/s',
        values: col((r) => res(r)?.receivedPerS),
        digits: 0,
      });
      rows.push({
        scenario: name,
        metric: 'e2e p50 ms',
        values: col((r) => res(r)?.e2eLatency.p50),
        digits: 1,
      });
      rows.push({
        scenario: name,
        metric: 'e2e p99 ms',
        values: col((r) => res(r)?.e2eLatency.p99),
        digits: 1,
      });
      rows.push({
        scenario: name,
        metric: 'e2e p99.9 ms',
        values: col((r) => res(r)?.e2eLatency.p999),
        digits: 1,
      });
      rows.push({
        scenario: name,
        metric: 'broker + nats + pg CPU µs/event',
        values: col((r) => stackCpu(res(r)?.cpuUsPerEvent)),
        digits: 0,
      });
    }
  }
  /** A row per metric of what `of` finds in each run (digits: 0 for CPU and events/s, else 1, unless given). */
  const rowsOf = <F>(
    name: string,
    of: (r: RunResult) => F | undefined,
    metrics: [string, (f: F) => number | undefined, number?][],
  ) => {
    for (const [metric, f, digits] of metrics) {
      rows.push({
        scenario: name,
        metric,
        values: col((r) => {
          const res = of(r);
          return res ? f(res) : undefined;
        }),
        digits: digits ?? (metric.includes('CPU') || metric.includes('events/s') ? 0 : 1),
      });
    }
  };
  for (const rate of only.has('linger') ? PLAN.lingerRates : []) {
    for (const linger of PLAN.lingers) {
      const res = (r: RunResult) => r.linger.find((x) => x.linger === linger && x.rate === rate);
      if (!runs.some(res)) continue;
      rowsOf(`3 via the client's Publisher, linger ${linger} ms, ${fmt(rate, 0)} events/s`, res, [
        ['e2e p50 ms', (f) => f.e2eLatency.p50],
        ['e2e p99 ms', (f) => f.e2eLatency.p99],
        ['e2e p99.9 ms', (f) => f.e2eLatency.p999],
        ['publish → ack p50 ms', (f) => f.ackLatency.p50],
        ['events/request', (f) => f.meanEventsPerRequest, 2],
        ['broker CPU µs/event', (f) => f.cpuUsPerEvent?.broker],
        ['broker + nats + pg CPU µs/event', (f) => stackCpu(f.cpuUsPerEvent)],
      ]);
    }
  }
  if (only.has('floor')) {
    for (const rate of PLAN.fixedRate.rates.includes(TARGET_RATE) ? PLAN.fixedRate.rates : [TARGET_RATE]) {
      const name = `B-path bare parts, ${fmt(rate, 0)} events/s offered`;
      if (rate === TARGET_RATE) {
        rowsOf(name, (r) => r.floor, [
          ['received events/s', (f) => f.receivedPerS],
          ['e2e p50 ms', (f) => f.e2eLatency.p50],
          ['e2e p99 ms', (f) => f.e2eLatency.p99],
          ['e2e p99.9 ms', (f) => f.e2eLatency.p999],
          ['send → read from JetStream p50 ms', (f) => f.readLatency.p50],
          ['send → committed p50 ms', (f) => f.committedLatency.p50],
          ['relay + nats + pg CPU µs/event', (f) => stackCpu(f.cpuUsPerEvent) ?? Number.NaN],
        ]);
        continue;
      }
      const point = (r: RunResult) => r.floorCurve.find((p) => p.offered === rate);
      if (!runs.some(point)) continue;
      rowsOf(name, point, [
        ['received events/s', (p) => p.achieved],
        ['e2e p50 ms', (p) => p.p50],
        ['e2e p99 ms', (p) => p.p99],
        ['e2e p99.9 ms', (p) => p.p999],
      ]);
    }
    rowsOf(`B-path with commit receipts, ${fmt(TARGET_RATE, 0)} events/s`, (r) => r.floorReceipts, [
      ['commit receipt p50 ms', (f) => f.receiptLatency.p50],
      ['commit receipt p99 ms', (f) => f.receiptLatency.p99],
      ['commit receipt p99.9 ms', (f) => f.receiptLatency.p999],
    ]);
    rowsOf(`B-grpc-acks bare gRPC server, ${fmt(TARGET_RATE, 0)} events/s`, (r) => r.floorGrpc, [
      ['server CPU µs/event', (f) => f.cpuUsPerEvent?.broker ?? Number.NaN],
      ['send → ack p50 ms', (f) => f.ackLatency.p50],
      ['send → ack p99 ms', (f) => f.ackLatency.p99],
    ]);
    rowsOf(
      `B-ingest bare gRPC server publishing to JetStream, ${fmt(TARGET_RATE, 0)} events/s`,
      (r) => r.floorIngest,
      [
        ['server CPU µs/event', (f) => f.cpuUsPerEvent?.broker ?? Number.NaN],
        ['send → ack p50 ms', (f) => f.ackLatency.p50],
        ['send → ack p99 ms', (f) => f.ackLatency.p99],
      ],
    );
    rowsOf('B-path full speed, 100 events/message', (r) => r.floorFullSpeed, [
      ['e2e events/s', (f) => f.e2eEventsPerS],
      ['relay + nats + pg CPU µs/event', (f) => stackCpu(f.cpuUsPerEvent) ?? Number.NaN],
      ['relay CPU µs/event', (f) => f.cpuUsPerEvent?.broker ?? Number.NaN],
    ]);
  }
  if (only.has('persisted')) {
    const name = `8 PERSISTED acks, ${fmt(TARGET_RATE, 0)} events/s offered`;
    rows.push({
      scenario: name,
      metric: 'ack p50 ms',
      values: col((r) => r.persisted?.ackLatency.p50),
      digits: 1,
    });
    rows.push({
      scenario: name,
      metric: 'ack p99 ms',
      values: col((r) => r.persisted?.ackLatency.p99),
      digits: 1,
    });
    rows.push({
      scenario: name,
      metric: 'ack p99.9 ms',
      values: col((r) => r.persisted?.ackLatency.p999),
      digits: 1,
    });
    rows.push({
      scenario: name,
      metric: 'e2e p50 ms',
      values: col((r) => r.persisted?.e2eLatency.p50),
      digits: 1,
    });
  }
  if (only.has('stages')) {
    const shapes = [
      ['one', `1 event/request (${fmt(TARGET_RATE, 0)} events/s offered)`],
      ['hundred', `${PLAN.fullSpeed.batchSize} events/request (full speed)`],
    ] as const;
    for (const [key, shape] of shapes) {
      const name = `CPU per stage, ${shape}, a process per stage`;
      const st = (r: RunResult) => r.stages?.[key];
      for (const [metric, f] of STAGE_COLUMNS) {
        rows.push({
          scenario: name,
          metric,
          values: col((r) => f(st(r))),
          digits: metric.includes('syscalls') ? 2 : 1,
        });
      }
    }
  }
  if (only.has('fanout')) {
    const name = `4 fan-out: 1 thread → ${fmt(PLAN.fanout.subscribers, 0)} WebSocket subscribers`;
    rows.push({
      scenario: name,
      metric: 'delivered messages/s',
      values: col((r) => r.fanout?.deliveredPerS),
      digits: 0,
    });
    rows.push({
      scenario: name,
      metric: '/ B-ws K=1000',
      values: col((r) => r.fanout?.ratio.ratio),
      digits: 2,
    });
    rows.push({
      scenario: name,
      metric: 'broker CPU µs/message',
      values: col((r) => r.fanout?.cpuUsPerMessage?.broker),
      digits: 1,
    });
  }
  if (only.has('catchup')) {
    const name = `5 catch-up: ${fmt(PLAN.catchup.events, 0)} stored events, 1 subscriber`;
    rows.push({ scenario: name, metric: 'events/s', values: col((r) => r.catchup?.eventsPerS), digits: 0 });
    rows.push({
      scenario: name,
      metric: '/ B-ws K=1',
      values: col((r) => r.catchup?.ratio.ratio),
      digits: 2,
    });
  }
  if (only.has('conns')) {
    const name = `6 connections: ${fmt(PLAN.conns.connections, 0)} idle subscriptions`;
    rows.push({
      scenario: name,
      metric: 'broker RSS KB/connection',
      values: col((r) => r.conns?.kbPerConnection),
      digits: 1,
    });
  }
  rows.push({
    scenario: 'noise: other processes on the machine',
    metric: 'cores busy, mean of the run',
    values: col((r) => {
      const measured = [
        r.pg,
        r.js,
        r.wsFanout,
        r.wsCatchup,
        r.grpc,
        r.fullSpeed,
        r.threads,
        ...r.latency,
        r.persisted,
        ...r.linger,
      ];
      const others = [...measured, r.fanout, r.catchup].flatMap((m) => (m?.cores ? [m.cores.other] : []));
      return others.length > 0 ? others.reduce((a, b) => a + b, 0) / others.length : undefined;
    }),
    digits: 2,
  });
  return rows;
}

/** One stages measurement: CPU per delivered event of each stage's process and of the servers. */
interface StageCpu {
  readonly eventsPerRequest: number;
  readonly delivered: number;
  /** Events stored per persister transaction, on average. */
  readonly eventsPerTransaction: number;
  /** Cores the rest of the machine used meanwhile: above ~0.3 the figures are a busy machine's. */
  readonly otherCores: number | undefined;
  /** Read and write system calls per delivered event of the `ingest`, `persister` and `fanout` processes. */
  readonly processSyscallsPerEvent: Readonly<
    Record<string, { readonly reads: number; readonly writes: number }>
  >;
  /** µs/event of the `ingest`, `persister` and `fanout` processes. */
  readonly processCpuUsPerEvent: Readonly<Record<string, number>>;
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
}

interface StagesResult {
  /** Scenario 3's load: one event per request at the target rate. */
  readonly one?: StageCpu | undefined;
  /** The full-speed load: 100 events per request. */
  readonly hundred?: StageCpu | undefined;
}

/** The per-stage rows of the table: µs of CPU per delivered event. */
const STAGE_COLUMNS: readonly (readonly [string, (s: StageCpu | undefined) => number | undefined])[] = [
  ['ingest µs/event', (s) => s?.processCpuUsPerEvent.ingest],
  ['persister µs/event', (s) => s?.processCpuUsPerEvent.persister],
  ['fan-out µs/event', (s) => s?.processCpuUsPerEvent.fanout],
  [
    'broker (3 stages) µs/event',
    (s) =>
      s &&
      (s.processCpuUsPerEvent.ingest ?? Number.NaN) +
        (s.processCpuUsPerEvent.persister ?? Number.NaN) +
        (s.processCpuUsPerEvent.fanout ?? Number.NaN),
  ],
  ['ingest write syscalls/event', (s) => s?.processSyscallsPerEvent.ingest?.writes],
  ['persister write syscalls/event', (s) => s?.processSyscallsPerEvent.persister?.writes],
  ['fan-out write syscalls/event', (s) => s?.processSyscallsPerEvent.fanout?.writes],
  ['nats-server µs/event', (s) => s?.cpuUsPerEvent?.nats],
  ['Postgres µs/event', (s) => s?.cpuUsPerEvent?.postgres],
  ['load generators µs/event', (s) => s?.cpuUsPerEvent?.bench],
];

main().then(
  () => process.exit(),
  (err: unknown) => {
    process.stderr.write(
      `bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exit(1);
  },
);
