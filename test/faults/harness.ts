/**
 * The fault suite's harness: real nats-server and Postgres (own, random ports), a broker
 * child process on fixed ports (so it can be killed, stopped and restarted while clients
 * reconnect to the same address), a rate-limited producer that retries a batch with the
 * same event ids until it is acked, a live WebSocket subscriber that resumes from its
 * cursors, a catch-up from seq 0, and the row runner that hands everything to the checker
 * and appends the row's figures to the results file (report.ts renders them).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { appendFileSync, createWriteStream, mkdirSync, readFileSync, type WriteStream } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import pg from 'pg';
import WebSocket from 'ws';
import type { AckLevel, Event, EventAck } from '../../src/client/ingest-client.js';
import type { IngestClient as RawIngestClient } from '../../src/gen/runstream/v1/Ingest.js';
import type { PublishResponse__Output } from '../../src/gen/runstream/v1/PublishResponse.js';
import { loadProto } from '../../src/proto.js';
import { type NatsServerHandle, startNatsServer } from '../helpers/nats-server.js';
import { type PostgresHandle, startPostgres } from '../helpers/postgres.js';
import { freePort, logTail, registerTempDir } from '../helpers/proc.js';
import { MAIN_JS, randomName } from '../helpers/stack.js';
import {
  type AckedEvent,
  checkThread,
  type Faults,
  type RowResult,
  type SeenEvent,
  sumFaults,
  type ThreadReport,
  total,
} from './checker.js';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));
/** Where rows append their figures (one JSON object per line). */
export const RESULTS_PATH = process.env.RS_FAULTS_RESULTS ?? join(REPO, 'dist', 'faults-results.jsonl');

const BROKER_START_TIMEOUT_MS = 60_000;
const RETRY_PAUSE_MS = 100;
/** Postgres' json input gives up ("stack depth limit exceeded") well before this. */
export const TOO_DEEP_JSON = `${'['.repeat(20_000)}${']'.repeat(20_000)}`;

export function rssMiB(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return Math.round(Number(m?.[1] ?? 0) / 102.4) / 10;
  } catch {
    return 0;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// servers

export interface FaultServers extends AsyncDisposable {
  readonly nats: NatsServerHandle;
  readonly pg: PostgresHandle;
  readonly db: pg.Pool;
}

/** A nats-server (with monitoring) and a Postgres of this row's own, whatever NATS_URL / DATABASE_URL say. */
export async function startFaultServers(): Promise<FaultServers> {
  const [nats, pgh] = await Promise.all([
    startNatsServer({ useEnv: false, monitor: true }),
    startPostgres({ useEnv: false }),
  ]);
  const db = new pg.Pool({ connectionString: pgh.url, max: 4 });
  db.on('error', () => undefined);
  return {
    nats,
    pg: pgh,
    db,
    async [Symbol.asyncDispose]() {
      await db.end().catch(() => undefined);
      await Promise.all([nats[Symbol.asyncDispose](), pgh[Symbol.asyncDispose]()]);
    },
  };
}

// ---------------------------------------------------------------------------------------------------------------
// the broker as a child process

/** A broker process on fixed ports: kill -9, SIGSTOP / SIGCONT, restart on the same ports. */
export class FaultBroker implements AsyncDisposable {
  #child: ChildProcess | undefined;
  #exited: Promise<void> = Promise.resolve();
  readonly #log: WriteStream;
  readonly #inspect: boolean;
  #inspectorUrl: string | undefined;
  readonly logPath: string;
  /** Lines of the broker's output that say it crashed or reported an unhandled error. */
  readonly alarms: string[] = [];

  private constructor(
    readonly env: Record<string, string>,
    readonly grpcPort: number,
    readonly httpPort: number,
    dir: string,
    inspect: boolean,
  ) {
    this.#inspect = inspect;
    this.logPath = join(dir, 'broker.log');
    this.#log = createWriteStream(this.logPath, { flags: 'a' });
  }

  /**
   * `servers`: any NATS (a single server or a cluster's URL list) and Postgres. `inspect` opens
   * the process's inspector on a loopback port, for {@link heldAfterGcMiB}.
   */
  static async start(
    servers: { readonly nats: { readonly url: string }; readonly pg: { readonly url: string } },
    env: Record<string, string> = {},
    opts: { inspect?: boolean } = {},
  ): Promise<FaultBroker> {
    const dir = await mkdtemp(join(tmpdir(), 'rs-fault-broker-'));
    registerTempDir(dir);
    const [grpcPort, httpPort] = [await freePort(), await freePort()];
    const b = new FaultBroker(
      {
        RS_HOST: '127.0.0.1',
        GRPC_PORT: String(grpcPort),
        HTTP_PORT: String(httpPort),
        NATS_URL: servers.nats.url,
        DATABASE_URL: servers.pg.url,
        RS_STREAM: randomName('RS_'),
        RS_SUBJECT_PREFIX: randomName('rs'),
        LOG_LEVEL: 'info',
        ...env,
      },
      grpcPort,
      httpPort,
      dir,
      opts.inspect === true,
    );
    await b.restart();
    return b;
  }

  get pid(): number {
    return this.#child?.pid ?? 0;
  }

  get grpcTarget(): string {
    return `127.0.0.1:${this.grpcPort}`;
  }

  get wsUrl(): string {
    return `ws://127.0.0.1:${this.httpPort}/v1/ws`;
  }

  get httpUrl(): string {
    return `http://127.0.0.1:${this.httpPort}`;
  }

  /** The process is running (not exited). */
  alive(): boolean {
    return this.#child !== undefined && this.#child.exitCode === null && this.#child.signalCode === null;
  }

  rssMiB(): number {
    return rssMiB(this.pid);
  }

  /**
   * What the process holds once the garbage collector has run: a full collection, asked for
   * through the inspector, then the V8 heap in use plus memory outside it (Buffers), in MiB.
   * Unlike RSS, which keeps what the allocator took at a peak, this grows over a run only with
   * what the process keeps. Needs the broker started with `inspect`.
   */
  async heldAfterGcMiB(): Promise<number> {
    const url = this.#inspectorUrl;
    if (url === undefined) throw new Error('the broker was not started with inspect');
    const ws = new WebSocket(url);
    // A broker that died or hangs fails the reading instead of stalling the row.
    const signal = AbortSignal.timeout(30_000);
    try {
      await once(ws, 'open', { signal });
      let id = 0;
      const call = async (method: string, params: object = {}): Promise<unknown> => {
        const mine = ++id;
        ws.send(JSON.stringify({ id: mine, method, params }));
        for (;;) {
          const [data] = (await once(ws, 'message', { signal })) as [Buffer];
          const msg = JSON.parse(data.toString()) as { id?: number; result?: unknown; error?: unknown };
          if (msg.id !== mine) continue;
          if (msg.error) throw new Error(`${method}: ${JSON.stringify(msg.error)}`);
          return msg.result;
        }
      };
      await call('HeapProfiler.collectGarbage');
      const r = (await call('Runtime.evaluate', {
        expression: 'JSON.stringify(process.memoryUsage())',
        returnByValue: true,
      })) as { result: { value: string } };
      const m = JSON.parse(r.result.value) as { heapUsed: number; external: number };
      return Math.round((m.heapUsed + m.external) / 104_857.6) / 10;
    } finally {
      ws.close();
    }
  }

  logTail(lines = 60): string {
    return logTail(this.logPath, lines);
  }

  /** Starts the process (again, on the same ports) and resolves once it logs `runstream started`. */
  async restart(): Promise<void> {
    if (this.alive()) throw new Error('broker is running');
    const child = spawn(process.execPath, [...(this.#inspect ? ['--inspect=127.0.0.1:0'] : []), MAIN_JS], {
      env: { ...process.env, ...this.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.#child = child;
    this.#exited = new Promise((resolve) => child.once('exit', () => resolve()));
    // One listener per live child, not per start: a row that restarts brokers often would pile them up.
    const killOnExit = (): void => {
      child.kill('SIGKILL');
    };
    process.once('exit', killOnExit);
    child.once('exit', () => process.off('exit', killOnExit));
    let buffered = '';
    const started = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`broker did not start:\n${this.logTail()}`)),
        BROKER_START_TIMEOUT_MS,
      );
      const onData = (d: Buffer): void => {
        this.#log.write(d);
        buffered += d.toString();
        const lines = buffered.split('\n');
        buffered = lines.pop() ?? '';
        for (const line of lines) {
          if (/Unhandled 'error' event|uncaughtException|FATAL|failed to start/i.test(line)) {
            this.alarms.push(line.slice(0, 500));
          }
          if (line.includes('runstream started')) {
            clearTimeout(timer);
            resolve();
          }
        }
      };
      child.stdout?.on('data', onData);
      // The inspector's address is on the first lines of stderr, in a chunk or split across chunks.
      let stderrHead = '';
      this.#inspectorUrl = undefined;
      child.stderr?.on('data', (d: Buffer) => {
        this.#log.write(d);
        const text = d.toString();
        if (this.#inspect && this.#inspectorUrl === undefined && stderrHead.length < 8_192) {
          stderrHead += text;
          this.#inspectorUrl = /Debugger listening on (ws:\/\/\S+)\r?\n/.exec(stderrHead)?.[1];
        }
        if (/Unhandled 'error' event|uncaught|failed to start/i.test(text))
          this.alarms.push(text.slice(0, 500));
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`broker exited (${code ?? signal}) at start:\n${this.logTail()}`));
      });
    });
    await started;
  }

  /** SIGKILL, and wait for the exit. */
  async kill(): Promise<void> {
    if (!this.alive()) return;
    this.#child?.kill('SIGKILL');
    await this.#exited;
  }

  pause(): void {
    this.#child?.kill('SIGSTOP');
  }

  resume(): void {
    this.#child?.kill('SIGCONT');
  }

  /** SIGTERM (graceful), SIGKILL after 20 s. */
  async stop(): Promise<void> {
    if (!this.alive()) return;
    this.#child?.kill('SIGCONT');
    this.#child?.kill('SIGTERM');
    const t = setTimeout(() => this.#child?.kill('SIGKILL'), 20_000);
    await this.#exited;
    clearTimeout(t);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
    this.#log.end();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// the producer

/** An Ingest client that reconnects quickly (grpc-js backs off up to 2 minutes by default). */
export function ingestClient(target: string): RawIngestClient {
  const { proto } = loadProto();
  return new proto.runstream.v1.Ingest(target, grpc.credentials.createInsecure(), {
    'grpc.max_send_message_length': 64 * 1024 * 1024,
    'grpc.initial_reconnect_backoff_ms': 100,
    'grpc.max_reconnect_backoff_ms': 1_000,
    'grpc.min_reconnect_backoff_ms': 100,
  });
}

export function publish(
  client: RawIngestClient,
  events: Event[],
  ack: AckLevel,
  deadlineMs: number,
): Promise<EventAck[]> {
  return new Promise((resolve, reject) => {
    client.Publish({ events, ack }, { deadline: Date.now() + deadlineMs }, (err, res) =>
      err ? reject(err) : resolve((res as PublishResponse__Output).acks),
    );
  });
}

export interface LoadOptions {
  readonly target: string;
  readonly threads: readonly string[];
  readonly ack: AckLevel;
  /** Across all threads. */
  readonly eventsPerSecond: number;
  /** Events per request (default 10). */
  readonly batch?: number;
  /** Per request (default 5 000 ms); a request that fails or times out is sent again, same ids. */
  readonly deadlineMs?: number;
  /** Event `i` of thread `k` is a poison event (passes the loosened validation, refused by Postgres). */
  readonly poison?: (k: number, i: number) => boolean;
}

/**
 * Publishes to every thread at a fixed overall rate, one request in flight per thread (so
 * send order within a thread is index order), retrying a failed request with the same
 * event ids until it is acked.
 */
export class Load {
  /** Per thread: event id → what its ack said. */
  readonly acked = new Map<string, Map<string, AckedEvent>>();
  /** Per thread: event id → when it was first sent (ms since epoch). */
  readonly firstSent = new Map<string, Map<string, number>>();
  /** Times of successful acks, ascending. */
  readonly ackTimes: number[] = [];
  /** Per thread: times of its successful acks, ascending. */
  readonly threadAckTimes = new Map<string, number[]>();
  failures = 0;
  requests = 0;
  #stopped = false;
  #done: Promise<void> | undefined;
  readonly #client: RawIngestClient;

  constructor(readonly o: LoadOptions) {
    this.#client = ingestClient(o.target);
    for (const t of o.threads) {
      this.threadAckTimes.set(t, []);
      this.acked.set(t, new Map());
      this.firstSent.set(t, new Map());
    }
  }

  get ackedCount(): number {
    let n = 0;
    for (const m of this.acked.values()) n += m.size;
    return n;
  }

  start(): this {
    this.#done = Promise.all(this.o.threads.map((t, k) => this.#thread(t, k))).then(() => undefined);
    return this;
  }

  /** Stops sending; the request in flight on each thread is finished (retried up to 60 s). */
  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#done;
    this.#client.close();
  }

  /** Resolves once `n` more acks than now have arrived (or rejects after `timeoutMs`). */
  async waitForAcks(n: number, timeoutMs = 60_000): Promise<void> {
    const want = this.ackTimes.length + n;
    const deadline = Date.now() + timeoutMs;
    while (this.ackTimes.length < want) {
      if (Date.now() > deadline) throw new Error(`no ${n} acks within ${timeoutMs} ms`);
      await sleep(20);
    }
  }

  /** ms from `since` until every thread has had an ack at or after it (undefined if one has none). */
  allThreadsAckedMs(since: number): number | undefined {
    let worst = 0;
    for (const times of this.threadAckTimes.values()) {
      const t = times.find((a) => a >= since);
      if (t === undefined) return undefined;
      worst = Math.max(worst, t - since);
    }
    return worst;
  }

  /** ms from `since` to the first ack at or after it (undefined if none). */
  ackRecoveryMs(since: number): number | undefined {
    const t = this.ackTimes.find((a) => a >= since);
    return t === undefined ? undefined : t - since;
  }

  async #thread(thread: string, k: number): Promise<void> {
    const batch = this.o.batch ?? 10;
    const intervalMs = (1000 * batch * this.o.threads.length) / this.o.eventsPerSecond;
    const acked = this.acked.get(thread) as Map<string, AckedEvent>;
    const firstSent = this.firstSent.get(thread) as Map<string, number>;
    let next = Date.now() + Math.random() * intervalMs;
    for (let i = 0; !this.#stopped; i += batch) {
      const wait = next - Date.now();
      if (wait > 0) await sleep(wait);
      next += intervalMs;
      if (next < Date.now() - 1_000) next = Date.now(); // far behind (a fault): do not burst
      const events: Event[] = Array.from({ length: batch }, (_, j) => {
        const n = i + j;
        const bad = this.o.poison?.(k, n) === true;
        return {
          thread_id: thread,
          run_id: 'run-1',
          event_id: bad ? `p${n}` : `e${n}`,
          event_type: 'ai_chunk',
          category: 'MESSAGE',
          content_json: bad ? TOO_DEEP_JSON : `{"i":${n}}`,
        };
      });
      const sentAt = Date.now();
      for (const e of events) firstSent.set(e.event_id as string, sentAt);
      const giveUp = () => this.#stopped && Date.now() - sentAt > 60_000;
      for (;;) {
        this.requests++;
        try {
          const acks = await publish(this.#client, events, this.o.ack, this.o.deadlineMs ?? 5_000);
          const now = Date.now();
          this.ackTimes.push(now);
          this.threadAckTimes.get(thread)?.push(now);
          acks.forEach((a, j) => {
            acked.set(a.event_id, { i: i + j, seq: Number(a.seq) });
          });
          break;
        } catch {
          this.failures++;
          if (giveUp()) return;
          await sleep(RETRY_PAUSE_MS);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// subscribers

interface Delivered {
  readonly ev: SeenEvent;
  readonly at: number;
}

function seen(e: { seq: number; event_id: string; event_type: string; content: unknown }): SeenEvent {
  // Only a notice's content matters to the checker (it names the refused event).
  return {
    seq: e.seq,
    event_id: e.event_id,
    event_type: e.event_type,
    content: e.event_type === 'event_rejected' ? e.content : null,
  };
}

/**
 * One WebSocket subscribed to every thread from seq 0; when the connection drops or a
 * subscription ends with an error, it subscribes again after the last seq it received.
 * It only records: the checker judges.
 */
export class LiveSubscriber {
  readonly delivered = new Map<string, Delivered[]>();
  readonly cursor = new Map<string, number>();
  reconnects = 0;
  errorFrames = 0;
  readonly errorCodes = new Map<string, number>();
  #ws: WebSocket | undefined;
  #closed = false;
  #gen = 0;
  /** Subscription id → thread, for the current generation. */
  readonly #ids = new Map<string, string>();
  #opened: (() => void) | undefined;

  constructor(
    readonly url: string,
    readonly threads: readonly string[],
  ) {
    for (const t of threads) {
      this.delivered.set(t, []);
      this.cursor.set(t, 0);
    }
  }

  /** Resolves once every thread's first subscription reached `live`. */
  async start(): Promise<void> {
    const live = new Promise<void>((resolve) => {
      this.#opened = resolve;
    });
    this.#connect();
    await live;
  }

  deliveredCount(): number {
    let n = 0;
    for (const d of this.delivered.values()) n += d.length;
    return n;
  }

  /** ms from `since` to the first delivery of an event first sent at or after `since`. */
  deliveryRecoveryMs(since: number, load: Load): number | undefined {
    let best: number | undefined;
    for (const [t, ds] of this.delivered) {
      const sent = load.firstSent.get(t);
      for (const d of ds) {
        const s = sent?.get(d.ev.event_id);
        if (s !== undefined && s >= since) {
          if (best === undefined || d.at < best) best = d.at;
          break;
        }
      }
    }
    return best === undefined ? undefined : best - since;
  }

  #connect(): void {
    if (this.#closed) return;
    const ws = new WebSocket(this.url, { perMessageDeflate: false });
    this.#ws = ws;
    const gen = ++this.#gen;
    let pendingLive = new Set(this.threads);
    ws.on('open', () => {
      this.#ids.clear();
      this.threads.forEach((t) => {
        this.#subscribe(ws, t, gen);
      });
    });
    ws.on('message', (data) => {
      const f = JSON.parse(data.toString()) as {
        type: string;
        id: string | null;
        event?: { seq: number; event_id: string; event_type: string; content: unknown };
        code?: string;
      };
      const t = f.id === null ? undefined : this.#ids.get(f.id);
      if (f.type === 'event' && t !== undefined && f.event) {
        this.delivered.get(t)?.push({ ev: seen(f.event), at: Date.now() });
        if (f.event.seq > (this.cursor.get(t) ?? 0)) this.cursor.set(t, f.event.seq);
      } else if (f.type === 'live' && t !== undefined) {
        if (pendingLive.delete(t) && pendingLive.size === 0) {
          this.#opened?.();
          this.#opened = undefined;
          pendingLive = new Set();
        }
      } else if (f.type === 'error') {
        this.errorFrames++;
        this.errorCodes.set(f.code ?? '?', (this.errorCodes.get(f.code ?? '?') ?? 0) + 1);
        if (t !== undefined && f.id !== null) {
          this.#ids.delete(f.id);
          setTimeout(() => {
            if (this.#ws === ws && ws.readyState === WebSocket.OPEN) this.#subscribe(ws, t, gen);
          }, 200);
        }
      }
    });
    ws.on('error', () => undefined);
    ws.on('close', () => {
      if (this.#closed || this.#ws !== ws) return;
      this.reconnects++;
      setTimeout(() => this.#connect(), 100);
    });
  }

  #subscribe(ws: WebSocket, thread: string, gen: number): void {
    const id = `${thread}/${gen}/${Math.random().toString(36).slice(2, 8)}`;
    this.#ids.set(id, thread);
    ws.send(
      JSON.stringify({ type: 'subscribe', id, thread_id: thread, after_seq: this.cursor.get(thread) ?? 0 }),
    );
  }

  close(): void {
    this.#closed = true;
    this.#ws?.terminate();
  }
}

/** A fresh subscriber per thread from seq 0 to its `live` frame; retried on an error. */
export async function catchUp(url: string, threads: readonly string[]): Promise<Map<string, SeenEvent[]>> {
  const out = new Map<string, SeenEvent[]>();
  for (const t of threads) {
    for (let attempt = 0; ; attempt++) {
      try {
        out.set(t, await catchUpOne(url, t));
        break;
      } catch (err) {
        if (attempt >= 20) throw err;
        await sleep(500);
      }
    }
  }
  return out;
}

function catchUpOne(url: string, thread: string): Promise<SeenEvent[]> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    const events: SeenEvent[] = [];
    const timer = setTimeout(() => {
      ws.terminate();
      reject(new Error(`catch-up of ${thread} did not reach live`));
    }, 120_000);
    ws.on('open', () =>
      ws.send(JSON.stringify({ type: 'subscribe', id: 'c', thread_id: thread, after_seq: 0 })),
    );
    ws.on('message', (data) => {
      const f = JSON.parse(data.toString()) as {
        type: string;
        event?: { seq: number; event_id: string; event_type: string; content: unknown };
        message?: string;
      };
      if (f.type === 'event' && f.event) events.push(seen(f.event));
      else if (f.type === 'live' || f.type === 'error') {
        clearTimeout(timer);
        ws.close();
        if (f.type === 'live') resolve(events);
        else reject(new Error(`catch-up error: ${f.message}`));
      }
    });
    ws.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

/** The thread's rows in seq order, as the checker wants them. */
export async function storedRows(db: pg.Pool, thread: string): Promise<SeenEvent[]> {
  const { rows } = await db.query<SeenEvent>(
    'SELECT seq::int AS seq, event_id, event_type, content FROM run_events WHERE thread_id = $1 ORDER BY seq',
    [thread],
  );
  return rows;
}

// ---------------------------------------------------------------------------------------------------------------
// a row

export interface RowContext {
  readonly servers: FaultServers;
  readonly broker: FaultBroker;
  readonly load: Load;
  readonly live: LiveSubscriber;
  /** Records that a fault was cleared now (recovery is measured from here). */
  cleared(): void;
  /** Records a note for the results. */
  note(text: string): void;
  /** Records the broker's highest RSS seen during the fault. */
  peak(mib: number): void;
}

export interface RowOptions {
  readonly row: string;
  readonly injects: string;
  readonly ack: AckLevel;
  readonly threads?: number;
  readonly eventsPerSecond?: number;
  readonly brokerEnv?: Record<string, string>;
  readonly poison?: LoadOptions['poison'];
  /** The broker is replaced by the fault (RSS before/after would compare two processes). */
  readonly brokerReplaced?: boolean;
  /** Load before the fault (default 3 000 ms) and after it (default 4 000 ms). */
  readonly warmMs?: number;
  readonly afterMs?: number;
  readonly inject: (ctx: RowContext) => Promise<void>;
  /** Extra checks once the row is settled (the checker has already passed). */
  readonly verify?: (ctx: RowContext, reports: readonly ThreadReport[]) => Promise<void>;
}

/** Waits until every acked event is stored and each subscriber has its threads' heads; returns the rows. */
export async function settleStored(
  db: pg.Pool,
  acked: ReadonlyMap<string, ReadonlyMap<string, AckedEvent>>,
  subscribers: readonly LiveSubscriber[],
  timeoutMs: number,
): Promise<Map<string, SeenEvent[]>> {
  const deadline = Date.now() + timeoutMs;
  let stored = new Map<string, SeenEvent[]>();
  for (;;) {
    let done = true;
    stored = new Map();
    for (const [t, want] of acked) {
      const rows = await storedRows(db, t).catch(() => [] as SeenEvent[]);
      stored.set(t, rows);
      if (new Set(rows.map((r) => r.event_id)).size < want.size) done = false;
      const head = rows.at(-1)?.seq ?? 0;
      for (const s of subscribers) if (s.cursor.has(t) && (s.cursor.get(t) ?? 0) < head) done = false;
    }
    if (done || Date.now() > deadline) return stored;
    await sleep(250);
  }
}

function appendResult(r: RowResult): void {
  mkdirSync(dirname(RESULTS_PATH), { recursive: true });
  appendFileSync(RESULTS_PATH, `${JSON.stringify(r)}\n`);
}

/** Summarises the checker's reports into a row result, writes it, and asserts 0 everything. */
export function recordRow(
  base: Omit<RowResult, 'faults' | 'acked' | 'stored' | 'delivered' | 'rejected' | 'threads'>,
  reports: readonly ThreadReport[],
  delivered: number,
  extra: { alarms?: readonly string[]; logTail?: string } = {},
): RowResult {
  const faults: Faults = sumFaults(...reports.flatMap((r) => [r.store, r.live, r.catchUp]));
  const result: RowResult = {
    ...base,
    threads: reports.length,
    acked: reports.reduce((n, r) => n + r.acked, 0),
    stored: reports.reduce((n, r) => n + r.stored, 0),
    delivered,
    rejected: reports.reduce((n, r) => n + r.rejected, 0),
    faults,
  };
  appendResult(result);
  const bad = reports.filter((r) => total(r.store) + total(r.live) + total(r.catchUp) > 0);
  assert.equal(
    total(faults),
    0,
    `${base.row}: ${JSON.stringify(faults)}\n${bad
      .map(
        (r) =>
          `${r.thread}: ${JSON.stringify({ store: r.store, live: r.live, catchUp: r.catchUp })}\n  ${r.examples.join('\n  ')}`,
      )
      .join('\n')}\n${extra.logTail ?? ''}`,
  );
  assert.ok(result.acked > 0, `${base.row}: nothing was acked`);
  assert.deepEqual(extra.alarms ?? [], [], `${base.row}: the broker reported a crash`);
  return result;
}

/**
 * One row: servers, a broker, a live subscriber and a producer at a steady rate; the
 * fault; more load; then the checker over acked, stored, live and catch-up.
 */
export async function runRow(o: RowOptions): Promise<RowResult> {
  const started = Date.now();
  await using servers = await startFaultServers();
  await using broker = await FaultBroker.start(servers, o.brokerEnv);
  const threads = Array.from({ length: o.threads ?? 4 }, () => randomName('t-'));
  const live = new LiveSubscriber(broker.wsUrl, threads);
  await live.start();
  const load = new Load({
    target: broker.grpcTarget,
    threads,
    ack: o.ack,
    eventsPerSecond: o.eventsPerSecond ?? 400,
    poison: o.poison,
  }).start();
  const clears: number[] = [];
  const notes: string[] = [];
  let rssPeak: number | undefined;
  const ctx: RowContext = {
    servers,
    broker,
    load,
    live,
    cleared: () => clears.push(Date.now()),
    note: (t) => notes.push(t),
    peak: (mib) => {
      rssPeak = Math.max(rssPeak ?? 0, mib);
    },
  };
  let reports: ThreadReport[] = [];
  let rssBefore: number | undefined;
  let rssAfter: number | undefined;
  try {
    await load.waitForAcks(5);
    await sleep(o.warmMs ?? 3_000);
    rssBefore = broker.rssMiB();
    await o.inject(ctx);
    await sleep(o.afterMs ?? 4_000);
    rssAfter = broker.rssMiB();
  } finally {
    await load.stop();
  }
  const stored = await settleStored(servers.db, load.acked, [live], 90_000);
  const caught = await catchUp(broker.wsUrl, threads);
  live.close();
  reports = threads.map((t) =>
    checkThread({
      thread: t,
      acked: load.acked.get(t) as Map<string, AckedEvent>,
      stored: stored.get(t) ?? [],
      live: (live.delivered.get(t) ?? []).map((d) => d.ev),
      catchUp: caught.get(t) ?? [],
    }),
  );
  const ackRecoveryMs = clears.map((c) => load.ackRecoveryMs(c) ?? -1);
  const deliveryRecoveryMs = clears.map((c) => live.deliveryRecoveryMs(c, load) ?? -1);
  if (live.reconnects > 0) notes.push(`subscriber reconnected ${live.reconnects}×`);
  if (live.errorFrames > 0)
    notes.push(`error frames: ${[...live.errorCodes].map(([c, n]) => `${c}×${n}`).join(', ')}`);
  const result = recordRow(
    {
      row: o.row,
      injects: o.injects,
      ack: o.ack,
      ackRecoveryMs,
      deliveryRecoveryMs,
      ...(o.brokerReplaced ? {} : { rssBeforeMiB: rssBefore, rssAfterMiB: rssAfter, rssPeakMiB: rssPeak }),
      notes: notes.join('; '),
      seconds: Math.round((Date.now() - started) / 1000),
    },
    reports,
    live.deliveredCount(),
    { alarms: broker.alarms, logTail: broker.logTail(40) },
  );
  if (o.verify) await o.verify(ctx, reports);
  if (!o.brokerReplaced) assert.ok(broker.alive(), `${o.row}: the broker exited:\n${broker.logTail()}`);
  return result;
}
