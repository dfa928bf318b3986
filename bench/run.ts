/**
 * runstream's benchmark: `node dist/bench/run.js [--quick] [--profile] [--only=pg,A,Asplit,B,C]`
 * (experiments: `--threads=N`, `--rates=1000,5000`, `--env RS_PG_POOL_SIZE=32`, repeatable).
 *
 * Starts its own nats-server and Postgres, and for every measurement a fresh broker
 * process (spawnBroker) on a fresh database and stream, then measures:
 *  - B-pg  raw `pg` baseline: the broker's seq protocol on the same rows, no broker;
 *  - A     full speed with ACCEPTED acks: e2e (delivered to WebSocket) and ingest events/s;
 *          "Asplit" repeats it with the persister in a process of its own (RS_ROLES);
 *  - B     fixed offered rates: send → WebSocket latency p50/p99/p99.9;
 *  - C     PERSISTED acks at a fixed rate: producer-observed ack latency.
 * Each measurement runs 3 times (1 with --quick) and the median is reported: the machine
 * has 2 cores shared by every process here and by whatever else runs on it. Prints a
 * table and writes bench/results/<ISO date>[-quick].json. See docs/benchmarks.md.
 */
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { eventJson } from '../src/event.js';
import { findNatsServerBinary } from '../test/helpers/nats-server.js';
import { type Servers, startServers } from '../test/helpers/stack.js';
import { type BenchBroker, startBenchBroker } from './lib/bench-broker.js';
import { type CpuMs, waitForQuiet } from './lib/cpu.js';
import { type LoopDelaySummary, type Measured, summarizeLoopDelay } from './lib/measured.js';
import { type BenchThread, logRecordBytes, makeThreads, nextTokenEvent } from './lib/payload.js';
import {
  fmt,
  machineInfo,
  RESULTS_DIR,
  type Row,
  renderTable,
  summarizeRows,
  writeResults,
} from './lib/report.js';
import { type FixedRateResult, runFixedRate } from './scenarios/fixed-rate.js';
import { type FullSpeedResult, runFullSpeed } from './scenarios/full-speed.js';
import { type PgBaselineResult, runPgBaseline } from './scenarios/pg-baseline.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    profile: { type: 'boolean', default: false },
    only: { type: 'string' },
    threads: { type: 'string' },
    rates: { type: 'string' },
    env: { type: 'string', multiple: true },
  },
});
const quick = args.quick === true;
const only = new Set((args.only ?? 'pg,A,Asplit,B,C').split(',').map((s) => s.trim()));

const THREADS = args.threads ? Number(args.threads) : 100;
/** Extra environment for the broker processes (`--env RS_PG_POOL_SIZE=16`), for experiments. */
const BROKER_ENV = Object.fromEntries(
  (args.env ?? []).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
);
const STREAMS = 4;
const WS_CONNECTIONS = 4;

const PLAN = {
  runs: quick ? 1 : 3,
  /** The whole run is cut off here, whatever it is doing (children are killed on exit). */
  deadlineMs: quick ? 170_000 : 570_000,
  pg: { events: quick ? 20_000 : 100_000, threads: THREADS, batchSize: 500, connections: 4 },
  fullSpeed: {
    events: quick ? 20_000 : 100_000,
    threads: THREADS,
    streams: STREAMS,
    batchSize: 100,
    window: 8,
    wsConnections: WS_CONNECTIONS,
    drainTimeoutMs: 60_000,
  },
  fixedRate: {
    rates: args.rates ? args.rates.split(',').map(Number) : [1_000, 5_000],
    durationMs: quick ? 4_000 : 10_000,
    warmupMs: quick ? 1_000 : 2_000,
    threads: THREADS,
    streams: STREAMS,
    wsConnections: WS_CONNECTIONS,
    drainTimeoutMs: 30_000,
  },
  persisted: { rate: 1_000 },
} as const;

/** Rough cost of each measurement with its broker start and stop, for the time budget. */
const ESTIMATE_MS = {
  pg: quick ? 5_000 : 15_000,
  fullSpeed: quick ? 15_000 : 45_000,
  fixedRate: PLAN.fixedRate.warmupMs + PLAN.fixedRate.durationMs + 8_000,
};

interface RunResult {
  pg?: PgBaselineResult;
  A?: FullSpeedResult;
  /** A again with the persister in a process of its own (--only=Asplit). */
  Asplit?: FullSpeedResult;
  B: FixedRateResult[];
  C?: FixedRateResult;
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
      ([name, d]) => `${name} loop delay mean ${d.meanMs} ms, worst p99 ${d.p99MaxMs} ms, max ${d.maxMs} ms`,
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
  split = false,
): Promise<T | undefined> {
  try {
    await using broker = await startBenchBroker(servers, {
      label,
      split,
      env: BROKER_ENV,
      ...(profileDir ? { profileDir } : {}),
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

  await using servers = await startServers({ own: true });
  const v = await versions(servers);
  log(`servers: ${v.natsServer}, ${v.postgres} (fsync=off, as the test helpers run it)`);

  const runs: RunResult[] = [];
  for (let r = 1; r <= PLAN.runs; r++) {
    const run: RunResult = { B: [], errors: [], brokerLogs: {} };
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

    if (only.has('A') && (await ready(run, 'A', ESTIMATE_MS.fullSpeed, startedAt))) {
      const res = await withBroker(servers, run, `A-run${r}`, (b) => runFullSpeed(b, PLAN.fullSpeed));
      if (res) {
        run.A = res;
        log(
          `${tag} A           e2e ${fmt(res.e2eEventsPerS, 0)} events/s, ingest ${fmt(res.ingestEventsPerS, 0)} events/s ` +
            `(delivered ${res.delivered}/${res.events} in ${(res.e2eMs / 1000).toFixed(1)} s, acked in ` +
            `${(res.ingestMs / 1000).toFixed(1)} s, out of order ${res.outOfOrder})`,
        );
        log(`  ${coresText(res.cores)}\n  ${perEventText(res.cpuUsPerEvent)}\n  ${loopText(res.loopDelay)}`);
        for (const e of res.subscriberErrors) log(`  subscriber error: ${e}`);
      }
    }

    if (only.has('Asplit') && (await ready(run, 'Asplit', ESTIMATE_MS.fullSpeed, startedAt))) {
      const res = await withBroker(
        servers,
        run,
        `Asplit-run${r}`,
        (b) => runFullSpeed(b, PLAN.fullSpeed),
        true,
      );
      if (res) {
        run.Asplit = res;
        log(
          `${tag} A split     e2e ${fmt(res.e2eEventsPerS, 0)} events/s, ingest ${fmt(res.ingestEventsPerS, 0)} events/s ` +
            `(delivered ${res.delivered}/${res.events} in ${(res.e2eMs / 1000).toFixed(1)} s, acked in ` +
            `${(res.ingestMs / 1000).toFixed(1)} s, out of order ${res.outOfOrder})`,
        );
        log(`  ${coresText(res.cores)}\n  ${perEventText(res.cpuUsPerEvent)}\n  ${loopText(res.loopDelay)}`);
        for (const e of res.subscriberErrors) log(`  subscriber error: ${e}`);
      }
    }

    if (only.has('B')) {
      for (const rate of PLAN.fixedRate.rates) {
        if (!(await ready(run, `B${rate}`, ESTIMATE_MS.fixedRate, startedAt))) continue;
        const res = await withBroker(servers, run, `B${rate}-run${r}`, (b) =>
          runFixedRate(b, { ...PLAN.fixedRate, rate, ack: 'ACCEPTED' }),
        );
        if (res) {
          run.B.push(res);
          log(`${tag} B ${String(rate).padEnd(9)} ${fixedRateText(res)}`);
        }
      }
    }

    if (only.has('C') && (await ready(run, 'C', ESTIMATE_MS.fixedRate, startedAt))) {
      const rate = PLAN.persisted.rate;
      const res = await withBroker(servers, run, `C${rate}-run${r}`, (b) =>
        runFixedRate(b, { ...PLAN.fixedRate, rate, ack: 'PERSISTED' }),
      );
      if (res) {
        run.C = res;
        log(`${tag} C ${String(rate).padEnd(9)} ${fixedRateText(res)}`);
      }
    }
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

  const file = writeResults(stamp, `${quick ? '-quick' : ''}`, {
    date: stamp,
    mode: quick ? 'quick' : 'full',
    totalSeconds: Math.round(totalS),
    machine: machineInfo(v, loadStart, loadEnd),
    plan: PLAN,
    payload,
    summary: rows.map(({ scenario, metric, median, values }) => ({ scenario, metric, median, values })),
    runs,
    profiles: profileDir,
  });
  log(`\nwrote ${file}${profileDir ? `\nbroker CPU profiles in ${profileDir}` : ''}`);
  if (errors.length > 0) process.exitCode = 1;
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
    `sent ${fmt(res.sentPerS, 0)}/s (${res.meanEventsPerRequest.toFixed(1)} events/request), ` +
    `e2e p50 ${fmt(l.p50, 1)} p99 ${fmt(l.p99, 1)} p99.9 ${fmt(l.p999, 1)} max ${fmt(l.max, 1)} ms, ` +
    `${res.ack} ack p50 ${fmt(a.p50, 1)} p99 ${fmt(a.p99, 1)} ms ` +
    `(delivered ${res.delivered}/${res.sent}, failed requests ${res.failedRequests}, out of order ${res.outOfOrder})` +
    `${res.firstError ? ` first error: ${res.firstError}` : ''}\n  ${stagesText(res)}\n  ${coresText(res.cores)}` +
    `\n  ${perEventText(res.cpuUsPerEvent)}` +
    `\n  e2e p50 by second sent (ms): ${res.e2eP50BySecond.join(' ')}` +
    `\n  ${loopText(res.loopDelay)}`
  );
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
  if (only.has('A')) {
    const a = 'A full speed, ACCEPTED';
    rows.push({ scenario: a, metric: 'e2e events/s', values: col((r) => r.A?.e2eEventsPerS), digits: 0 });
    rows.push({
      scenario: a,
      metric: 'ingest acked events/s',
      values: col((r) => r.A?.ingestEventsPerS),
      digits: 0,
    });
    if (only.has('pg')) {
      rows.push({
        scenario: a,
        metric: 'e2e / B-pg',
        values: col((r) => (r.A && r.pg ? r.A.e2eEventsPerS / r.pg.eventsPerS : undefined)),
        digits: 2,
      });
    }
    rows.push({
      scenario: a,
      metric: 'broker CPU µs/event',
      values: col((r) => r.A?.cpuUsPerEvent?.broker),
      digits: 0,
    });
    rows.push({
      scenario: a,
      metric: 'broker + nats + pg CPU µs/event',
      values: col((r) => stackCpu(r.A?.cpuUsPerEvent)),
      digits: 0,
    });
  }
  if (only.has('Asplit')) {
    const a = 'A split: persister in its own process';
    rows.push({
      scenario: a,
      metric: 'e2e events/s',
      values: col((r) => r.Asplit?.e2eEventsPerS),
      digits: 0,
    });
    rows.push({
      scenario: a,
      metric: 'ingest acked events/s',
      values: col((r) => r.Asplit?.ingestEventsPerS),
      digits: 0,
    });
  }
  if (only.has('B')) {
    for (const rate of PLAN.fixedRate.rates) {
      const b = `B ${fmt(rate, 0)} events/s, ACCEPTED`;
      const res = (r: RunResult) => r.B.find((x) => x.rate === rate);
      rows.push({ scenario: b, metric: 'e2e p50 ms', values: col((r) => res(r)?.e2eLatency.p50), digits: 1 });
      rows.push({ scenario: b, metric: 'e2e p99 ms', values: col((r) => res(r)?.e2eLatency.p99), digits: 1 });
      rows.push({
        scenario: b,
        metric: 'e2e p99.9 ms',
        values: col((r) => res(r)?.e2eLatency.p999),
        digits: 1,
      });
      rows.push({
        scenario: b,
        metric: 'broker CPU µs/event',
        values: col((r) => res(r)?.cpuUsPerEvent?.broker),
        digits: 0,
      });
      rows.push({
        scenario: b,
        metric: 'broker + nats + pg CPU µs/event',
        values: col((r) => stackCpu(res(r)?.cpuUsPerEvent)),
        digits: 0,
      });
    }
  }
  if (only.has('C')) {
    const c = `C ${fmt(PLAN.persisted.rate, 0)} events/s, PERSISTED`;
    rows.push({ scenario: c, metric: 'ack p50 ms', values: col((r) => r.C?.ackLatency.p50), digits: 1 });
    rows.push({ scenario: c, metric: 'ack p99 ms', values: col((r) => r.C?.ackLatency.p99), digits: 1 });
    rows.push({ scenario: c, metric: 'e2e p50 ms', values: col((r) => r.C?.e2eLatency.p50), digits: 1 });
  }
  rows.push({
    scenario: 'noise: other processes on the machine',
    metric: 'cores busy, mean of the run',
    values: col((r) => {
      const others = [r.pg, r.A, r.Asplit, ...r.B, r.C].flatMap((m) => (m?.cores ? [m.cores.other] : []));
      return others.length > 0 ? others.reduce((a, b) => a + b, 0) / others.length : undefined;
    }),
    digits: 2,
  });
  return rows;
}

main().then(
  () => process.exit(),
  (err: unknown) => {
    process.stderr.write(
      `bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exit(1);
  },
);
