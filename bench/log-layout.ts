/**
 * Log layout for partitioned persisters: `node dist/bench/log-layout.js [--messages=N] [--partitions=P]
 * [--runs=R] [--quick]`.
 *
 * Each thread maps to one of P partitions; a persister reads only the partitions it owns. Three
 * layouts of the log, each on file storage in its own nats-server (started here, JetStream in a
 * temporary directory), with ~300-byte messages over 1,000 threads × 4 runs:
 *
 *  - single  today's log: one stream, `<prefix>.log.<thread>.<run>`, one unfiltered consumer;
 *  - A       one stream, `<prefix>.log.<p>.<thread>.<run>`, one ordered consumer per partition
 *            filtered on `<prefix>.log.<p>.*.*`;
 *  - B       one stream per partition (`LOG_p00` …), unfiltered consumers.
 *
 * Per run it measures:
 *  1. publish: N async JetStream publishes (Nats-Msg-Id set, a window of 256 in flight) into each;
 *  2. catch-up: ordered consumers from the start of those streams — single (1 consumer), A with P
 *     consumers at once, A with the one consumer of partition 0 alone (what a persister owning
 *     one partition pays), B with P consumers, B with partition 0's consumer alone;
 *  3. tail: the consumers at the tail while 5,000 msgs/s are published across partitions for
 *     10 s: publish → delivery latency and nats-server CPU per message;
 *  4. idle: the consumers pulling (`expires: 2000`) with nothing to read, for 20 s.
 *
 * CPU: nats-server's utime+stime from /proc/<pid>/stat (10 ms ticks) and, for idle, its threads'
 * schedstat (ns); the client is this process (`process.cpuUsage()`). Consumers read as the
 * persister does (ordered pull consumer, `max_messages` = the persister's batch, `expires` = its
 * pull expiry). Every run uses a fresh server; medians of the runs are reported with each
 * metric's ratio to the single-stream baseline of the same run. Prints a Markdown table and
 * writes bench/results/<date>-log-layout[-quick].json.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { parseArgs } from 'node:util';
import {
  type ConsumerMessages,
  DeliverPolicy,
  DiscardPolicy,
  type JetStreamClient,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
} from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { DEFAULT_PERSIST_BATCH_MAX } from '../src/config.js';
import { PULL_EXPIRES_MS, PULL_HEARTBEAT_MS } from '../src/persist/persister.js';
import { findNatsServerBinary, startNatsServer } from '../test/helpers/nats-server.js';
import { natsServerPid, schedstatNs, waitForQuiet } from './lib/cpu.js';
import { fmt, machineInfo, writeResults } from './lib/report.js';
import { median, summarize } from './lib/stats.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    /** Messages per stream layout (default 1,000,000; 50,000 with --quick). */
    messages: { type: 'string' },
    /** Partitions (default 32). */
    partitions: { type: 'string' },
    /** Repetitions, each on a fresh nats-server (default 3; 1 with --quick). */
    runs: { type: 'string' },
    /** Seconds of the tail phase (default 10) and of the idle phase (default 20). */
    'tail-seconds': { type: 'string' },
    'idle-seconds': { type: 'string' },
  },
});
const quick = args.quick === true;
const MESSAGES = Number(args.messages ?? (quick ? 50_000 : 1_000_000));
const PARTITIONS = Number(args.partitions ?? 32);
const RUNS = Number(args.runs ?? (quick ? 1 : 3));
const TAIL_S = Number(args['tail-seconds'] ?? (quick ? 3 : 10));
const IDLE_S = Number(args['idle-seconds'] ?? (quick ? 5 : 20));

const THREADS = 1_000;
const RUNS_PER_THREAD = 4;
const PUBLISH_WINDOW = 256;
const MESSAGE_BYTES = 300;
const TAIL_RATE_PER_S = 5_000;
/** The tail publisher's tick: TAIL_RATE_PER_S / (1000 / TAIL_TICK_MS) messages each. */
const TAIL_TICK_MS = 10;
/** How long to wait after the tail's last publish for every message to arrive. */
const TAIL_DRAIN_MS = 5_000;
/** Don't start a measurement while the rest of the machine is busier than this (other suites run). */
const QUIET_OTHER_CORES = 0.5;
const QUIET_MAX_WAIT_MS = 15_000;

type Layout = 'single' | 'A' | 'B';

/** A stable hash of the thread id (FNV-1a, 32 bits), the partition being `hash % P`. */
function partitionOf(threadId: string, partitions: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < threadId.length; i++) {
    h ^= threadId.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h % partitions;
}

const pp = (p: number): string => String(p).padStart(2, '0');

/** Where a layout puts a thread's run, and which stream and filter each partition is read from. */
interface LayoutPlan {
  readonly layout: Layout;
  readonly streams: readonly { name: string; subjects: string[] }[];
  subject(p: number, threadId: string, runId: string): string;
  /** The consumers that read partition `p` (single: the one consumer of everything, p ignored). */
  source(p: number): { stream: string; filter: string | undefined };
}

function plan(layout: Layout, tag: string): LayoutPlan {
  const prefix = `ll${layout.toLowerCase()}${tag}`;
  switch (layout) {
    case 'single':
      return {
        layout,
        streams: [{ name: `LOG_${tag}`, subjects: [`${prefix}.log.>`] }],
        subject: (_p, t, r) => `${prefix}.log.${t}.${r}`,
        source: () => ({ stream: `LOG_${tag}`, filter: undefined }),
      };
    case 'A':
      return {
        layout,
        streams: [{ name: `LOGA_${tag}`, subjects: [`${prefix}.log.>`] }],
        subject: (p, t, r) => `${prefix}.log.${pp(p)}.${t}.${r}`,
        source: (p) => ({ stream: `LOGA_${tag}`, filter: `${prefix}.log.${pp(p)}.*.*` }),
      };
    case 'B':
      return {
        layout,
        streams: Array.from({ length: PARTITIONS }, (_, p) => ({
          name: `LOG_${tag}_p${pp(p)}`,
          subjects: [`${prefix}.log.${pp(p)}.>`],
        })),
        subject: (p, t, r) => `${prefix}.log.${pp(p)}.${t}.${r}`,
        source: (p) => ({ stream: `LOG_${tag}_p${pp(p)}`, filter: undefined }),
      };
  }
}

interface BenchThread {
  readonly threadId: string;
  readonly runIds: readonly string[];
  readonly partition: number;
}

function makeThreads(tag: string): BenchThread[] {
  return Array.from({ length: THREADS }, (_, i) => {
    const threadId = `th-${tag}-${String(i).padStart(4, '0')}`;
    return {
      threadId,
      runIds: Array.from({ length: RUNS_PER_THREAD }, (_, r) => `run-${r}`),
      partition: partitionOf(threadId, PARTITIONS),
    };
  });
}

const FILLER = 'x'.repeat(MESSAGE_BYTES);
const encoder = new TextEncoder();

/** A ~300-byte JSON body whose first field is the publish time (performance.now(), ms). */
function body(t: BenchThread, runId: string, i: number, sentMs: number): Uint8Array {
  const head = `{"t":${sentMs.toFixed(3)},"thread_id":"${t.threadId}","run_id":"${runId}","i":${i},"text":"`;
  return encoder.encode(`${head}${FILLER.slice(0, Math.max(0, MESSAGE_BYTES - head.length - 2))}"}`);
}

/** Message `i` of a layout's stream: threads round-robin, each thread's runs in turn. */
function messageAt(threads: readonly BenchThread[], i: number): { t: BenchThread; runId: string } {
  const t = threads[i % THREADS] as BenchThread;
  const runId = t.runIds[Math.floor(i / THREADS) % RUNS_PER_THREAD] as string;
  return { t, runId };
}

/** Messages per partition among the first `n`. */
function countsOf(threads: readonly BenchThread[], n: number): number[] {
  const counts = new Array<number>(PARTITIONS).fill(0);
  for (let i = 0; i < n; i++) {
    const p = messageAt(threads, i).t.partition;
    counts[p] = (counts[p] ?? 0) + 1;
  }
  return counts;
}

// ---------------------------------------------------------------------------------------------
// CPU

interface CpuSnap {
  readonly at: number;
  /** nats-server utime+stime, ms (10 ms ticks). */
  readonly natsMs: number;
  /** nats-server's threads on a CPU (schedstat), ns. */
  readonly natsNs: number;
  /** This process (the client), µs. */
  readonly clientUs: number;
}

function snap(pid: number): CpuSnap {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const u = process.cpuUsage();
  return {
    at: performance.now(),
    natsMs: (Number(f[11]) + Number(f[12])) * 10,
    natsNs: schedstatNs(pid),
    clientUs: u.user + u.system,
  };
}

interface Cpu {
  readonly wallMs: number;
  /** nats-server CPU seconds (utime+stime). */
  readonly natsS: number;
  /** nats-server CPU seconds (schedstat). */
  readonly natsSchedS: number;
  readonly clientS: number;
}

function cpuBetween(a: CpuSnap, b: CpuSnap): Cpu {
  return {
    wallMs: b.at - a.at,
    natsS: (b.natsMs - a.natsMs) / 1000,
    natsSchedS: (b.natsNs - a.natsNs) / 1e9,
    clientS: (b.clientUs - a.clientUs) / 1e6,
  };
}

// ---------------------------------------------------------------------------------------------
// Phases

async function createStreams(jsm: JetStreamManager, lp: LayoutPlan): Promise<void> {
  for (const s of lp.streams) {
    await jsm.streams.add({
      name: s.name,
      subjects: s.subjects,
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      discard: DiscardPolicy.Old,
      num_replicas: 1,
    });
  }
}

async function publishAll(
  js: JetStreamClient,
  lp: LayoutPlan,
  threads: readonly BenchThread[],
): Promise<void> {
  const inFlight = new Set<Promise<void>>();
  for (let i = 0; i < MESSAGES; i++) {
    while (inFlight.size >= PUBLISH_WINDOW) await Promise.race(inFlight);
    const { t, runId } = messageAt(threads, i);
    const p: Promise<void> = js
      .publish(lp.subject(t.partition, t.threadId, runId), body(t, runId, i, performance.now()), {
        msgID: `${t.threadId}:${i}`,
      })
      .then(() => {
        inFlight.delete(p);
      });
    inFlight.add(p);
  }
  await Promise.all(inFlight);
}

interface Reader {
  readonly done: Promise<number>;
  /** The client's consumer notifications by type ('next', a routine pull, left out). */
  readonly notifications: Record<string, number>;
  stop(): Promise<void>;
}

/**
 * An ordered consumer of one partition (or of everything), as the persister opens it. `expect`
 * resolves `done` after that many messages; `onMessage` sees each body.
 */
async function openReader(
  js: JetStreamClient,
  src: { stream: string; filter: string | undefined },
  deliver: DeliverPolicy,
  expect: number,
  onMessage?: (data: Uint8Array) => void,
): Promise<Reader> {
  const consumer = await js.consumers.get(src.stream, {
    ...(src.filter === undefined ? {} : { filter_subjects: src.filter }),
    deliver_policy: deliver,
  });
  const messages: ConsumerMessages = await consumer.consume({
    max_messages: DEFAULT_PERSIST_BATCH_MAX,
    expires: PULL_EXPIRES_MS,
    idle_heartbeat: PULL_HEARTBEAT_MS,
  });
  const notifications: Record<string, number> = {};
  void (async () => {
    for await (const s of messages.status()) {
      if (s.type !== 'next') notifications[s.type] = (notifications[s.type] ?? 0) + 1;
    }
  })().catch(() => undefined);
  const done = (async () => {
    let n = 0;
    if (expect === 0) return 0;
    for await (const m of messages) {
      onMessage?.(m.data);
      if (++n >= expect) break;
    }
    return n;
  })();
  return {
    done,
    notifications,
    async stop() {
      messages.stop();
      await consumer.delete().catch(() => undefined);
    },
  };
}

/** Which partitions a scenario reads: all of them, or partition 0 alone. */
type Scope = 'all' | 'one';

function partitionsOf(lp: LayoutPlan, scope: Scope): number[] {
  if (lp.layout === 'single') return [0];
  return scope === 'all' ? Array.from({ length: PARTITIONS }, (_, p) => p) : [0];
}

function expectedCount(lp: LayoutPlan, p: number, counts: readonly number[], total: number): number {
  return lp.layout === 'single' ? total : (counts[p] as number);
}

async function catchUp(
  js: JetStreamClient,
  pid: number,
  lp: LayoutPlan,
  scope: Scope,
  counts: readonly number[],
): Promise<Measured> {
  await waitForQuiet(QUIET_OTHER_CORES, QUIET_MAX_WAIT_MS);
  const a = snap(pid);
  const readers = await Promise.all(
    partitionsOf(lp, scope).map((p) =>
      openReader(js, lp.source(p), DeliverPolicy.All, expectedCount(lp, p, counts, MESSAGES)),
    ),
  );
  const got = (await Promise.all(readers.map((r) => r.done))).reduce((x, y) => x + y, 0);
  const b = snap(pid);
  await Promise.all(readers.map((r) => r.stop()));
  return { messages: got, cpu: cpuBetween(a, b), notifications: notificationsOf(readers) };
}

interface Measured {
  readonly messages: number;
  readonly cpu: Cpu;
  readonly p50Ms?: number;
  readonly p99Ms?: number;
  readonly maxMs?: number;
  /** Tail: messages published (all of them should have been delivered). */
  readonly published?: number;
  /** Consumer notifications (heartbeats missed, resets, …) summed over the consumers. */
  readonly notifications?: Record<string, number>;
}

function notificationsOf(readers: readonly Reader[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of readers) for (const [k, v] of Object.entries(r.notifications)) out[k] = (out[k] ?? 0) + v;
  return out;
}

async function tail(
  js: JetStreamClient,
  pubJs: JetStreamClient,
  pid: number,
  lp: LayoutPlan,
  threads: readonly BenchThread[],
): Promise<Measured> {
  const total = TAIL_RATE_PER_S * TAIL_S;
  const counts = countsOf(threads, total);
  const latencies: number[] = [];
  const decoder = new TextDecoder();
  const onMessage = (data: Uint8Array): void => {
    // The body starts `{"t":<ms>,`: the publish time on this process's clock.
    const text = decoder.decode(data.subarray(0, 32));
    latencies.push(performance.now() - Number(text.slice(5, text.indexOf(','))));
  };
  const readers = await Promise.all(
    partitionsOf(lp, 'all').map((p) =>
      openReader(js, lp.source(p), DeliverPolicy.New, expectedCount(lp, p, counts, total), onMessage),
    ),
  );
  // Let every consumer's first pull reach the server before publishing.
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  await waitForQuiet(QUIET_OTHER_CORES, QUIET_MAX_WAIT_MS);
  const a = snap(pid);
  const perTick = (TAIL_RATE_PER_S * TAIL_TICK_MS) / 1000;
  const start = performance.now();
  const acks: Promise<unknown>[] = [];
  for (let i = 0; i < total; ) {
    // Paced by the clock, not by the timer: a late tick sends what it owes.
    const due = Math.min(total, Math.floor(((performance.now() - start) / TAIL_TICK_MS + 1) * perTick));
    for (; i < due; i++) {
      const { t, runId } = messageAt(threads, i);
      acks.push(
        pubJs.publish(lp.subject(t.partition, t.threadId, runId), body(t, runId, i, performance.now()), {
          msgID: `tail:${t.threadId}:${i}`,
        }),
      );
    }
    await new Promise((resolve) => setTimeout(resolve, TAIL_TICK_MS));
  }
  await Promise.all(acks);
  const timeout = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), TAIL_DRAIN_MS));
  await Promise.race([Promise.all(readers.map((r) => r.done)), timeout]);
  const b = snap(pid);
  await Promise.all(readers.map((r) => r.stop()));
  const s = summarize(latencies);
  return {
    messages: latencies.length,
    cpu: cpuBetween(a, b),
    p50Ms: s.p50,
    p99Ms: s.p99,
    maxMs: s.max,
    published: total,
    notifications: notificationsOf(readers),
  };
}

async function idle(js: JetStreamClient, pid: number, lp: LayoutPlan): Promise<Measured> {
  const readers = await Promise.all(
    partitionsOf(lp, 'all').map((p) => openReader(js, lp.source(p), DeliverPolicy.New, 1)),
  );
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  await waitForQuiet(QUIET_OTHER_CORES, QUIET_MAX_WAIT_MS);
  const a = snap(pid);
  await new Promise((resolve) => setTimeout(resolve, IDLE_S * 1000));
  const b = snap(pid);
  await Promise.all(readers.map((r) => r.stop()));
  return { messages: 0, cpu: cpuBetween(a, b), notifications: notificationsOf(readers) };
}

// ---------------------------------------------------------------------------------------------
// One run

/** scenario → one run's measurement. */
type RunResult = Record<string, Measured>;

async function oneRun(run: number): Promise<RunResult> {
  await using nats = await startNatsServer({ useEnv: false });
  const pid = natsServerPid();
  const tag = Math.random().toString(36).slice(2, 8);
  const threads = makeThreads(tag);
  const counts = countsOf(threads, MESSAGES);

  // Publisher and consumers on separate connections, as ingest and persister are.
  const pub: NatsConnection = await connect({ servers: nats.url });
  const sub: NatsConnection = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(pub);
    const pubJs = jetstream(pub);
    const js = jetstream(sub);
    const plans = (['single', 'A', 'B'] as const).map((l) => plan(l, tag));
    const out: RunResult = {};
    const say = (scenario: string, m: Measured): void => {
      out[scenario] = m;
      const rate = m.messages > 0 ? `${fmt((m.messages / m.cpu.wallMs) * 1000, 0)} msg/s, ` : '';
      const lat =
        m.p50Ms === undefined ? '' : `, p50 ${fmt(m.p50Ms, 1)} ms p99 ${fmt(m.p99Ms ?? Number.NaN, 1)} ms`;
      const notes =
        m.notifications && Object.keys(m.notifications).length > 0
          ? ` ${JSON.stringify(m.notifications)}`
          : '';
      console.log(
        `run ${run} ${scenario}: ${rate}nats ${fmt(m.cpu.natsS, 2)} s CPU, client ${fmt(m.cpu.clientS, 2)} s${lat}${notes}`,
      );
    };

    for (const lp of plans) {
      await createStreams(jsm, lp);
      await waitForQuiet(QUIET_OTHER_CORES, QUIET_MAX_WAIT_MS);
      const a = snap(pid);
      await publishAll(pubJs, lp, threads);
      say(`publish ${lp.layout}`, { messages: MESSAGES, cpu: cpuBetween(a, snap(pid)) });
    }
    const [single, A, B] = plans as [LayoutPlan, LayoutPlan, LayoutPlan];
    say('catch-up single, 1 consumer', await catchUp(js, pid, single, 'all', counts));
    say(`catch-up A, ${PARTITIONS} filtered consumers`, await catchUp(js, pid, A, 'all', counts));
    say('catch-up A, 1 filtered consumer (partition 0)', await catchUp(js, pid, A, 'one', counts));
    say(`catch-up B, ${PARTITIONS} consumers`, await catchUp(js, pid, B, 'all', counts));
    say('catch-up B, 1 consumer (partition 0)', await catchUp(js, pid, B, 'one', counts));
    say('tail single, 1 consumer', await tail(js, pubJs, pid, single, threads));
    say(`tail A, ${PARTITIONS} filtered consumers`, await tail(js, pubJs, pid, A, threads));
    say(`tail B, ${PARTITIONS} consumers`, await tail(js, pubJs, pid, B, threads));
    say('idle single, 1 consumer', await idle(js, pid, single));
    say(`idle A, ${PARTITIONS} filtered consumers`, await idle(js, pid, A));
    say(`idle B, ${PARTITIONS} consumers`, await idle(js, pid, B));
    for (const lp of plans)
      for (const s of lp.streams) await jsm.streams.delete(s.name).catch(() => undefined);
    return out;
  } finally {
    await sub.close();
    await pub.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Report

interface Metric {
  readonly name: string;
  readonly digits: number;
  value(m: Measured): number;
}

const RATE: Metric = { name: 'msg/s', digits: 0, value: (m) => (m.messages / m.cpu.wallMs) * 1000 };
const NATS_US: Metric = {
  name: 'nats µs CPU/msg',
  digits: 1,
  value: (m) => (m.cpu.natsS * 1e6) / m.messages,
};
const CLIENT_US: Metric = {
  name: 'client µs CPU/msg',
  digits: 1,
  value: (m) => (m.cpu.clientS * 1e6) / m.messages,
};
const NATS_S: Metric = { name: 'nats CPU s', digits: 2, value: (m) => m.cpu.natsS };
const P50: Metric = { name: 'latency p50 ms', digits: 1, value: (m) => m.p50Ms ?? Number.NaN };
const P99: Metric = { name: 'latency p99 ms', digits: 1, value: (m) => m.p99Ms ?? Number.NaN };
const DELIVERED: Metric = {
  name: 'delivered / published',
  digits: 3,
  value: (m) => m.messages / (m.published ?? Number.NaN),
};
const IDLE_NATS: Metric = {
  name: 'nats CPU ms (schedstat)',
  digits: 1,
  value: (m) => m.cpu.natsSchedS * 1000,
};
const IDLE_NATS_TICKS: Metric = { name: 'nats CPU ms (stat)', digits: 0, value: (m) => m.cpu.natsS * 1000 };
const IDLE_CLIENT: Metric = { name: 'client CPU ms', digits: 1, value: (m) => m.cpu.clientS * 1000 };

function metricsOf(scenario: string): Metric[] {
  if (scenario.startsWith('publish')) return [RATE, NATS_US, CLIENT_US];
  if (scenario.startsWith('catch-up')) return [RATE, NATS_US, NATS_S, CLIENT_US];
  if (scenario.startsWith('tail')) return [P50, P99, NATS_US, CLIENT_US, DELIVERED];
  return [IDLE_NATS, IDLE_NATS_TICKS, IDLE_CLIENT];
}

/** The single-stream scenario of the same phase, which ratios are taken against. */
function baselineOf(scenario: string): string {
  const phase = scenario.split(' ')[0] as string;
  return phase === 'publish' ? 'publish single' : `${phase} single, 1 consumer`;
}

interface ReportRow {
  readonly scenario: string;
  readonly metric: string;
  readonly values: number[];
  readonly median: number;
  /** Median over runs of value / the baseline's value in the same run. */
  readonly ratio: number;
  readonly digits: number;
}

function report(runs: readonly RunResult[]): ReportRow[] {
  const rows: ReportRow[] = [];
  for (const scenario of Object.keys(runs[0] ?? {})) {
    for (const m of metricsOf(scenario)) {
      const values = runs.map((r) => {
        const x = r[scenario];
        return x ? m.value(x) : Number.NaN;
      });
      const ratios = runs.map((r) => {
        const x = r[scenario];
        const base = r[baselineOf(scenario)];
        return x && base ? m.value(x) / m.value(base) : Number.NaN;
      });
      rows.push({
        scenario,
        metric: m.name,
        values,
        median: median(values),
        ratio: median(ratios),
        digits: m.digits,
      });
    }
  }
  return rows;
}

function markdown(rows: readonly ReportRow[]): string {
  const line = (cells: string[]): string => `| ${cells.join(' | ')} |`;
  return [
    line(['scenario', 'metric', 'median', '× baseline', 'runs']),
    line(['---', '---', '---:', '---:', '---:']),
    ...rows.map((r) =>
      line([
        r.scenario,
        r.metric,
        fmt(r.median, r.digits),
        fmt(r.ratio, 2),
        r.values.map((v) => fmt(v, r.digits)).join(' / '),
      ]),
    ),
  ].join('\n');
}

async function main(): Promise<void> {
  const stamp = new Date().toISOString().slice(0, 19).concat('Z');
  const loadStart = os.loadavg();
  const natsServer = execFileSync(findNatsServerBinary(), ['--version'], { encoding: 'utf8' }).trim();
  console.log(
    `${natsServer}; ${MESSAGES.toLocaleString('en-US')} messages per layout, P=${PARTITIONS}, ${RUNS} run(s), ` +
      `${THREADS} threads × ${RUNS_PER_THREAD} runs, ~${MESSAGE_BYTES}-byte messages, file storage`,
  );
  const runs: RunResult[] = [];
  for (let r = 1; r <= RUNS; r++) runs.push(await oneRun(r));
  const rows = report(runs);
  const table = markdown(rows);
  console.log(`\n${table}\n`);
  const file = writeResults(stamp, quick ? '-log-layout-quick' : '-log-layout', {
    machine: machineInfo({ natsServer }, loadStart, os.loadavg()),
    options: {
      messages: MESSAGES,
      partitions: PARTITIONS,
      runs: RUNS,
      threads: THREADS,
      runsPerThread: RUNS_PER_THREAD,
      messageBytes: MESSAGE_BYTES,
      publishWindow: PUBLISH_WINDOW,
      tailRatePerS: TAIL_RATE_PER_S,
      tailSeconds: TAIL_S,
      idleSeconds: IDLE_S,
      consumeMaxMessages: DEFAULT_PERSIST_BATCH_MAX,
      consumeExpiresMs: PULL_EXPIRES_MS,
    },
    rows,
    runs,
  });
  console.log(`results: ${file}`);
}

await main();
