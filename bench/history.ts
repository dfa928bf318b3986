/**
 * History reads benchmark (issue 3): `node dist/bench/history.js [--quick] [--requests=N]`.
 *
 * Starts its own nats-server and Postgres, migrates a database and fills it with
 * `generate_series` (bench/lib/history-data.ts): one thread of 1,000,000 events and
 * 100,000 threads of 10, ~2M rows of ~200-byte contents, with `thread_heads` and `runs`
 * as the persister keeps them; then VACUUM ANALYZE. It then measures ListEvents pages of
 * 100, with the broker as a separate process (spawnBroker) and the client in this one:
 *
 *  - after     the 1M-event thread, `after_seq` at a random position;
 *  - before    the 1M-event thread, `before_seq` at a random position ("load earlier");
 *  - small     the first page of a random thread among the 100,000;
 *  - run       the 1M-event thread, `run_id` of one of its 10 runs, `after_seq` random within it;
 *  - category  the 1M-event thread, `categories=message`, random `after_seq`;
 *
 * each over HTTP (`GET /v1/threads/{tid}/events`) and gRPC (`runstream.v1.History/ListEvents`),
 * and beside them the raw baseline: the SQL the broker sends for that request (captured
 * from History.listEvents itself, so it is always the current query), run with `pg`
 * directly. N requests per cell, sequentially and 8 at a time: p50/p99 latency and
 * requests/s, CPU per request by process. Every query shape is also run under
 * `EXPLAIN (ANALYZE, BUFFERS)` at random positions, to check that it is an index scan
 * bounded by the page, and once at a fixed position for docs/benchmarks.md.
 *
 * Each repetition gets a fresh broker process; 3 repetitions (1 with --quick), medians
 * reported. Prints tables (also as Markdown) and writes bench/results/<date>-history[-quick].json.
 */
import { execFileSync } from 'node:child_process';
import http from 'node:http';
import os from 'node:os';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { OPEN_PRINCIPAL } from '../src/auth/principal.js';
import { DEFAULT_MAX_PAGE_BYTES } from '../src/config.js';
import type { CategoryName } from '../src/domain/event.js';
import { HistoryClient } from '../src/history/client.js';
import type { Deleter } from '../src/history/deleter.js';
import { History } from '../src/history/history.js';
import { createLogger } from '../src/logger.js';
import { migrate } from '../src/persist/migrate.js';
import { findNatsServerBinary } from '../test/helpers/nats-server.js';
import {
  type BrokerProcess,
  brokerConfig,
  type Servers,
  spawnBroker,
  startServers,
} from '../test/helpers/stack.js';
import { stopBrokerProcess } from './lib/bench-broker.js';
import { waitForQuiet } from './lib/cpu.js';
import {
  BIG_EVENTS,
  BIG_RUN_EVENTS,
  BIG_RUNS,
  BIG_THREAD,
  bigRunId,
  type DataStats,
  generateHistoryData,
  SMALL_EVENTS,
  SMALL_THREADS,
  smallThreadId,
} from './lib/history-data.js';
import { fmt, machineInfo, type Row, renderTable, summarizeRows, writeResults } from './lib/report.js';
import { type CpuNs, otherCores, schedSnapshot, usPerRequest } from './lib/schedstat.js';
import { median, summarize } from './lib/stats.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    /** Requests per cell (default 1,000; 300 with --quick). */
    requests: { type: 'string' },
  },
});
const quick = args.quick === true;

const PAGE = 100;
const TRANSPORTS = ['raw', 'http', 'grpc'] as const;
type Transport = (typeof TRANSPORTS)[number];
const TRANSPORT_LABEL: Record<Transport, string> = { raw: 'raw pg', http: 'HTTP', grpc: 'gRPC' };

const PLAN = {
  runs: quick ? 1 : 3,
  requests: args.requests ? Number(args.requests) : quick ? 300 : 1_000,
  /** Untimed requests before each (shape, transport), sequential, at other random positions. */
  warmup: quick ? 30 : 100,
  concurrency: [1, 8],
  /** Random positions run under EXPLAIN ANALYZE per shape, to check every plan. */
  explainSamples: quick ? 10 : 30,
  /**
   * Diagnostic (1M thread, after_seq): raw queries one at a time with a 1 ms pause between
   * them, near the API's cadence, for Postgres' CPU per query when its backend idles between
   * queries. Only its CPU is of interest (its latency includes the pause).
   */
  paced: quick ? 200 : 500,
  /** The whole run is cut off here (children are killed and temp dirs removed on exit). */
  deadlineMs: quick ? 170_000 : 570_000,
  page: PAGE,
} as const;

/** A ListEvents request, transport-neutral. */
interface EventsReq {
  readonly threadId: string;
  readonly afterSeq: number;
  readonly beforeSeq?: number;
  readonly runId?: string;
  readonly categories?: readonly CategoryName[];
}

interface Shape {
  readonly key: string;
  readonly label: string;
  /** The request for one random draw (uniform in [0, 1) each). */
  readonly make: (rand: () => number) => EventsReq;
  /** Events each page must hold. */
  readonly expected: number;
  /** Fixed position shown in docs/benchmarks.md. */
  readonly fixed: EventsReq;
  /** EXPLAIN samples, when not PLAN.explainSamples (a shape without a random part needs few). */
  readonly explainSamples?: number;
  /** Measured (false: only its plan is captured). */
  readonly timed: boolean;
}

const randInt = (rand: () => number, n: number) => Math.floor(rand() * n);

const SHAPES: readonly Shape[] = [
  {
    key: 'after',
    label: '1M thread, after_seq random',
    make: (r) => ({ threadId: BIG_THREAD, afterSeq: randInt(r, BIG_EVENTS - PAGE + 1) }),
    expected: PAGE,
    fixed: { threadId: BIG_THREAD, afterSeq: 500_000 },
    timed: true,
  },
  {
    key: 'before',
    label: '1M thread, before_seq random (load earlier)',
    make: (r) => ({
      threadId: BIG_THREAD,
      afterSeq: 0,
      beforeSeq: PAGE + 1 + randInt(r, BIG_EVENTS - PAGE + 1),
    }),
    expected: PAGE,
    fixed: { threadId: BIG_THREAD, afterSeq: 0, beforeSeq: 500_001 },
    timed: true,
  },
  {
    key: 'small',
    label: 'first page of a random one of 100,000 threads',
    make: (r) => ({ threadId: smallThreadId(randInt(r, SMALL_THREADS)), afterSeq: 0 }),
    expected: SMALL_EVENTS,
    fixed: { threadId: smallThreadId(42_424), afterSeq: 0 },
    timed: true,
  },
  {
    key: 'run',
    label: '1M thread, run_id (1 of 10 runs), after_seq random in the run',
    make: (r) => {
      const run = randInt(r, BIG_RUNS);
      return {
        threadId: BIG_THREAD,
        runId: bigRunId(run),
        afterSeq: run * BIG_RUN_EVENTS + randInt(r, BIG_RUN_EVENTS - 2 * PAGE),
      };
    },
    expected: PAGE,
    fixed: { threadId: BIG_THREAD, runId: bigRunId(7), afterSeq: 750_000 },
    timed: true,
  },
  {
    key: 'category',
    label: '1M thread, categories=message (80% of events), after_seq random',
    make: (r) => ({
      threadId: BIG_THREAD,
      categories: ['message'],
      afterSeq: randInt(r, BIG_EVENTS - 2 * PAGE),
    }),
    expected: PAGE,
    fixed: { threadId: BIG_THREAD, categories: ['message'], afterSeq: 500_000 },
    timed: true,
  },
  // Plans only: the first page of a late run (after_seq=0), and a sparse category.
  {
    key: 'run-first',
    label: '1M thread, run_id, first page of the run (after_seq=0)',
    make: (r) => ({ threadId: BIG_THREAD, runId: bigRunId(randInt(r, BIG_RUNS)), afterSeq: 0 }),
    expected: PAGE,
    fixed: { threadId: BIG_THREAD, runId: bigRunId(BIG_RUNS - 1), afterSeq: 0 },
    timed: false,
  },
  {
    key: 'lifecycle',
    label: '1M thread, categories=lifecycle (20 events of 1,000,000), first page',
    make: () => ({ threadId: BIG_THREAD, categories: ['lifecycle'], afterSeq: 0 }),
    expected: 2 * BIG_RUNS,
    fixed: { threadId: BIG_THREAD, categories: ['lifecycle'], afterSeq: 0 },
    explainSamples: 3,
    timed: false,
  },
];

// ---------------------------------------------------------------------------------------------------------------
// the three ways of asking

interface Sql {
  readonly text: string;
  readonly values: unknown[];
}

/** A History whose pool only records what it is asked: the SQL the broker sends for a request. */
const capturing: { last?: Sql } = {};
const sqlHistory = new History({
  pool: {
    query: async (text: string, values: unknown[]) => {
      capturing.last = { text, values };
      return { rows: [] };
    },
  } as unknown as pg.Pool,
  deleter: undefined as unknown as Deleter,
  maxPageBytes: DEFAULT_MAX_PAGE_BYTES,
});

async function sqlOf(q: EventsReq): Promise<Sql> {
  capturing.last = undefined;
  await sqlHistory.listEvents(OPEN_PRINCIPAL, {
    threadId: q.threadId,
    runId: q.runId,
    categories: q.categories && new Set(q.categories),
    afterSeq: q.afterSeq,
    beforeSeq: q.beforeSeq,
    limit: PAGE,
  });
  if (!capturing.last) throw new Error('History.listEvents sent no query');
  return capturing.last;
}

function httpPath(q: EventsReq): string {
  const p = new URLSearchParams();
  if (q.afterSeq > 0) p.set('after_seq', String(q.afterSeq));
  if (q.beforeSeq !== undefined) p.set('before_seq', String(q.beforeSeq));
  if (q.runId !== undefined) p.set('run_id', q.runId);
  if (q.categories) p.set('categories', q.categories.join(','));
  p.set('limit', String(PAGE));
  return `/v1/threads/${encodeURIComponent(q.threadId)}/events?${p}`;
}

function grpcRequest(q: EventsReq) {
  return {
    thread_id: q.threadId,
    after_seq: q.afterSeq,
    before_seq: q.beforeSeq ?? 0,
    run_id: q.runId ?? '',
    categories: (q.categories ?? []).map((c) => c.toUpperCase()) as ('MESSAGE' | 'TRACE' | 'LIFECYCLE')[],
    limit: PAGE,
  };
}

function httpGet(agent: http.Agent, port: number, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        if (res.statusCode === 200) resolve(body);
        else reject(new Error(`HTTP ${res.statusCode}: ${body.slice(0, 300)}`));
      });
    });
    req.on('error', reject);
  });
}

/** Sends request i of a prepared series; resolves to the number of events in the page. */
type Sender = (i: number) => Promise<number>;

interface Clients {
  readonly raw: pg.Pool;
  readonly agent: http.Agent;
  readonly httpPort: number;
  readonly grpc: HistoryClient;
}

async function prepare(transport: Transport, reqs: readonly EventsReq[], c: Clients): Promise<Sender> {
  switch (transport) {
    case 'raw': {
      const sqls = await Promise.all(reqs.map(sqlOf));
      return async (i) => {
        const s = sqls[i] as Sql;
        // The query asks for one row more than the page (whether there is a next one), as History does.
        return Math.min(PAGE, (await c.raw.query(s.text, s.values)).rows.length);
      };
    }
    case 'http': {
      const paths = reqs.map(httpPath);
      return async (i) =>
        (JSON.parse(await httpGet(c.agent, c.httpPort, paths[i] as string)) as { events: unknown[] }).events
          .length;
    }
    case 'grpc': {
      const grpcReqs = reqs.map(grpcRequest);
      return async (i) =>
        (await c.grpc.listEvents(grpcReqs[i] as ReturnType<typeof grpcRequest>)).events.length;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// measuring

/** mulberry32: a small seeded generator, so runs can be repeated. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function seedOf(...parts: (string | number)[]): number {
  let h = 2166136261;
  for (const ch of parts.join('/')) h = Math.imul(h ^ ch.charCodeAt(0), 16777619);
  return h >>> 0;
}

interface Cell {
  readonly shape: string;
  readonly transport: Transport | 'raw-paced';
  readonly concurrency: number;
  readonly requests: number;
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  readonly max: number;
  readonly mean: number;
  readonly perSecond: number;
  readonly failed: number;
  /** Pages whose event count was not the expected one. */
  readonly wrongCount: number;
  readonly firstError?: string;
  /** CPU per request, µs, by process role (scheduler accounting, bench/lib/schedstat.ts). */
  readonly cpuUsPerRequest?: CpuNs;
  /** Cores the rest of the machine used meanwhile. */
  readonly otherCores?: number;
}

async function measure(
  shape: Shape,
  transport: Transport | 'raw-paced',
  concurrency: number,
  send: Sender,
  n: number,
  brokerPids: readonly number[],
): Promise<Cell> {
  const lat = new Float64Array(n);
  let next = 0;
  let failed = 0;
  let wrongCount = 0;
  let firstError: string | undefined;
  const before = schedSnapshot(brokerPids);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < n; i = next++) {
        const s = performance.now();
        try {
          const got = await send(i);
          if (got !== shape.expected) wrongCount++;
        } catch (err) {
          failed++;
          firstError ??= (err as Error).message;
        }
        lat[i] = performance.now() - s;
      }
    }),
  );
  const wallMs = performance.now() - t0;
  const after = schedSnapshot(brokerPids);
  const l = summarize(Array.from(lat));
  const cpu = usPerRequest(before, after, n);
  const other = otherCores(before, after, wallMs);
  return {
    shape: shape.key,
    transport,
    concurrency,
    requests: n,
    p50: l.p50,
    p99: l.p99,
    p999: l.p999,
    max: l.max,
    mean: lat.reduce((a, b) => a + b, 0) / n,
    perSecond: (n * 1000) / wallMs,
    failed,
    wrongCount,
    ...(firstError ? { firstError } : {}),
    ...(cpu ? { cpuUsPerRequest: cpu } : {}),
    ...(other !== undefined ? { otherCores: other } : {}),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// plans

interface PlanNode {
  'Node Type': string;
  'Scan Direction'?: string;
  'Index Name'?: string;
  'Relation Name'?: string;
  'Actual Rows'?: number;
  'Rows Removed by Filter'?: number;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  Plans?: PlanNode[];
}

interface PlanSample {
  readonly scans: string[];
  readonly rows: number;
  readonly rowsRemovedByFilter: number;
  readonly buffersHit: number;
  readonly buffersRead: number;
  readonly executionMs: number;
}

interface PlanReport {
  readonly shape: string;
  readonly label: string;
  readonly sql: string;
  /** Distinct scan descriptions over every sample, e.g. "Index Scan using run_events_pkey on run_events". */
  readonly scans: string[];
  /** Any sample with a Seq Scan, a bitmap scan or a Sort (none expected). */
  readonly notIndexScan: boolean;
  readonly samples: number;
  readonly rowsRemovedByFilter: { readonly median: number; readonly max: number };
  readonly buffers: { readonly median: number; readonly max: number; readonly readMedian: number };
  readonly executionMs: { readonly median: number; readonly max: number };
  readonly fixedParams: unknown[];
  /** EXPLAIN (ANALYZE, BUFFERS) at the fixed position, run twice: the second (warm) run. */
  readonly text: string;
  /** The first (colder) run of the same. */
  readonly textFirst: string;
}

function walk(node: PlanNode, out: PlanNode[] = []): PlanNode[] {
  out.push(node);
  for (const c of node.Plans ?? []) walk(c, out);
  return out;
}

function scanText(n: PlanNode): string {
  const backward = n['Scan Direction'] === 'Backward' ? ' Backward' : '';
  return `${n['Node Type']}${backward}${n['Index Name'] ? ` using ${n['Index Name']}` : ''}${n['Relation Name'] ? ` on ${n['Relation Name']}` : ''}`;
}

async function explainJson(db: pg.ClientBase, s: Sql): Promise<PlanSample> {
  const { rows } = await db.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${s.text}`, s.values);
  const top = (rows[0] as { 'QUERY PLAN': [{ Plan: PlanNode; 'Execution Time': number }] })['QUERY PLAN'][0];
  const nodes = walk(top.Plan);
  const scans = nodes.filter((n) => /Scan|Sort/.test(n['Node Type']));
  return {
    scans: scans.map(scanText),
    rows: top.Plan['Actual Rows'] ?? 0,
    rowsRemovedByFilter: scans.reduce((a, n) => a + (n['Rows Removed by Filter'] ?? 0), 0),
    buffersHit: top.Plan['Shared Hit Blocks'] ?? 0,
    buffersRead: top.Plan['Shared Read Blocks'] ?? 0,
    executionMs: top['Execution Time'],
  };
}

async function explainText(db: pg.ClientBase, s: Sql): Promise<string> {
  const { rows } = await db.query(`EXPLAIN (ANALYZE, BUFFERS) ${s.text}`, s.values);
  return rows.map((r: { 'QUERY PLAN': string }) => r['QUERY PLAN']).join('\n');
}

async function capturePlans(db: pg.ClientBase): Promise<PlanReport[]> {
  const reports: PlanReport[] = [];
  for (const shape of SHAPES) {
    const rand = seeded(seedOf('explain', shape.key));
    const samples: PlanSample[] = [];
    for (let i = 0; i < (shape.explainSamples ?? PLAN.explainSamples); i++)
      samples.push(await explainJson(db, await sqlOf(shape.make(rand))));
    const fixed = await sqlOf(shape.fixed);
    const textFirst = await explainText(db, fixed);
    const text = await explainText(db, fixed);
    const scans = [...new Set(samples.flatMap((s) => s.scans))];
    const med = (f: (s: PlanSample) => number) => median(samples.map(f));
    const max = (f: (s: PlanSample) => number) => Math.max(...samples.map(f));
    reports.push({
      shape: shape.key,
      label: shape.label,
      sql: fixed.text.replace(/\s+/g, ' '),
      scans,
      notIndexScan: scans.some((s) => /^(Seq Scan|Bitmap|Sort)/.test(s)),
      samples: samples.length,
      rowsRemovedByFilter: {
        median: med((s) => s.rowsRemovedByFilter),
        max: max((s) => s.rowsRemovedByFilter),
      },
      buffers: {
        median: med((s) => s.buffersHit + s.buffersRead),
        max: max((s) => s.buffersHit + s.buffersRead),
        readMedian: med((s) => s.buffersRead),
      },
      executionMs: {
        median: Math.round(med((s) => s.executionMs) * 1000) / 1000,
        max: Math.round(max((s) => s.executionMs) * 1000) / 1000,
      },
      fixedParams: fixed.values,
      text,
      textFirst,
    });
  }
  return reports;
}

// ---------------------------------------------------------------------------------------------------------------
// the broker

interface RunningBroker {
  readonly proc: BrokerProcess;
  readonly logLines: string[];
  readonly earlyExits: string[];
  stop(): Promise<void>;
}

/** A broker process on the bench database (it migrates on start: nothing left to apply). */
async function startBroker(servers: Servers): Promise<RunningBroker> {
  const proc = await spawnBroker(brokerConfig(servers));
  const logLines: string[] = [];
  const earlyExits: string[] = [];
  let stopping = false;
  const keep = (d: Buffer) => {
    for (const line of d.toString().split('\n')) {
      if (line.trim() === '') continue;
      let level = 50;
      try {
        level = (JSON.parse(line) as { level?: number }).level ?? 50;
      } catch {
        // not JSON: a crash trace, kept as an error
      }
      if (level >= 40 && logLines.length < 50)
        logLines.push(line.length > 400 ? `${line.slice(0, 400)}…` : line);
    }
  };
  proc.child.stdout?.on('data', keep);
  proc.child.stderr?.on('data', keep);
  proc.child.once('exit', (code, signal) => {
    if (!stopping) earlyExits.push(`code ${code}, signal ${signal}`);
  });
  return {
    proc,
    logLines,
    earlyExits,
    async stop() {
      stopping = true;
      await stopBrokerProcess(proc);
    },
  };
}

// ---------------------------------------------------------------------------------------------------------------

const stamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');

function log(line: string): void {
  process.stdout.write(`${line}\n`);
}

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

interface RepResult {
  readonly cells: Cell[];
  readonly brokerLog: string[];
  readonly errors: string[];
  readonly seconds: number;
}

function cellText(c: Cell): string {
  const cpu = c.cpuUsPerRequest;
  return (
    `p50 ${fmt(c.p50, 2)} p99 ${fmt(c.p99, 2)} max ${fmt(c.max, 1)} ms, ${fmt(c.perSecond, 0)} req/s` +
    (cpu ? `; CPU µs/req broker ${cpu.broker}, pg ${cpu.postgres}, bench ${cpu.bench}` : '') +
    (c.otherCores !== undefined ? ` (other ${c.otherCores.toFixed(2)} cores)` : '') +
    (c.failed || c.wrongCount
      ? ` FAILED ${c.failed}, wrong count ${c.wrongCount}: ${c.firstError ?? ''}`
      : '')
  );
}

async function runRepetition(servers: Servers, raw: pg.Pool, rep: number): Promise<RepResult> {
  const t0 = performance.now();
  const cells: Cell[] = [];
  const errors: string[] = [];
  const other = await waitForQuiet(0.3, quick ? 3_000 : 8_000);
  if (other !== undefined && other >= 0.3)
    log(`  (machine busy: other processes use ${other.toFixed(2)} cores)`);
  const broker = await startBroker(servers);
  const agent = new http.Agent({ keepAlive: true, maxSockets: Math.max(...PLAN.concurrency) });
  const grpc = new HistoryClient(`127.0.0.1:${broker.proc.grpcPort}`);
  const clients: Clients = { raw, agent, httpPort: broker.proc.httpPort, grpc };
  const pids = [broker.proc.child.pid as number];
  // The transports' order turns each repetition, so none is always first after a cache change.
  const order = TRANSPORTS.map((_, i) => TRANSPORTS[(i + rep - 1) % TRANSPORTS.length] as Transport);
  try {
    for (const shape of SHAPES.filter((s) => s.timed)) {
      for (const transport of order) {
        const warm = seeded(seedOf('warmup', rep, shape.key, transport));
        const warmReqs = Array.from({ length: PLAN.warmup }, () => shape.make(warm));
        const warmSend = await prepare(transport, warmReqs, clients);
        for (let i = 0; i < warmReqs.length; i++) await warmSend(i).catch(() => undefined);
      }
      for (const concurrency of PLAN.concurrency) {
        for (const transport of order) {
          // Each transport draws its own positions (same distribution), so none reads pages
          // another just brought into Postgres' cache.
          const rand = seeded(seedOf('measure', rep, shape.key, concurrency, transport));
          const reqs = Array.from({ length: PLAN.requests }, () => shape.make(rand));
          const send = await prepare(transport, reqs, clients);
          const cell = await measure(shape, transport, concurrency, send, PLAN.requests, pids);
          cells.push(cell);
          log(
            `[run ${rep}/${PLAN.runs}] ${shape.key.padEnd(8)} c=${concurrency} ${TRANSPORT_LABEL[transport].padEnd(6)} ${cellText(cell)}`,
          );
          if (cell.failed || cell.wrongCount) {
            errors.push(
              `${shape.key} ${transport} c=${concurrency}: ${cell.failed} failed, ${cell.wrongCount} with a wrong count` +
                `${cell.firstError ? ` (${cell.firstError})` : ''}`,
            );
          }
        }
      }
      if (shape.key === 'after') {
        const rand = seeded(seedOf('paced', rep));
        const rawSend = await prepare(
          'raw',
          Array.from({ length: PLAN.paced }, () => shape.make(rand)),
          clients,
        );
        const paced: Sender = async (i) => {
          await new Promise((resolve) => setTimeout(resolve, 1));
          return rawSend(i);
        };
        const cell = await measure(shape, 'raw-paced', 1, paced, PLAN.paced, pids);
        cells.push(cell);
        log(
          `[run ${rep}/${PLAN.runs}] ${shape.key.padEnd(8)} c=1 raw pg, 1 ms pause between queries: ` +
            `CPU µs/req pg ${cell.cpuUsPerRequest?.postgres}, bench ${cell.cpuUsPerRequest?.bench}`,
        );
      }
    }
  } finally {
    grpc.close();
    agent.destroy();
    await broker.stop();
  }
  if (broker.earlyExits.length) errors.push(`broker exited early: ${broker.earlyExits.join('; ')}`);
  return { cells, brokerLog: broker.logLines, errors, seconds: (performance.now() - t0) / 1000 };
}

function cellOf(
  rep: RepResult,
  shape: string,
  transport: Transport | 'raw-paced',
  concurrency: number,
): Cell | undefined {
  return rep.cells.find(
    (c) => c.shape === shape && c.transport === transport && c.concurrency === concurrency,
  );
}

/** One row per (shape, concurrency, metric): the value of every repetition. */
function tableRows(reps: readonly RepResult[]): Row[] {
  const rows: Row[] = [];
  for (const shape of SHAPES.filter((s) => s.timed)) {
    for (const concurrency of PLAN.concurrency) {
      const scenario = `${shape.key} (${shape.label}), concurrency ${concurrency}`;
      const col = (f: (r: RepResult) => number | undefined) => reps.map((r) => f(r) ?? Number.NaN);
      for (const t of TRANSPORTS) {
        const c = (r: RepResult) => cellOf(r, shape.key, t, concurrency);
        rows.push({
          scenario,
          metric: `${TRANSPORT_LABEL[t]} p50 ms`,
          values: col((r) => c(r)?.p50),
          digits: 2,
        });
        rows.push({
          scenario,
          metric: `${TRANSPORT_LABEL[t]} p99 ms`,
          values: col((r) => c(r)?.p99),
          digits: 2,
        });
        rows.push({
          scenario,
          metric: `${TRANSPORT_LABEL[t]} req/s`,
          values: col((r) => c(r)?.perSecond),
          digits: 0,
        });
        rows.push({
          scenario,
          metric: `${TRANSPORT_LABEL[t]} broker CPU µs/req`,
          values: col((r) => c(r)?.cpuUsPerRequest?.broker),
          digits: 0,
        });
        rows.push({
          scenario,
          metric: `${TRANSPORT_LABEL[t]} pg CPU µs/req`,
          values: col((r) => c(r)?.cpuUsPerRequest?.postgres),
          digits: 0,
        });
        rows.push({
          scenario,
          metric: `${TRANSPORT_LABEL[t]} bench CPU µs/req`,
          values: col((r) => c(r)?.cpuUsPerRequest?.bench),
          digits: 0,
        });
      }
      for (const t of ['http', 'grpc'] as const) {
        const ratio = (r: RepResult, f: (c: Cell) => number) => {
          const api = cellOf(r, shape.key, t, concurrency);
          const base = cellOf(r, shape.key, 'raw', concurrency);
          return api && base ? f(api) / f(base) : undefined;
        };
        rows.push({
          scenario,
          metric: `${TRANSPORT_LABEL[t]} / raw p50`,
          values: col((r) => ratio(r, (c) => c.p50)),
          digits: 1,
        });
        rows.push({
          scenario,
          metric: `${TRANSPORT_LABEL[t]} / raw req/s`,
          values: col((r) => ratio(r, (c) => c.perSecond)),
          digits: 2,
        });
      }
    }
  }
  rows.push({
    scenario: 'after, raw pg one at a time with a 1 ms pause (diagnostic)',
    metric: 'pg CPU µs/req',
    values: reps.map((r) => cellOf(r, 'after', 'raw-paced', 1)?.cpuUsPerRequest?.postgres ?? Number.NaN),
    digits: 0,
  });
  rows.push({
    scenario: 'noise: other processes on the machine',
    metric: 'cores busy, mean over the cells',
    values: reps.map((r) => {
      const o = r.cells.map((c) => c.otherCores).filter((x): x is number => x !== undefined);
      return o.length ? o.reduce((a, b) => a + b, 0) / o.length : Number.NaN;
    }),
    digits: 2,
  });
  return rows;
}

/** The compact Markdown table of docs/benchmarks.md: medians, one line per (shape, concurrency). */
function markdownTable(reps: readonly RepResult[]): string {
  const med = (shape: string, t: Transport, c: number, f: (x: Cell) => number | undefined) =>
    median(reps.map((r) => cellOf(r, shape, t, c)).map((x) => (x ? (f(x) ?? Number.NaN) : Number.NaN)));
  const ratio = (shape: string, t: Transport, c: number, f: (x: Cell) => number) =>
    median(
      reps.map((r) => {
        const a = cellOf(r, shape, t, c);
        const b = cellOf(r, shape, 'raw', c);
        return a && b ? f(a) / f(b) : Number.NaN;
      }),
    );
  const lines = [
    '| page | conc. | raw pg p50 / p99 ms | raw req/s | HTTP p50 / p99 ms | HTTP req/s | gRPC p50 / p99 ms | gRPC req/s | HTTP ÷ raw (p50, req/s) | gRPC ÷ raw (p50, req/s) |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const shape of SHAPES.filter((s) => s.timed)) {
    for (const c of PLAN.concurrency) {
      const lat = (t: Transport) =>
        `${fmt(
          med(shape.key, t, c, (x) => x.p50),
          2,
        )} / ${fmt(
          med(shape.key, t, c, (x) => x.p99),
          2,
        )}`;
      const rps = (t: Transport) =>
        fmt(
          med(shape.key, t, c, (x) => x.perSecond),
          0,
        );
      const rat = (t: Transport) =>
        `${fmt(
          ratio(shape.key, t, c, (x) => x.p50),
          1,
        )}×, ${fmt(
          ratio(shape.key, t, c, (x) => x.perSecond),
          2,
        )}×`;
      lines.push(
        `| ${shape.key} | ${c} | ${lat('raw')} | ${rps('raw')} | ${lat('http')} | ${rps('http')} | ${lat('grpc')} | ${rps('grpc')} | ${rat('http')} | ${rat('grpc')} |`,
      );
    }
  }
  return lines.join('\n');
}

/** CPU per request by process, medians, Markdown. */
function cpuTable(reps: readonly RepResult[]): string {
  const lines = [
    '| page | conc. | transport | broker µs/req | Postgres µs/req | bench (client) µs/req |',
    '| --- | ---: | --- | ---: | ---: | ---: |',
  ];
  for (const shape of SHAPES.filter((s) => s.timed)) {
    for (const c of PLAN.concurrency) {
      for (const t of TRANSPORTS) {
        const m = (role: 'broker' | 'postgres' | 'bench') =>
          fmt(median(reps.map((r) => cellOf(r, shape.key, t, c)?.cpuUsPerRequest?.[role] ?? Number.NaN)), 0);
        lines.push(
          `| ${shape.key} | ${c} | ${TRANSPORT_LABEL[t]} | ${m('broker')} | ${m('postgres')} | ${m('bench')} |`,
        );
      }
    }
  }
  return lines.join('\n');
}

function plansMarkdown(plans: readonly PlanReport[]): string {
  return plans
    .map(
      (p) =>
        `#### ${p.shape}: ${p.label}\n\n` +
        `${p.samples} random positions: ${p.scans.join(', ')}; buffers median ${p.buffers.median} ` +
        `(max ${p.buffers.max}, median read ${p.buffers.readMedian}), rows removed by filter median ` +
        `${p.rowsRemovedByFilter.median} (max ${p.rowsRemovedByFilter.max}), execution median ` +
        `${p.executionMs.median} ms (max ${p.executionMs.max} ms).\n\n` +
        `\`\`\`sql\n${p.sql}\n-- ${JSON.stringify(p.fixedParams)}\n\`\`\`\n\n\`\`\`\n${p.text}\n\`\`\``,
    )
    .join('\n\n');
}

async function main(): Promise<void> {
  const deadline = setTimeout(() => {
    process.stderr.write(
      `bench-history: deadline of ${PLAN.deadlineMs / 1000} s reached; stopping everything\n`,
    );
    process.exit(3); // the helpers' exit hooks kill every server and broker and remove their temp dirs
  }, PLAN.deadlineMs);
  deadline.unref();
  const startedAt = performance.now();
  const loadStart = os.loadavg();
  log(`runstream history bench ${stamp} (${quick ? 'quick' : 'full'}: ${PLAN.runs} run(s), median reported)`);
  log(
    `machine: ${os.cpus().length} × ${os.cpus()[0]?.model ?? '?'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ` +
      `node ${process.version}, load ${loadStart.map((l) => l.toFixed(2)).join(' ')}`,
  );

  await using servers = await startServers({ own: true });
  const v = await versions(servers);
  log(`servers: ${v.natsServer}, ${v.postgres} (fsync=off, as the test helpers run it)`);

  const raw = new pg.Pool({ connectionString: servers.pg.url, max: Math.max(...PLAN.concurrency) });
  raw.on('error', () => undefined);
  try {
    await migrate(raw, createLogger('warn'));
    log('generating data:');
    const genClient = await raw.connect();
    let data: DataStats;
    let plans: PlanReport[];
    try {
      data = await generateHistoryData(genClient, log);
      log(
        `  ${data.rows.toLocaleString('en-US')} rows, ${data.threads.toLocaleString('en-US')} threads, ` +
          `${data.runs.toLocaleString('en-US')} runs; content ${data.avgContentBytes} B, row ${data.avgRowBytes} B; ` +
          `table ${Math.round(data.tableBytes / 2 ** 20)} MiB; indexes ${Object.entries(data.indexBytes)
            .map(([k, b]) => `${k} ${Math.round(b / 2 ** 20)} MiB`)
            .join(', ')}`,
      );
      log(`plans (EXPLAIN ANALYZE at ${PLAN.explainSamples} random positions per shape):`);
      plans = await capturePlans(genClient);
      for (const p of plans) {
        log(
          `  ${p.shape.padEnd(9)} ${p.scans.join(', ')}${p.notIndexScan ? '  <-- NOT AN INDEX SCAN' : ''}; ` +
            `buffers median ${p.buffers.median} (max ${p.buffers.max}), filtered out median ${p.rowsRemovedByFilter.median} ` +
            `(max ${p.rowsRemovedByFilter.max}), exec median ${p.executionMs.median} ms (max ${p.executionMs.max})`,
        );
      }
    } finally {
      genClient.release();
    }

    const reps: RepResult[] = [];
    const errors: string[] = [];
    for (let rep = 1; rep <= PLAN.runs; rep++) {
      const left = PLAN.deadlineMs - 20_000 - (performance.now() - startedAt);
      const estimate = reps.length ? Math.max(...reps.map((r) => r.seconds)) * 1000 * 1.2 : 0;
      if (estimate > left) {
        errors.push(`run ${rep}: skipped, ${Math.round(left / 1000)} s left of the time budget`);
        log(`run ${rep} skipped: ${Math.round(left / 1000)} s left of the time budget`);
        continue;
      }
      try {
        const r = await runRepetition(servers, raw, rep);
        reps.push(r);
        errors.push(...r.errors.map((e) => `run ${rep}: ${e}`));
        if (r.brokerLog.length)
          log(`  broker logged ${r.brokerLog.length} warning/error lines; first: ${r.brokerLog[0]}`);
      } catch (err) {
        errors.push(`run ${rep}: ${(err as Error).message}`);
        log(`run ${rep} FAILED: ${(err as Error).stack ?? err}`);
      }
    }

    const rows = summarizeRows(tableRows(reps));
    const totalS = (performance.now() - startedAt) / 1000;
    log('');
    log(
      `Results, median of ${reps.length} run(s) (${stamp}, ${quick ? 'quick' : 'full'}, ${totalS.toFixed(0)} s in all):`,
    );
    log(renderTable(rows));
    log('\nMarkdown:\n');
    log(markdownTable(reps));
    log('');
    log(cpuTable(reps));
    if (errors.length) log(`\n${errors.length} problem(s):\n  ${errors.join('\n  ')}`);

    const file = writeResults(stamp, `-history${quick ? '-quick' : ''}`, {
      date: stamp,
      mode: quick ? 'quick' : 'full',
      totalSeconds: Math.round(totalS),
      machine: machineInfo(v, loadStart, os.loadavg()),
      plan: PLAN,
      shapes: SHAPES.map(({ key, label, expected, timed, fixed }) => ({
        key,
        label,
        expected,
        timed,
        fixed,
      })),
      data,
      plans,
      summary: rows.map(({ scenario, metric, median: m, values }) => ({
        scenario,
        metric,
        median: m,
        values,
      })),
      markdown: { latency: markdownTable(reps), cpu: cpuTable(reps), plans: plansMarkdown(plans) },
      runs: reps,
      errors,
    });
    log(`\nwrote ${file}`);
    if (errors.length > 0) process.exitCode = 1;
  } finally {
    await raw.end().catch(() => undefined);
  }
}

main().then(
  () => process.exit(),
  (err: unknown) => {
    process.stderr.write(
      `bench-history failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exit(1);
  },
);
