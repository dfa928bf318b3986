/**
 * A demo agent: every few seconds it streams one realistic run onto a thread, the way a
 * real agent would — lifecycle start, the human message, `llm_start`, assistant tokens
 * arriving 30-80 ms apart, a tool call and its result, more tokens, lifecycle end.
 *
 * Runs are scripted from `../shared/fixtures/agent-runs.jsonl` (or `--fixture`), with a
 * built-in copy as fallback. Every event gets a producer-chosen `event_id`, so a batch
 * that is re-sent after a dropped connection is stored once (the broker deduplicates).
 * Events go through @runstream/client's Publisher on one PublishStream with ACCEPTED acks:
 * at most one request is in flight, whatever became ready meanwhile goes out as the next
 * batch, and a cancel request from a subscriber ends the run as `cancelled`.
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
import { Publisher } from '@runstream/client/node';
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

export interface DemoOptions {
  readonly target: string;
  readonly threadId: string;
  readonly intervalMs: number;
  /** Stop after this many runs; 0 = until a signal. */
  readonly runs: number;
  readonly script: readonly ScriptRun[];
  readonly log: (line: string) => void;
}

interface RunStats {
  events: number;
  duplicates: number;
  retries: number;
}

/**
 * Plays one run; returns its status: `cancelled` when the signal fired or a subscriber asked
 * the run to stop (a cancel control on the publisher's PublishStream).
 */
async function playRun(
  pub: Publisher,
  o: DemoOptions,
  run: ScriptRun,
  runId: string,
  signal: AbortSignal,
  stats: RunStats,
): Promise<string> {
  const stop = new AbortController();
  const onSignal = (): void => stop.abort(signal.reason);
  signal.addEventListener('abort', onSignal, { once: true });
  const offCancel = pub.onCancel(o.threadId, runId, (c) => {
    o.log(
      `run ${runId}: cancel requested${c.reason ? ` (${c.reason})` : ''}${c.requestedBy ? ` by ${c.requestedBy}` : ''}`,
    );
    stop.abort(new Error('cancel requested'));
  });
  const events = instantiate(run, runId);
  let seqInRun = 0;
  const failures: unknown[] = [];
  const acks: Promise<void>[] = [];
  const publish = (e: ScriptEvent): Promise<void> => {
    const p = pub
      .publish({
        threadId: o.threadId,
        runId,
        eventId: `${runId}-${String(++seqInRun).padStart(4, '0')}`,
        eventType: e.event_type,
        category: e.category,
        content: e.content,
        metadata: e.metadata,
        createdAt: new Date(),
      })
      .then(
        (ack) => {
          stats.events++;
          if (ack.duplicate) stats.duplicates++;
        },
        (err: unknown) => {
          failures.push(err);
        },
      );
    acks.push(p);
    return p;
  };
  let status = 'success';
  try {
    let prev: ScriptEvent | undefined;
    for (const e of events) {
      const delay = delayBefore(e, prev);
      if (delay > 0) await sleep(delay, undefined, { signal: stop.signal });
      if (stop.signal.aborted) break;
      void publish(e);
      prev = e;
      if (e.event_type === 'run_end' && isObject(e.content) && typeof e.content.status === 'string') {
        status = e.content.status;
      }
    }
  } catch (err) {
    if (!stop.signal.aborted) throw err;
  } finally {
    signal.removeEventListener('abort', onSignal);
  }
  if (stop.signal.aborted) {
    // Interrupted: close the run the way a cancelled agent would, within a bounded grace.
    status = 'cancelled';
    const end = publish({ event_type: 'run_end', category: 'lifecycle', content: { status }, metadata: {} });
    await Promise.race([end, sleep(CANCEL_GRACE_MS)]);
  } else {
    await Promise.all(acks);
    if (failures.length > 0) throw failures[0];
  }
  offCancel();
  return status;
}

/** Plays runs until `signal` fires (or `o.runs` are done). */
export async function runDemo(o: DemoOptions, signal: AbortSignal): Promise<void> {
  const stats: RunStats = { events: 0, duplicates: 0, retries: 0 };
  // One PublishStream for the whole demo: batches of whatever became ready while a request was
  // in flight, stable ids across retries, and the cancel controls subscribers send.
  const pub = new Publisher({
    target: o.target,
    mode: 'stream',
    lingerMs: 0,
    deadlineMs: SEND_TIMEOUT_MS,
    retry: {
      initialDelayMs: RETRY_MIN_DELAY_MS,
      maxDelayMs: RETRY_MAX_DELAY_MS,
      maxAttempts: Number.POSITIVE_INFINITY,
    },
    onRetry: (err, attempt, delayMs) => {
      stats.retries++;
      if (attempt === 1 || attempt % 10 === 0)
        o.log(`publish failed (${err.message}); retry #${attempt} in ${delayMs} ms`);
    },
  });
  try {
    for (let i = 0; (o.runs === 0 || i < o.runs) && !signal.aborted; i++) {
      const run = o.script[i % o.script.length] as ScriptRun;
      const runId = newRunId();
      const started = Date.now();
      const before = { ...stats };
      const status = await playRun(pub, o, run, runId, signal, stats);
      const secs = ((Date.now() - started) / 1000).toFixed(1);
      const extra = [
        stats.retries > before.retries ? `${stats.retries - before.retries} retries` : '',
        stats.duplicates > before.duplicates ? `${stats.duplicates - before.duplicates} deduplicated` : '',
      ].filter(Boolean);
      o.log(
        `run ${runId} (${run.source}) on ${o.threadId}: ${status}, ${stats.events - before.events} events` +
          `${extra.length > 0 ? ` (${extra.join(', ')})` : ''}, ${secs}s`,
      );
      if (o.runs !== 0 && i + 1 >= o.runs) break;
      await sleep(o.intervalMs, undefined, { signal }).catch(() => undefined);
    }
  } finally {
    if (signal.aborted) pub.abort();
    else await pub.close();
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
