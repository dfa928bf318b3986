/**
 * A demo agent: every few seconds it streams one realistic run onto a thread, the way a
 * real agent would — lifecycle start, the human message, `llm_start`, assistant tokens
 * arriving 30-80 ms apart, a tool call and its result, more tokens, lifecycle end.
 *
 * Runs are scripted from `../shared/fixtures/agent-runs.jsonl` (or `--fixture`), with a
 * built-in copy as fallback. Every event gets a producer-chosen `event_id`, so a batch
 * that is re-sent after a dropped connection is stored once (the broker deduplicates).
 * Events go over one PublishStream per run with ACCEPTED acks; at most one request is
 * in flight, and whatever became ready meanwhile goes out as the next batch.
 *
 * Usage: `npm run demo -- [--thread demo-thread] [--interval-ms 3000] [--target 127.0.0.1:50051]
 *         [--fixture file.jsonl] [--runs N]`. Env: RS_TARGET, RS_DEMO_THREAD,
 *         RS_DEMO_INTERVAL_MS, RS_DEMO_FIXTURE.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { status as grpcStatus, type StatusObject } from '@grpc/grpc-js';
import { type Event, IngestClient, type PublishStream } from '../client/ingest-client.js';
import { CATEGORIES, type CategoryName } from '../domain/event.js';
import { ID_PATTERN } from '../domain/ids.js';
import { BUILTIN_FIXTURE_JSONL } from './demo-fixture.js';

export const DEFAULT_TARGET = '127.0.0.1:50051';
export const DEFAULT_THREAD_ID = 'demo-thread';
export const DEFAULT_INTERVAL_MS = 3000;
/** Where the shared fixture lives, relative to the repository root. */
export const SHARED_FIXTURE_PATH = '../shared/fixtures/agent-runs.jsonl';
/** A batch not acknowledged within this is given up on and re-sent on a new stream. */
export const SEND_TIMEOUT_MS = 15_000;
export const RETRY_MIN_DELAY_MS = 250;
export const RETRY_MAX_DELAY_MS = 5000;
/** How long a run interrupted by a signal may take to publish its `run_end`. */
export const CANCEL_GRACE_MS = 2000;

/** One scripted event: what the agent emits, without ids or timestamps. */
export interface ScriptEvent {
  readonly event_type: string;
  readonly category: CategoryName;
  readonly content: unknown;
  readonly metadata: Record<string, unknown>;
}

/** One scripted run, bracketed by `run_start` and `run_end`. */
export interface ScriptRun {
  /** The run id in the fixture, for the log line. */
  readonly source: string;
  readonly events: readonly ScriptEvent[];
}

const GRPC_CATEGORY: Readonly<Record<CategoryName, Event['category']>> = {
  message: 'MESSAGE',
  trace: 'TRACE',
  lifecycle: 'LIFECYCLE',
};

/** Lifecycle events that end a run in the fixture's vocabulary (LangGraph's `end`/`error`). */
const TERMINAL_TYPES = new Set(['end', 'error', 'cancelled', 'run_end']);

/**
 * Parses fixture JSONL into runs, grouped by `run_id` in order of appearance, and
 * normalises each run's lifecycle: the fixture's opening `metadata` event becomes
 * `run_start`, its closing `end`/`error` becomes `run_end` (status kept in content).
 */
export function parseFixture(text: string, source: string): ScriptRun[] {
  const byRun = new Map<string, ScriptEvent[]>();
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    const where = `${source}:${i + 1}`;
    let raw: Record<string, unknown>;
    try {
      raw = JSON.parse(line) as Record<string, unknown>;
    } catch (err) {
      throw new Error(`${where}: not valid JSON`, { cause: err });
    }
    if (typeof raw.event_type !== 'string' || raw.event_type === '')
      throw new Error(`${where}: event_type missing`);
    if (!(CATEGORIES as readonly unknown[]).includes(raw.category)) {
      throw new Error(`${where}: category must be one of ${CATEGORIES.join(', ')}`);
    }
    const metadata = raw.metadata ?? {};
    if (typeof metadata !== 'object' || metadata === null || Array.isArray(metadata)) {
      throw new Error(`${where}: metadata must be an object`);
    }
    const runId = typeof raw.run_id === 'string' ? raw.run_id : 'run';
    const events = byRun.get(runId) ?? [];
    byRun.set(runId, events);
    events.push({
      event_type: raw.event_type,
      category: raw.category as CategoryName,
      content: raw.content ?? null,
      metadata: metadata as Record<string, unknown>,
    });
  });
  if (byRun.size === 0) throw new Error(`${source}: no events`);
  return [...byRun].map(([runId, events]) => ({ source: runId, events: normaliseLifecycle(events) }));
}

function normaliseLifecycle(events: ScriptEvent[]): ScriptEvent[] {
  const out = [...events];
  const first = out[0];
  if (
    first?.category === 'lifecycle' &&
    (first.event_type === 'metadata' || first.event_type === 'run_start')
  ) {
    out[0] = { ...first, event_type: 'run_start' };
  } else {
    out.unshift({ event_type: 'run_start', category: 'lifecycle', content: {}, metadata: {} });
  }
  const last = out.at(-1);
  if (last && out.length > 1 && last.category === 'lifecycle' && TERMINAL_TYPES.has(last.event_type)) {
    const content = isObject(last.content) ? last.content : {};
    const status =
      typeof content.status === 'string' ? content.status : last.event_type === 'end' ? 'success' : 'error';
    out[out.length - 1] = { ...last, event_type: 'run_end', content: { ...content, status } };
  } else {
    out.push({ event_type: 'run_end', category: 'lifecycle', content: { status: 'success' }, metadata: {} });
  }
  return out;
}

/** A short, time-ordered, unique run id: `run-<ms base36>-<4 random hex>`. */
export function newRunId(now = Date.now()): string {
  const rand = Math.floor(Math.random() * 0x10000)
    .toString(16)
    .padStart(4, '0');
  return `run-${now.toString(36)}-${rand}`;
}

/**
 * Makes a scripted run fresh: the new run id in `run_start`, and message and tool-call
 * ids suffixed with it, so two replays of one script never share a message or call id.
 */
export function instantiate(run: ScriptRun, runId: string): ScriptEvent[] {
  const tag = runId.slice(runId.lastIndexOf('-') + 1);
  const fresh = (id: unknown): unknown => (typeof id === 'string' ? `${id}-${tag}` : id);
  return run.events.map((e) => {
    const metadata = 'id' in e.metadata ? { ...e.metadata, id: fresh(e.metadata.id) } : e.metadata;
    let content = e.content;
    if (isObject(content) && 'call_id' in content) content = { ...content, call_id: fresh(content.call_id) };
    if (e.event_type === 'run_start') content = { ...(isObject(content) ? content : {}), run_id: runId };
    return { ...e, content, metadata };
  });
}

/** Milliseconds the agent "works" before emitting an event, given the one before it. */
export function delayBefore(e: ScriptEvent, prev: ScriptEvent | undefined): number {
  const between = (lo: number, hi: number): number => lo + Math.floor(Math.random() * (hi - lo + 1));
  switch (e.event_type) {
    case 'run_start':
      return 0;
    case 'llm_start':
      return between(80, 200);
    case 'ai_chunk':
      // Time to first token after the model is called or a tool returns, then 30-80 ms a token.
      return prev?.event_type === 'ai_chunk' ? between(30, 80) : between(250, 500);
    case 'tool_result':
      return between(400, 900);
    default:
      return between(30, 80);
  }
}

interface RunStats {
  events: number;
  batches: number;
  resent: number;
  duplicates: number;
}

/**
 * Sends events over a PublishStream, one request in flight at a time: events pushed
 * while a request is in flight go out together in the next one. A failed or stalled
 * request is re-sent, same event ids, on a new stream until it is acknowledged.
 */
class BatchingSender {
  readonly #client: IngestClient;
  readonly #signal: AbortSignal;
  readonly #onRetry: (err: unknown, delayMs: number) => void;
  readonly stats: RunStats = { events: 0, batches: 0, resent: 0, duplicates: 0 };
  #stream: PublishStream | undefined;
  #pending: Event[] = [];
  #pump: Promise<void> | undefined;

  constructor(client: IngestClient, signal: AbortSignal, onRetry: (err: unknown, delayMs: number) => void) {
    this.#client = client;
    this.#signal = signal;
    this.#onRetry = onRetry;
  }

  push(e: Event): void {
    this.#pending.push(e);
    this.stats.events++;
    if (!this.#pump) {
      this.#pump = this.#run();
      // Observed by flush(); this keeps an abort with nobody flushing from being unhandled.
      this.#pump.catch(() => undefined);
    }
  }

  /** Resolves when everything pushed so far is acknowledged; rejects when aborted. */
  async flush(): Promise<void> {
    while (this.#pump) await this.#pump;
  }

  async #run(): Promise<void> {
    try {
      while (this.#pending.length > 0) {
        const batch = this.#pending;
        this.#pending = [];
        await this.#sendUntilAcked(batch);
        this.stats.batches++;
      }
    } finally {
      this.#pump = undefined;
    }
  }

  async #sendUntilAcked(batch: Event[]): Promise<void> {
    let delayMs = RETRY_MIN_DELAY_MS;
    for (let attempt = 0; ; attempt++) {
      this.#signal.throwIfAborted();
      if (attempt > 0) this.stats.resent++;
      try {
        const acks = await this.#sendOnce(batch);
        this.stats.duplicates += acks.filter((a) => a.duplicate).length;
        return;
      } catch (err) {
        this.#dropStream();
        if (this.#signal.aborted) throw err;
        this.#onRetry(err, delayMs);
        await sleep(delayMs, undefined, { signal: this.#signal });
        delayMs = Math.min(delayMs * 2, RETRY_MAX_DELAY_MS);
      }
    }
  }

  /** One request; fails when the stream errors, ends, stalls, or the run is aborted. */
  #sendOnce(batch: Event[]): Promise<{ duplicate: boolean }[]> {
    const stream = this.#openStream();
    return new Promise((resolve, reject) => {
      const fail = (err: Error): void => {
        cleanup();
        reject(err);
      };
      const onStatus = (s: StatusObject): void =>
        fail(new Error(`stream ended: ${grpcStatus[s.code] ?? s.code} ${s.details}`.trim()));
      const onAbort = (): void => fail(this.#signal.reason as Error);
      const timer = setTimeout(() => fail(new Error(`no ack within ${SEND_TIMEOUT_MS} ms`)), SEND_TIMEOUT_MS);
      const cleanup = (): void => {
        clearTimeout(timer);
        stream.call.off('status', onStatus);
        this.#signal.removeEventListener('abort', onAbort);
      };
      // PublishStream rejects its waiters on 'error' but not when the server ends the call
      // cleanly; 'status' comes either way, so a request can never hang on a dead stream.
      stream.call.on('status', onStatus);
      this.#signal.addEventListener('abort', onAbort, { once: true });
      stream.send(batch, 'ACCEPTED').then(
        (acks) => {
          cleanup();
          if (acks.length !== batch.length)
            reject(new Error(`${acks.length} acks for ${batch.length} events`));
          else resolve(acks);
        },
        (err: Error) => fail(err),
      );
    });
  }

  #openStream(): PublishStream {
    if (!this.#stream) {
      const stream = this.#client.openStream();
      // A stream the broker ended between requests is not used again.
      stream.call.once('status', () => {
        if (this.#stream === stream) this.#stream = undefined;
      });
      this.#stream = stream;
    }
    return this.#stream;
  }

  #dropStream(): void {
    this.#stream?.call.cancel();
    this.#stream = undefined;
  }

  /** Drops the stream at once (the run was interrupted). */
  cancel(): void {
    this.#pending = [];
    this.#dropStream();
  }

  /** Half-closes the stream once everything is acknowledged. */
  async close(): Promise<void> {
    const stream = this.#stream;
    this.#stream = undefined;
    if (!stream) return;
    await Promise.race([stream.end(), sleep(CANCEL_GRACE_MS)]);
    stream.call.cancel();
  }
}

export interface DemoOptions {
  readonly target: string;
  readonly threadId: string;
  readonly intervalMs: number;
  /** Stop after this many runs; 0 = until a signal. */
  readonly runs: number;
  readonly script: readonly ScriptRun[];
  readonly log: (line: string) => void;
}

/** Plays one run; returns its status (`cancelled` when the signal fired mid-run). */
async function playRun(
  client: IngestClient,
  o: DemoOptions,
  run: ScriptRun,
  runId: string,
  signal: AbortSignal,
): Promise<{ status: string; stats: RunStats }> {
  let retries = 0;
  const sender = new BatchingSender(client, signal, (err, delayMs) => {
    if (retries++ === 0 || retries % 10 === 0) {
      o.log(`run ${runId}: publish failed (${errorText(err)}); retry #${retries} in ${delayMs} ms`);
    }
  });
  const events = instantiate(run, runId);
  let seqInRun = 0;
  const toWire = (e: ScriptEvent): Event => {
    const now = Date.now();
    return {
      thread_id: o.threadId,
      run_id: runId,
      event_id: `${runId}-${String(++seqInRun).padStart(4, '0')}`,
      event_type: e.event_type,
      category: GRPC_CATEGORY[e.category],
      content_json: JSON.stringify(e.content),
      metadata_json: JSON.stringify(e.metadata),
      created_at: { seconds: Math.floor(now / 1000), nanos: (now % 1000) * 1_000_000 },
    };
  };
  let status = 'success';
  try {
    let prev: ScriptEvent | undefined;
    for (const e of events) {
      const delay = delayBefore(e, prev);
      if (delay > 0) await sleep(delay, undefined, { signal });
      sender.push(toWire(e));
      prev = e;
      if (e.event_type === 'run_end' && isObject(e.content) && typeof e.content.status === 'string') {
        status = e.content.status;
      }
    }
    await sender.flush();
    await sender.close();
    return { status, stats: sender.stats };
  } catch (err) {
    sender.cancel();
    if (!signal.aborted) throw err;
  }
  // Interrupted: close the run the way a cancelled agent would, on a fresh, bounded budget.
  status = 'cancelled';
  const grace = AbortSignal.timeout(CANCEL_GRACE_MS);
  const closer = new BatchingSender(client, grace, () => undefined);
  closer.push(toWire({ event_type: 'run_end', category: 'lifecycle', content: { status }, metadata: {} }));
  await closer.flush().catch(() => undefined);
  await closer.close().catch(() => undefined);
  const stats = sender.stats;
  stats.events += closer.stats.events;
  stats.batches += closer.stats.batches;
  return { status, stats };
}

/** Plays runs until `signal` fires (or `o.runs` are done). */
export async function runDemo(o: DemoOptions, signal: AbortSignal): Promise<void> {
  const client = new IngestClient(o.target);
  try {
    for (let i = 0; (o.runs === 0 || i < o.runs) && !signal.aborted; i++) {
      const run = o.script[i % o.script.length] as ScriptRun;
      const runId = newRunId();
      const started = Date.now();
      const { status, stats } = await playRun(client, o, run, runId, signal);
      const secs = ((Date.now() - started) / 1000).toFixed(1);
      const extra = [
        stats.resent > 0 ? `${stats.resent} re-sent` : '',
        stats.duplicates > 0 ? `${stats.duplicates} deduplicated` : '',
      ].filter(Boolean);
      o.log(
        `run ${runId} (${run.source}) on ${o.threadId}: ${status}, ${stats.events} events in ${stats.batches} batches` +
          `${extra.length > 0 ? ` (${extra.join(', ')})` : ''}, ${secs}s`,
      );
      if (o.runs !== 0 && i + 1 >= o.runs) break;
      await sleep(o.intervalMs, undefined, { signal }).catch(() => undefined);
    }
  } finally {
    client.close();
  }
}

/** The repository root: the nearest ancestor of this module holding package.json. */
function repoRoot(): string | undefined {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    const up = dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
}

/** The script: `--fixture` (must exist), else the shared fixture if present, else the built-in copy. */
export function loadScript(fixture: string | undefined): { runs: ScriptRun[]; source: string } {
  if (fixture) {
    const path = resolve(fixture);
    return { runs: parseFixture(readFileSync(path, 'utf8'), path), source: path };
  }
  const root = repoRoot();
  const shared = root ? resolve(root, SHARED_FIXTURE_PATH) : undefined;
  if (shared && existsSync(shared))
    return { runs: parseFixture(readFileSync(shared, 'utf8'), shared), source: shared };
  return {
    runs: parseFixture(BUILTIN_FIXTURE_JSONL, 'built-in'),
    source: 'built-in copy of agent-runs.jsonl',
  };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function errorText(err: unknown): string {
  const e = err as { code?: number; details?: string; message?: string };
  if (typeof e?.details === 'string' && e.details !== '') return e.details;
  return e?.message ?? String(err);
}

const USAGE = `usage: demo-agent [--thread ID] [--interval-ms MS] [--target HOST:PORT] [--fixture FILE] [--runs N]
  --thread       thread to publish on (env RS_DEMO_THREAD; default ${DEFAULT_THREAD_ID})
  --interval-ms  pause between runs (env RS_DEMO_INTERVAL_MS; default ${DEFAULT_INTERVAL_MS})
  --target       broker gRPC address (env RS_TARGET; default ${DEFAULT_TARGET})
  --fixture      JSONL of runs (env RS_DEMO_FIXTURE; default ${SHARED_FIXTURE_PATH} from the repo, else built in)
  --runs         stop after N runs (default 0: until Ctrl-C)`;

async function main(): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      options: {
        thread: { type: 'string' },
        'interval-ms': { type: 'string' },
        target: { type: 'string' },
        fixture: { type: 'string' },
        runs: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (err) {
    process.stderr.write(`demo-agent: ${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const env = process.env;
  const str = (flag: string, envName: string): string | undefined => {
    const v = values[flag];
    return typeof v === 'string' ? v : env[envName] || undefined;
  };
  const problems: string[] = [];
  const int = (flag: string, envName: string, fallback: number): number => {
    const raw = str(flag, envName);
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n))
      problems.push(`--${flag} ${JSON.stringify(raw)}: not an integer ≥ 0`);
    return n;
  };
  const threadId = str('thread', 'RS_DEMO_THREAD') ?? DEFAULT_THREAD_ID;
  if (!ID_PATTERN.test(threadId))
    problems.push(`--thread ${JSON.stringify(threadId)}: must match ${ID_PATTERN}`);
  const intervalMs = int('interval-ms', 'RS_DEMO_INTERVAL_MS', DEFAULT_INTERVAL_MS);
  const runs = int('runs', 'RS_DEMO_RUNS', 0);
  const target = str('target', 'RS_TARGET') ?? DEFAULT_TARGET;
  if (problems.length > 0) {
    process.stderr.write(`demo-agent: ${problems.join('\n  ')}\n${USAGE}\n`);
    return 2;
  }
  let script: { runs: ScriptRun[]; source: string };
  try {
    script = loadScript(str('fixture', 'RS_DEMO_FIXTURE'));
  } catch (err) {
    process.stderr.write(`demo-agent: cannot load the fixture: ${(err as Error).message}\n`);
    return 2;
  }

  const log = (line: string): void => {
    process.stdout.write(`${new Date().toISOString()} demo-agent ${line}\n`);
  };
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals): void => {
    if (stop.signal.aborted) process.exit(1);
    log(`${signal}: stopping`);
    stop.abort(new Error(`stopped by ${signal}`));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  log(
    `publishing to ${target}, thread ${threadId}, a run every ~${intervalMs} ms ` +
      `(${script.runs.length} scripted runs from ${script.source})`,
  );
  await runDemo({ target, threadId, intervalMs, runs, script: script.runs, log }, stop.signal);
  return 0;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(
        `demo-agent: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
      );
      process.exit(1);
    },
  );
}
