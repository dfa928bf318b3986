/**
 * A batching, retrying producer over gRPC `runstream.v1.Ingest` (Node only).
 *
 * - **Stable ids.** Every event gets its `event_id` when it is handed to {@link Publisher.publish}
 *   (the caller's, or `<prefix>-<n>`), so every retry carries the same ids and the broker stores
 *   each event once (docs/protocol.md §5).
 * - **Batching.** A thread's events go as one request: those handed over in one tick, and those
 *   that came while its previous request was out; with `lingerMs`, also those within that many
 *   ms (or until `maxBatchEvents` / `maxBatchBytes`).
 * - **Order.** A thread has at most one request in flight; the next waits for its answer, so a
 *   retried batch lands before anything sent after it and a thread's seq order is publish order.
 * - **Retries** with exponential backoff and jitter on `UNAVAILABLE`, `DEADLINE_EXCEEDED`,
 *   `RESOURCE_EXHAUSTED`, `ABORTED`, `INTERNAL` and `UNKNOWN`; a refusal (`INVALID_ARGUMENT`,
 *   `PERMISSION_DENIED`, …) rejects that batch's promises.
 * - **Backpressure.** `await publisher.ready()` waits while `maxQueuedEvents` are unacknowledged.
 * - **Streaming mode** (`mode: "stream"`) pipelines requests on one `PublishStream`, reopened and
 *   replayed (same ids) after a failure, and hands the broker's cancel controls to `onControl` /
 *   {@link Publisher.onCancel}.
 */
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { type BackoffOptions, backoffDelayMs, sleep } from './backoff.js';
import { RunstreamError } from './errors.js';
import type { Category } from './types.js';

export type AckLevel = 'ACCEPTED' | 'PERSISTED';

/** One event to publish. `content` is serialised with JSON.stringify unless `contentJson` is given. */
export interface PublishEvent {
  threadId: string;
  runId: string;
  eventType: string;
  category: Category;
  content?: unknown;
  /** The content as JSON text, sent as is (its whitespace and key order are kept). */
  contentJson?: string;
  metadata?: Record<string, unknown>;
  metadataJson?: string;
  /** Unique within the thread. Default: `<idPrefix>-<n>`, fixed before the first send. */
  eventId?: string;
  /** Default: the broker's receive time. Kept at millisecond precision. */
  createdAt?: Date | string;
  /**
   * The time as ISO 8601 text, returned by the broker exactly as given (instead of
   * `createdAt`, not with it).
   */
  createdAtText?: string;
  userId?: string;
}

export interface EventAck {
  eventId: string;
  duplicate: boolean;
  /** 0 at ACCEPTED. */
  seq: number;
  offset: number;
  /** PERSISTED only: why the store refused the event; empty otherwise. */
  rejected: string;
}

export interface CancelControl {
  threadId: string;
  runId: string;
  reason: string;
  eventId: string;
  requestedBy: string;
}

export interface PublisherOptions {
  /** `host:port` of the broker's gRPC port. */
  target: string;
  token?: string;
  /** Called before every call; wins over `token`. A refused token is refreshed once per batch. */
  getToken?: () => string | Promise<string>;
  ack?: AckLevel;
  /**
   * How long an event waits for others of its thread before its batch goes. 0 (the default): no
   * timer; the events of a thread handed over in one tick go together as soon as the thread has
   * no request out, and those that come while one is out go together after it, so batches grow
   * only when the broker's answers slow down.
   */
  lingerMs?: number;
  maxBatchEvents?: number;
  /** Of content and metadata text. */
  maxBatchBytes?: number;
  /** `ready()` waits while this many events are unacknowledged. */
  maxQueuedEvents?: number;
  retry?: BackoffOptions & { maxAttempts?: number };
  /** Per call. Keep it above the broker's PERSISTED wait (30 s). */
  deadlineMs?: number;
  mode?: 'unary' | 'stream';
  /** Streaming mode: every control message (today: cancels). */
  onControl?: (cancel: CancelControl) => void;
  /** Called before each retry, with the error that caused it. */
  onRetry?: (err: RunstreamError, attempt: number, delayMs: number) => void;
  /** Prefix of generated event ids. Default: random per publisher. */
  idPrefix?: string;
  /** gRPC channel options. */
  channelOptions?: grpc.ChannelOptions;
}

export const DEFAULT_LINGER_MS = 0;
export const DEFAULT_MAX_BATCH_EVENTS = 500;
export const DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024;
export const DEFAULT_MAX_QUEUED_EVENTS = 10_000;
export const DEFAULT_DEADLINE_MS = 60_000;
export const DEFAULT_MAX_ATTEMPTS = 20;

const RETRYABLE = new Set([
  grpc.status.UNAVAILABLE,
  grpc.status.DEADLINE_EXCEEDED,
  grpc.status.RESOURCE_EXHAUSTED,
  grpc.status.ABORTED,
  grpc.status.INTERNAL,
  grpc.status.UNKNOWN,
]);

/** The enum of the three known categories; any other goes by name only. */
const GRPC_CATEGORY: ReadonlyMap<string, string> = new Map([
  ['message', 'MESSAGE'],
  ['trace', 'TRACE'],
  ['lifecycle', 'LIFECYCLE'],
]);

interface RawEvent {
  thread_id: string;
  run_id: string;
  event_type: string;
  category: string;
  category_name: string;
  content_json: string;
  metadata_json: string;
  event_id: string;
  user_id: string;
  created_at?: { seconds: number; nanos: number };
  created_at_text?: string;
}
interface RawAck {
  event_id: string;
  duplicate: boolean;
  seq: number;
  offset: number;
  rejected: string;
}
interface RawResponse {
  acks: RawAck[];
  control?: {
    cancel?: { thread_id: string; run_id: string; reason: string; event_id: string; requested_by: string };
  } | null;
}
interface RawRequest {
  events: RawEvent[];
  ack: AckLevel;
}
interface RawIngest extends grpc.Client {
  Publish(
    req: RawRequest,
    md: grpc.Metadata,
    opts: grpc.CallOptions,
    cb: (err: grpc.ServiceError | null, res?: RawResponse) => void,
  ): grpc.ClientUnaryCall;
  PublishStream(md: grpc.Metadata): grpc.ClientDuplexStream<RawRequest, RawResponse>;
}

interface Pending {
  event: RawEvent;
  /** Its place in publish order (1, 2, …): a flush waits for those up to its own. */
  n: number;
  bytes: number;
  resolve: (a: EventAck) => void;
  reject: (e: Error) => void;
}

interface ThreadQueue {
  pending: Pending[];
  bytes: number;
  timer: ReturnType<typeof setTimeout> | undefined;
  /** No linger: a send is queued as a microtask, after the events handed over in this tick. */
  soon: boolean;
  inFlight: boolean;
}

const PROTO_DIR = fileURLToPath(new URL('../proto/', import.meta.url));
let ingestCtor:
  | (new (
      target: string,
      creds: grpc.ChannelCredentials,
      opts?: grpc.ChannelOptions,
    ) => RawIngest)
  | undefined;

function loadIngest(): NonNullable<typeof ingestCtor> {
  if (ingestCtor === undefined) {
    const def = protoLoader.loadSync(['runstream/v1/runstream.proto'], {
      keepCase: true,
      longs: Number,
      enums: String,
      defaults: true,
      oneofs: true,
      includeDirs: [PROTO_DIR],
    });
    const pkg = grpc.loadPackageDefinition(def) as unknown as {
      runstream: { v1: { Ingest: NonNullable<typeof ingestCtor> } };
    };
    ingestCtor = pkg.runstream.v1.Ingest;
  }
  return ingestCtor;
}

export class Publisher implements AsyncDisposable {
  readonly #opts: PublisherOptions;
  readonly #client: RawIngest;
  readonly #threads = new Map<string, ThreadQueue>();
  readonly #idPrefix: string;
  #nextId = 0;
  #queued = 0;
  #spaceWaiters: (() => void)[] = [];
  /** Events handed over so far: the last one's `n`. */
  #handed = 0;
  /** Flushes waiting for the events handed over before them (`upto`): `left` not yet settled. */
  #flushes: { upto: number; left: number; resolve: () => void }[] = [];
  #closed = false;
  /** The close in progress or done: every `close()` waits for it. */
  #closing: Promise<void> | undefined;
  readonly #abort = new AbortController();
  readonly #stream: StreamChannel | undefined;
  readonly #cancelListeners = new Map<string, Set<(c: CancelControl) => void>>();

  constructor(opts: PublisherOptions) {
    this.#opts = opts;
    const Ingest = loadIngest();
    this.#client = new Ingest(opts.target, grpc.credentials.createInsecure(), {
      'grpc.max_send_message_length': 64 * 1024 * 1024,
      'grpc.enable_http_proxy': 0,
      ...opts.channelOptions,
    });
    this.#idPrefix = opts.idPrefix ?? `ev-${randomBytes(6).toString('hex')}`;
    if (opts.mode === 'stream') {
      this.#stream = new StreamChannel(
        () => this.#metadata(),
        (md) => this.#client.PublishStream(md),
        (c) => this.#dispatchControl(c),
        opts.retry ?? {},
        this.#abort.signal,
        opts.onRetry,
        opts.deadlineMs ?? DEFAULT_DEADLINE_MS,
      );
    }
  }

  /** Events handed over and not yet acknowledged (or failed). */
  get queued(): number {
    return this.#queued;
  }

  /**
   * Queues one event; resolves with its ack once its batch is acknowledged at the ack level.
   * The event id is fixed now, so every retry sends the same one.
   */
  publish(e: PublishEvent): Promise<EventAck> {
    if (this.#closed) return Promise.reject(new RunstreamError('closed', 'the publisher is closed'));
    let event: RawEvent;
    try {
      event = this.#toRaw(e);
    } catch (err) {
      return Promise.reject(err);
    }
    const bytes = event.content_json.length + event.metadata_json.length;
    return new Promise<EventAck>((resolve, reject) => {
      let q = this.#threads.get(event.thread_id);
      if (q === undefined) {
        q = { pending: [], bytes: 0, timer: undefined, soon: false, inFlight: false };
        this.#threads.set(event.thread_id, q);
      }
      q.pending.push({ event, n: ++this.#handed, bytes, resolve, reject });
      q.bytes += bytes;
      this.#queued++;
      this.#schedule(event.thread_id, q);
    });
  }

  /** Publishes several events; resolves with their acks in order. */
  publishMany(events: readonly PublishEvent[]): Promise<EventAck[]> {
    return Promise.all(events.map((e) => this.publish(e)));
  }

  /** Resolves when fewer than `maxQueuedEvents` events are unacknowledged. */
  ready(): Promise<void> {
    if (this.#queued < (this.#opts.maxQueuedEvents ?? DEFAULT_MAX_QUEUED_EVENTS)) return Promise.resolve();
    return new Promise((resolve) => this.#spaceWaiters.push(resolve));
  }

  /**
   * Sends what lingers now and resolves when every event handed over before this call is
   * acknowledged or failed (events published after it are not waited for).
   */
  flush(): Promise<void> {
    for (const [thread, q] of this.#threads) {
      if (q.timer !== undefined) clearTimeout(q.timer);
      q.timer = undefined;
      this.#sendIfIdle(thread, q);
    }
    // Every event not yet settled was handed over before this call.
    if (this.#queued === 0) return Promise.resolve();
    return new Promise((resolve) => this.#flushes.push({ upto: this.#handed, left: this.#queued, resolve }));
  }

  /** Streaming mode: calls `listener` on each cancel for this run; returns the function that removes it. */
  onCancel(threadId: string, runId: string, listener: (c: CancelControl) => void): () => void {
    const key = `${threadId}\u0000${runId}`;
    const set = this.#cancelListeners.get(key) ?? new Set();
    set.add(listener);
    this.#cancelListeners.set(key, set);
    return () => set.delete(listener);
  }

  /** Flushes, then closes the channel. Idempotent: a second call waits for the first. */
  close(): Promise<void> {
    if (this.#closing === undefined) {
      if (this.#closed) return Promise.resolve(); // aborted
      this.#closed = true;
      this.#closing = this.#shutDown();
    }
    return this.#closing;
  }

  async #shutDown(): Promise<void> {
    await this.flush();
    this.#abort.abort();
    await this.#stream?.close();
    this.#client.close();
  }

  /**
   * Stops at once: events not yet acknowledged are rejected with `closed`, retries stop, the
   * channel closes. Events already in the log stay there. Idempotent.
   */
  abort(): void {
    this.#closed = true;
    if (this.#abort.signal.aborted) return;
    this.#abort.abort();
    const closed = new RunstreamError('closed', 'the publisher was aborted');
    for (const q of this.#threads.values()) {
      if (q.timer !== undefined) clearTimeout(q.timer);
      q.timer = undefined;
      const dropped = q.pending.splice(0);
      q.bytes = 0;
      for (const p of dropped) p.reject(closed);
      this.#settled(dropped);
    }
    this.#stream?.abort(closed);
    this.#client.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #toRaw(e: PublishEvent): RawEvent {
    const raw: RawEvent = {
      thread_id: e.threadId,
      run_id: e.runId,
      event_type: e.eventType,
      category: GRPC_CATEGORY.get(e.category) ?? 'CATEGORY_UNSPECIFIED',
      category_name: e.category,
      content_json: e.contentJson ?? JSON.stringify(e.content === undefined ? null : e.content),
      metadata_json: e.metadataJson ?? (e.metadata === undefined ? '' : JSON.stringify(e.metadata)),
      event_id: e.eventId ?? `${this.#idPrefix}-${++this.#nextId}`,
      user_id: e.userId ?? '',
    };
    if (e.createdAt !== undefined) {
      const ms = (typeof e.createdAt === 'string' ? new Date(e.createdAt) : e.createdAt).getTime();
      if (Number.isNaN(ms)) throw new RunstreamError('invalid_argument', 'createdAt: not a valid date');
      raw.created_at = { seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1_000_000 };
    }
    if (e.createdAtText !== undefined) {
      if (e.createdAt !== undefined) {
        throw new RunstreamError('invalid_argument', 'createdAtText: cannot be given with createdAt');
      }
      raw.created_at_text = e.createdAtText;
    }
    return raw;
  }

  #schedule(thread: string, q: ThreadQueue): void {
    if (q.inFlight) return;
    const full =
      q.pending.length >= (this.#opts.maxBatchEvents ?? DEFAULT_MAX_BATCH_EVENTS) ||
      q.bytes >= (this.#opts.maxBatchBytes ?? DEFAULT_MAX_BATCH_BYTES);
    const lingerMs = this.#opts.lingerMs ?? DEFAULT_LINGER_MS;
    if (!full && lingerMs <= 0) {
      // No timer: the events handed over in this tick go as one request once it ends, and those
      // that come while a request is out go together after it.
      if (!q.soon) {
        q.soon = true;
        queueMicrotask(() => {
          q.soon = false;
          this.#sendIfIdle(thread, q);
        });
      }
      return;
    }
    if (full) {
      if (q.timer !== undefined) clearTimeout(q.timer);
      q.timer = undefined;
      void this.#send(thread, q);
      return;
    }
    if (q.timer === undefined) {
      q.timer = setTimeout(() => {
        q.timer = undefined;
        this.#sendIfIdle(thread, q);
      }, lingerMs);
    }
  }

  /** Sends the thread's waiting events unless a request of it is out (its answer sends them). */
  #sendIfIdle(thread: string, q: ThreadQueue): void {
    if (!q.inFlight) void this.#send(thread, q);
  }

  #takeBatch(q: ThreadQueue): Pending[] {
    const maxEvents = this.#opts.maxBatchEvents ?? DEFAULT_MAX_BATCH_EVENTS;
    const maxBytes = this.#opts.maxBatchBytes ?? DEFAULT_MAX_BATCH_BYTES;
    let n = 0;
    let bytes = 0;
    while (n < q.pending.length && n < maxEvents) {
      const b = q.pending[n]?.bytes ?? 0;
      if (n > 0 && bytes + b > maxBytes) break;
      bytes += b;
      n++;
    }
    q.bytes -= bytes;
    return q.pending.splice(0, n);
  }

  async #send(thread: string, q: ThreadQueue): Promise<void> {
    if (q.pending.length === 0) return;
    q.inFlight = true;
    const batch = this.#takeBatch(q);
    const req: RawRequest = { events: batch.map((p) => p.event), ack: this.#opts.ack ?? 'ACCEPTED' };
    try {
      const acks = await this.#deliver(req);
      batch.forEach((p, i) => {
        const a = acks[i];
        if (a === undefined)
          p.reject(new RunstreamError('internal', 'the broker answered with fewer acks than events'));
        else
          p.resolve({
            eventId: a.event_id,
            duplicate: a.duplicate,
            seq: a.seq,
            offset: a.offset,
            rejected: a.rejected,
          });
      });
    } catch (err) {
      for (const p of batch) p.reject(err as Error);
    } finally {
      q.inFlight = false;
      this.#settled(batch);
    }
    if (q.pending.length > 0) void this.#send(thread, q);
    else if (q.timer === undefined && !q.soon) this.#threads.delete(thread);
  }

  /** `events` were acknowledged or failed: wakes the flushes waiting for them, and `ready()`. */
  #settled(events: readonly Pending[]): void {
    this.#queued -= events.length;
    if (this.#flushes.length > 0) {
      for (const f of this.#flushes) for (const p of events) if (p.n <= f.upto) f.left--;
      const done = this.#flushes.filter((f) => f.left <= 0);
      if (done.length > 0) {
        this.#flushes = this.#flushes.filter((f) => f.left > 0);
        for (const f of done) f.resolve();
      }
    }
    const max = this.#opts.maxQueuedEvents ?? DEFAULT_MAX_QUEUED_EVENTS;
    while (this.#queued < max && this.#spaceWaiters.length > 0) this.#spaceWaiters.shift()?.();
  }

  /** One request, retried until acknowledged, refused, or out of attempts. */
  async #deliver(req: RawRequest): Promise<RawAck[]> {
    if (this.#stream) return this.#stream.send(req);
    const retry = this.#opts.retry ?? {};
    const maxAttempts = retry.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
    let refreshed = false;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#unary(req);
      } catch (err) {
        const e = err as grpc.ServiceError;
        const refresh =
          e.code === grpc.status.UNAUTHENTICATED && this.#opts.getToken !== undefined && !refreshed;
        if (refresh) refreshed = true;
        else if (!RETRYABLE.has(e.code) || attempt + 1 >= maxAttempts || this.#abort.signal.aborted)
          throw toError(e);
        const delayMs = refresh ? 0 : backoffDelayMs(attempt, retry);
        if (!refresh) this.#opts.onRetry?.(toError(e), attempt + 1, delayMs);
        await sleep(delayMs, this.#abort.signal);
      }
    }
  }

  async #unary(req: RawRequest): Promise<RawAck[]> {
    const md = await this.#metadata();
    const deadline = Date.now() + (this.#opts.deadlineMs ?? DEFAULT_DEADLINE_MS);
    return new Promise((resolve, reject) => {
      this.#client.Publish(req, md, { deadline }, (err, res) =>
        err ? reject(err) : resolve(res?.acks ?? []),
      );
    });
  }

  async #metadata(): Promise<grpc.Metadata> {
    const md = new grpc.Metadata();
    const token = this.#opts.getToken ? await this.#opts.getToken() : this.#opts.token;
    if (token) md.set('authorization', `Bearer ${token}`);
    return md;
  }

  #dispatchControl(c: CancelControl): void {
    this.#opts.onControl?.(c);
    for (const l of this.#cancelListeners.get(`${c.threadId}\u0000${c.runId}`) ?? []) l(c);
  }
}

function toError(e: grpc.ServiceError): RunstreamError {
  const name = grpc.status[e.code] ?? String(e.code);
  return new RunstreamError(name.toLowerCase(), e.details || e.message, { cause: e });
}

interface StreamRequest {
  req: RawRequest;
  resolve: (acks: RawAck[]) => void;
  reject: (e: Error) => void;
}

/**
 * One PublishStream at a time. Requests are written in order and answered in order; after a
 * failure the stream is reopened and every unanswered request is written again (same ids).
 * The broker ends a stream at the first request it refuses: that one is rejected, the rest resent.
 */
class StreamChannel {
  readonly #unanswered: StreamRequest[] = [];
  #call: grpc.ClientDuplexStream<RawRequest, RawResponse> | undefined;
  #opening: Promise<void> | undefined;
  #attempt = 0;
  #closed = false;

  constructor(
    readonly metadata: () => Promise<grpc.Metadata>,
    readonly open: (md: grpc.Metadata) => grpc.ClientDuplexStream<RawRequest, RawResponse>,
    readonly onControl: (c: CancelControl) => void,
    readonly retry: BackoffOptions & { maxAttempts?: number },
    readonly signal: AbortSignal,
    readonly onRetry: ((err: RunstreamError, attempt: number, delayMs: number) => void) | undefined,
    /** A stream whose oldest request waits this long is given up on (cancelled) and replayed. */
    readonly stallMs: number,
  ) {}

  #stallTimer: ReturnType<typeof setTimeout> | undefined;

  send(req: RawRequest): Promise<RawAck[]> {
    return new Promise((resolve, reject) => {
      this.#unanswered.push({ req, resolve, reject });
      if (this.#call) this.#call.write(req);
      else void this.#ensureOpen();
      this.#watch();
    });
  }

  /** (Re)arms the stall timer for the oldest unanswered request. */
  #watch(restart = false): void {
    if (restart && this.#stallTimer !== undefined) {
      clearTimeout(this.#stallTimer);
      this.#stallTimer = undefined;
    }
    if (this.#unanswered.length === 0 || this.#stallTimer !== undefined || this.#closed) return;
    this.#stallTimer = setTimeout(() => {
      this.#stallTimer = undefined;
      this.#call?.cancel();
    }, this.stallMs);
  }

  #ensureOpen(): Promise<void> {
    this.#opening ??= (async () => {
      const md = await this.metadata();
      if (this.#closed) {
        this.#opening = undefined;
        return;
      }
      const call = this.open(md);
      this.#call = call;
      call.on('data', (res: RawResponse) => {
        const c = res.control?.cancel;
        if (c) {
          this.onControl({
            threadId: c.thread_id,
            runId: c.run_id,
            reason: c.reason,
            eventId: c.event_id,
            requestedBy: c.requested_by,
          });
          return;
        }
        this.#attempt = 0;
        this.#unanswered.shift()?.resolve(res.acks);
        this.#watch(true);
      });
      call.on('error', (err: grpc.ServiceError) => void this.#failed(call, err));
      call.on('end', () => {
        if (this.#call === call && this.#unanswered.length > 0 && !this.#closed) {
          void this.#failed(
            call,
            Object.assign(new Error('stream ended'), { code: grpc.status.UNAVAILABLE }) as grpc.ServiceError,
          );
        }
      });
      for (const r of this.#unanswered) call.write(r.req);
      this.#opening = undefined;
    })();
    return this.#opening;
  }

  async #failed(
    call: grpc.ClientDuplexStream<RawRequest, RawResponse>,
    err: grpc.ServiceError,
  ): Promise<void> {
    if (this.#call !== call) return;
    this.#call = undefined;
    if (this.#closed || this.signal.aborted) {
      for (const r of this.#unanswered.splice(0)) r.reject(toError(err));
      return;
    }
    const maxAttempts = this.retry.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
    if (!RETRYABLE.has(err.code) && err.code !== grpc.status.CANCELLED) {
      // The broker refused the first unanswered request; the ones after it may not have been read.
      this.#unanswered.shift()?.reject(toError(err));
    } else if (++this.#attempt >= maxAttempts) {
      for (const r of this.#unanswered.splice(0)) r.reject(toError(err));
      return;
    }
    if (this.#unanswered.length === 0) return;
    const delayMs = backoffDelayMs(this.#attempt, this.retry);
    this.onRetry?.(toError(err), this.#attempt, delayMs);
    await sleep(delayMs, this.signal);
    if (this.signal.aborted) return;
    if (!this.#call) await this.#ensureOpen();
    this.#watch(true);
  }

  /** Cancels the call and rejects every unanswered request. */
  abort(err: Error): void {
    this.#closed = true;
    if (this.#stallTimer !== undefined) clearTimeout(this.#stallTimer);
    const call = this.#call;
    this.#call = undefined;
    call?.cancel();
    for (const r of this.#unanswered.splice(0)) r.reject(err);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#stallTimer !== undefined) clearTimeout(this.#stallTimer);
    const call = this.#call;
    this.#call = undefined;
    if (!call) return;
    await new Promise<void>((resolve) => {
      call.once('end', () => resolve());
      call.once('error', () => resolve());
      call.once('close', () => resolve());
      call.end();
    });
  }
}
