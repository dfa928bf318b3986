/**
 * Shared pieces of the per-surface fuzz tests (test/fuzz-*.test.ts): the seed, a broker run
 * as a child process (so a crash is an exit, seen with its stderr, never a crashed test
 * runner), its resident memory, and the "still alive and answering" check every fuzz file
 * ends with: /healthz, then an event published at PERSISTED and read back over WebSocket
 * and History.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { TestContext } from 'node:test';
import WebSocket from 'ws';
import { IngestClient } from '../../src/client/ingest-client.js';
import type { Config } from '../../src/config.js';
import {
  type BrokerProcess,
  brokerConfig,
  randomName,
  type Servers,
  spawnBroker,
  startServers,
} from './stack.js';
import { waitFor } from './wait.js';

/** The default seed of every fuzz file; `FUZZ_SEED` overrides it (a 32-bit integer). */
export const DEFAULT_FUZZ_SEED = 20_261_130;

export function fuzzSeed(): number {
  const raw = process.env.FUZZ_SEED;
  if (raw === undefined || raw === '') return DEFAULT_FUZZ_SEED;
  const n = Number(raw);
  if (!Number.isSafeInteger(n)) throw new Error(`FUZZ_SEED must be an integer, got ${JSON.stringify(raw)}`);
  return n | 0;
}

/** `n` cases, scaled by `FUZZ_SCALE` (default 1; e.g. 10 for a longer soak). */
export function fuzzRuns(n: number): number {
  const raw = process.env.FUZZ_SCALE;
  const scale = raw === undefined || raw === '' ? 1 : Number(raw);
  if (!(scale > 0)) throw new Error(`FUZZ_SCALE must be a positive number, got ${JSON.stringify(raw)}`);
  return Math.max(1, Math.round(n * scale));
}

/** Parameters for `fc.assert`: the seed (printed by fast-check with the counterexample on failure). */
export function fcParams(numRuns: number): {
  seed: number;
  numRuns: number;
  endOnFailure: boolean;
  includeErrorInReport: boolean;
} {
  // Shrinking replays inputs against a live broker; FUZZ_NO_SHRINK=1 reports the first failure as found.
  return {
    seed: fuzzSeed(),
    numRuns: fuzzRuns(numRuns),
    endOnFailure: process.env.FUZZ_NO_SHRINK === '1',
    includeErrorInReport: true,
  };
}

const OUTPUT_KEPT_BYTES = 64 * 1024;

/** A crash seen by {@link FuzzBroker.ensureUp}: how the process ended and its last output. */
export interface Crash {
  readonly pid: number;
  readonly exit: string;
  readonly stderr: string;
}

/**
 * A broker as a child process on the test's own nats-server and Postgres. When it dies,
 * {@link ensureUp} records the crash and starts a new one on the same servers, so one
 * crashing input does not hide what the rest of a file would find.
 */
export class FuzzBroker implements AsyncDisposable {
  readonly servers: Servers;
  #config: Config;
  readonly #overrides: Partial<Config> | undefined;
  readonly #env: Record<string, string>;
  #proc: BrokerProcess;
  #stderr = '';
  #stdout = '';
  #exit: string | undefined;
  #exited: Promise<void> = Promise.resolve();
  readonly crashes: Crash[] = [];

  private constructor(
    servers: Servers,
    config: Config,
    overrides: Partial<Config> | undefined,
    env: Record<string, string>,
    proc: BrokerProcess,
  ) {
    this.servers = servers;
    this.#config = config;
    this.#overrides = overrides;
    this.#env = env;
    this.#proc = proc;
    this.#watch();
  }

  static async start(
    opts: { env?: Record<string, string>; config?: Partial<Config> } = {},
  ): Promise<FuzzBroker> {
    const servers = await startServers();
    // One partition: the models bound every thread's offsets by the whole log's.
    const overrides = { partitions: 1, ...opts.config };
    const config = brokerConfig(servers, overrides);
    // LOG_LEVEL stays info: spawnBroker waits for the "runstream started" info line.
    const env = { ...opts.env };
    const proc = await spawnBroker(config, env);
    const b = new FuzzBroker(servers, config, overrides, env, proc);
    await b.#warm();
    return b;
  }

  #watch(): void {
    const child = this.#proc.child;
    this.#stderr = '';
    this.#stdout = '';
    this.#exit = undefined;
    const keep = (s: string, d: Buffer): string => (s + d.toString()).slice(-OUTPUT_KEPT_BYTES);
    child.stderr?.on('data', (d: Buffer) => {
      this.#stderr = keep(this.#stderr, d);
    });
    child.stdout?.on('data', (d: Buffer) => {
      this.#stdout = keep(this.#stdout, d);
    });
    this.#exited = new Promise((resolve) =>
      child.once('exit', (code, signal) => {
        this.#exit = `exit code ${code}, signal ${signal}`;
        resolve();
      }),
    );
  }

  async #warm(): Promise<void> {
    await waitFor(
      async () => (await fetch(`${this.httpUrl}/readyz`).catch(() => undefined))?.status === 200,
      { what: 'broker /readyz', timeoutMs: 30_000 },
    );
  }

  get config(): Config {
    return this.#config;
  }

  get pid(): number {
    return this.#proc.child.pid as number;
  }
  get httpPort(): number {
    return this.#proc.httpPort;
  }
  get grpcPort(): number {
    return this.#proc.grpcPort;
  }
  get httpUrl(): string {
    return `http://127.0.0.1:${this.httpPort}`;
  }
  get wsUrl(): string {
    return `ws://127.0.0.1:${this.httpPort}/v1/ws`;
  }
  get grpcTarget(): string {
    return `127.0.0.1:${this.grpcPort}`;
  }

  /** The process has not exited. */
  get alive(): boolean {
    const c = this.#proc.child;
    return this.#exit === undefined && c.exitCode === null && c.signalCode === null;
  }

  /**
   * Whether the broker is alive, asked of the process itself: after a reset connection the
   * exit may not have been seen yet, so a broker that does not answer /healthz is given
   * time to be seen exiting (a dying process is never reported alive, a live one always is).
   */
  async confirmAlive(): Promise<boolean> {
    if (!this.alive) return false;
    const answered = await fetch(`${this.httpUrl}/healthz`, { signal: AbortSignal.timeout(10_000) }).then(
      (r) => r.status === 200,
      () => false,
    );
    if (answered) return true;
    await Promise.race([this.#exited, new Promise((r) => setTimeout(r, 10_000))]);
    return this.alive;
  }

  /** How it ended, with the end of its stderr and stdout: for assertion messages. */
  deathReport(): string {
    const exit =
      this.#exit ?? `exit code ${this.#proc.child.exitCode}, signal ${this.#proc.child.signalCode}`;
    return `broker pid ${this.pid} died (${exit}).\n--- stderr (tail) ---\n${this.#stderr.slice(-4000)}\n--- stdout (tail) ---\n${this.#stdout.slice(-2000)}`;
  }

  /** The broker's log lines (pino JSON on stdout) kept so far: the last 64 KiB. */
  get stdout(): string {
    return this.#stdout;
  }

  /** Resident set size of the broker, in KiB (/proc/<pid>/status VmRSS). */
  rssKiB(): number {
    const status = readFileSync(`/proc/${this.pid}/status`, 'utf8');
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(status);
    if (!m) throw new Error(`no VmRSS in /proc/${this.pid}/status`);
    return Number(m[1]);
  }

  /** If the broker died, records the crash and starts a new one on the same servers. */
  async ensureUp(): Promise<Crash | undefined> {
    if (this.alive) return undefined;
    await new Promise((r) => setImmediate(r)); // let 'exit' and the last output arrive
    const crash: Crash = { pid: this.pid, exit: this.#exit ?? 'exited', stderr: this.#stderr.slice(-4000) };
    this.crashes.push(crash);
    this.#proc = await spawnBroker(this.#config, this.#env);
    this.#watch();
    await this.#warm();
    return crash;
  }

  /**
   * Kills the broker and starts a new one on the same servers with a new JetStream stream
   * and subject prefix: nothing the old one took into its log reaches the new one (for a
   * message that wedges the persister).
   */
  async respawnFresh(): Promise<void> {
    if (this.alive) await this.#proc.kill();
    this.#config = brokerConfig(this.servers, this.#overrides);
    this.#proc = await spawnBroker(this.#config, this.#env);
    this.#watch();
    await this.#warm();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    if (this.alive) await this.#proc.stop().catch(() => undefined);
    await this.servers[Symbol.asyncDispose]();
  }
}

/** 300 MiB: far above what a few thousand refused requests may cost, far below a leak per request. */
export const RSS_GROWTH_LIMIT_KIB = 300 * 1024;

/**
 * Runs one fuzz test body against `b`: restarts a broker an earlier test killed, samples its
 * RSS before and after, and turns a death during the body into this test's failure, with the
 * broker's stderr. Reports the RSS as a diagnostic.
 */
export async function fuzzBody(t: TestContext, b: FuzzBroker, body: () => Promise<void>): Promise<void> {
  const earlier = await b.ensureUp();
  if (earlier) t.diagnostic(`restarted the broker killed by an earlier test (${earlier.exit})`);
  const pid = b.pid;
  const before = b.rssKiB();
  let failure: unknown;
  try {
    await body();
  } catch (err) {
    failure = err;
  }
  if (!b.alive) {
    const report = b.deathReport();
    const why = failure instanceof Error ? failure.message : String(failure ?? '');
    throw new Error(`${report}\n--- what the fuzzer saw ---\n${why}`);
  }
  if (b.pid !== pid) {
    // Restarted after a crash in a subtest: the two samples are of different processes.
    t.diagnostic(
      `broker pid ${pid} RSS: ${before} KiB before; it died, pid ${b.pid} now holds ${b.rssKiB()} KiB`,
    );
    if (failure !== undefined) throw failure;
    return;
  }
  const after = b.rssKiB();
  t.diagnostic(`broker pid ${pid} RSS: ${before} KiB before, ${after} KiB after (${after - before} KiB)`);
  if (failure !== undefined) throw failure;
  assert.ok(
    after - before < RSS_GROWTH_LIMIT_KIB,
    `broker RSS grew by ${after - before} KiB (limit ${RSS_GROWTH_LIMIT_KIB} KiB)`,
  );
}

/** A fast-check predicate guard: skip (not fail) a case once the broker is dead, so shrinking keeps the input that killed it. */
export function brokerDiedOn(b: FuzzBroker, input: unknown): Error {
  return new Error(
    `the broker died on this input: ${JSON.stringify(input, null, 0)?.slice(0, 2000)}\n${b.deathReport()}`,
  );
}

/** What {@link FrameLog.next} found: a frame, the close, or nothing before the deadline. */
export type Next =
  | { readonly frame: Record<string, unknown> }
  | { readonly closed: { code: number; reason: string } }
  | { readonly timeout: true };

/** Frames received on a raw WebSocket, tolerant of anything the server might send. */
export class FrameLog {
  readonly frames: { text: string; json: Record<string, unknown> | undefined; binary: boolean }[] = [];
  #waiters: {
    pred: (f: Record<string, unknown>) => boolean;
    resolve: (f: Record<string, unknown>) => void;
  }[] = [];
  closed: { code: number; reason: string } | undefined;
  #onClose: (() => void)[] = [];

  constructor(readonly ws: WebSocket) {
    ws.on('message', (data, isBinary) => {
      const text = Buffer.isBuffer(data) ? data.toString('utf8') : String(data);
      let json: Record<string, unknown> | undefined;
      try {
        const v = JSON.parse(text) as unknown;
        if (v !== null && typeof v === 'object' && !Array.isArray(v)) json = v as Record<string, unknown>;
      } catch {
        json = undefined;
      }
      this.frames.push({ text, json, binary: isBinary });
      if (json === undefined) return;
      const f = json;
      this.#waiters = this.#waiters.filter((w) => {
        if (!w.pred(f)) return true;
        w.resolve(f);
        return false;
      });
    });
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() };
      for (const c of this.#onClose.splice(0)) c();
    });
    ws.on('error', () => undefined);
  }

  static open(url: string, headers: Record<string, string> = {}): Promise<FrameLog> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { perMessageDeflate: false, headers });
      const log = new FrameLog(ws);
      ws.once('open', () => resolve(log));
      ws.once('error', reject);
    });
  }

  /** The first frame from index `from` on that matches, or the close, whichever comes first. */
  next(pred: (f: Record<string, unknown>) => boolean, from = 0, deadlineMs = 20_000): Promise<Next> {
    for (const f of this.frames.slice(from))
      if (f.json && pred(f.json)) return Promise.resolve({ frame: f.json });
    if (this.closed) return Promise.resolve({ closed: this.closed });
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#waiters = this.#waiters.filter((w) => w !== waiter);
        resolve({ timeout: true });
      }, deadlineMs);
      const waiter = {
        pred,
        resolve: (f: Record<string, unknown>) => {
          clearTimeout(timer);
          resolve({ frame: f });
        },
      };
      this.#waiters.push(waiter);
      this.#onClose.push(() => {
        clearTimeout(timer);
        this.#waiters = this.#waiters.filter((w) => w !== waiter);
        resolve({ closed: this.closed as { code: number; reason: string } });
      });
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    const done = new Promise<void>((r) => this.#onClose.push(r));
    this.ws.close();
    await Promise.race([done, new Promise((r) => setTimeout(r, 5000))]);
    if (!this.closed) this.ws.terminate();
  }
}

/**
 * The broker is alive and does its job: the process runs, `/healthz` answers 200, and an
 * event published at PERSISTED comes back over WebSocket (catch-up, then `live`) and over
 * History HTTP, with the seq its ack gave.
 */
export async function assertServing(b: FuzzBroker): Promise<void> {
  assert.ok(b.alive, b.deathReport());
  const health = await fetch(`${b.httpUrl}/healthz`);
  assert.equal(health.status, 200);
  assert.deepEqual(await health.json(), { status: 'ok' });

  const thread = randomName('rt-');
  const client = new IngestClient(b.grpcTarget);
  try {
    const acks = await client.publish(
      [
        {
          thread_id: thread,
          run_id: 'run-1',
          event_id: 'roundtrip-1',
          event_type: 'ai_chunk',
          category: 'MESSAGE',
          content_json: '{"content":"still here"}',
        },
      ],
      'PERSISTED',
    );
    assert.equal(acks.length, 1);
    assert.equal(acks[0]?.seq, 1);
  } finally {
    client.close();
  }

  const ws = await FrameLog.open(b.wsUrl);
  try {
    ws.ws.send(JSON.stringify({ type: 'subscribe', id: 'rt', thread_id: thread, after_seq: 0 }));
    const ev = await ws.next((f) => f.id === 'rt' && f.type === 'event');
    assert.ok('frame' in ev, `no event frame: ${JSON.stringify(ev)}`);
    const e = ev.frame.event as Record<string, unknown>;
    assert.equal(e.seq, 1);
    assert.equal(e.event_id, 'roundtrip-1');
    assert.deepEqual(e.content, { content: 'still here' });
    const live = await ws.next((f) => f.id === 'rt' && f.type === 'live');
    assert.ok('frame' in live, `no live frame: ${JSON.stringify(live)}`);
    assert.equal(live.frame.seq, 1);
  } finally {
    await ws.close();
  }

  const page = await fetch(`${b.httpUrl}/v1/threads/${thread}/events`);
  assert.equal(page.status, 200);
  const body = (await page.json()) as { events: { seq: number; event_id: string }[] };
  assert.deepEqual(
    body.events.map((e) => [e.seq, e.event_id]),
    [[1, 'roundtrip-1']],
  );
}

/**
 * `FUZZ_COLLECT=1`: a property records every distinct failure (restarting a broker that
 * died) instead of stopping at the first, and the test prints them all before it fails.
 * For finding what lies behind a known failure; the default stops, shrinks and prints the
 * counterexample with its seed.
 */
export const COLLECT = process.env.FUZZ_COLLECT === '1';

export class Findings {
  readonly #seen = new Map<string, { count: number; example: string }>();

  /** A failure: thrown at once, or (collect mode) recorded under `signature`. */
  fail(signature: string, message: string): void {
    if (!COLLECT) throw new assert.AssertionError({ message });
    const seen = this.#seen.get(signature);
    if (seen) seen.count++;
    else this.#seen.set(signature, { count: 1, example: message });
  }

  /** Before a case: in collect mode restart a dead broker; otherwise skip the case (fast-check keeps the input that killed it). */
  async before(b: FuzzBroker, pre: (ok: boolean) => void): Promise<void> {
    if (COLLECT) await b.ensureUp();
    else pre(b.alive);
  }

  /** Prints what was collected and fails if anything was. */
  report(t: TestContext): void {
    for (const [sig, { count, example }] of this.#seen) {
      t.diagnostic(`FINDING ×${count} [${sig}]\n${example.slice(0, 3000)}`);
    }
    const n = this.#seen.size;
    this.#seen.clear();
    assert.equal(n, 0, `${n} distinct failures (see the diagnostics)`);
  }
}
