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
 *   `RESOURCE_EXHAUSTED` (but not a request over the broker's size limit), `ABORTED`, `INTERNAL`
 *   and `UNKNOWN`. A refusal that names one event of a batch (`events[i].…`) rejects that
 *   event alone (with those of the same value when the field is judged by value, as `run_id`)
 *   and sends its batch-mates again (the broker stored none of a refused request); any other
 *   refusal rejects the batch.
 * - **Size.** An event over `maxRequestBytes` is rejected by `publish`, never sent, and a
 *   request's events fit in it together.
 * - **Backpressure.** `await publisher.ready()` waits while `maxQueuedEvents` are unacknowledged.
 * - **Streaming mode** (`mode: "stream"`) pipelines requests on one `PublishStream`, reopened and
 *   replayed (same ids) after a failure, and hands the broker's cancel controls to `onControl` /
 *   {@link Publisher.onCancel}.
 */
import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { type BackoffOptions, backoffDelayMs, sleep } from './backoff.js';
import { RunstreamError } from './errors.js';
import { checkBackoff, checkCount, checkMs, invalid } from './options.js';
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
  /**
   * The broker's largest request (its `RS_MAX_GRPC_MESSAGE_BYTES`, 16 MiB by default): an event
   * whose content and metadata would not fit one is refused by `publish` with `invalid_argument`.
   */
  maxRequestBytes?: number;
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
  /**
   * The channel's security. Default: plaintext, as the broker serves gRPC. Behind a
   * TLS-terminating proxy: `grpc.credentials.createSsl()` (or with the proxy's root certificate).
   */
  credentials?: grpc.ChannelCredentials;
}

export const DEFAULT_LINGER_MS = 0;
export const DEFAULT_MAX_BATCH_EVENTS = 500;
export const DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024;
export const DEFAULT_MAX_QUEUED_EVENTS = 10_000;
export const DEFAULT_DEADLINE_MS = 60_000;
export const DEFAULT_MAX_ATTEMPTS = 20;
export const DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024;
/**
 * What an event takes in a request besides its content, metadata and short strings: field tags,
 * lengths, the timestamp, the category, its own framing. And the request's (the ack level).
 */
const EVENT_FRAMING_BYTES = 128;
const REQUEST_FRAMING_BYTES = 16;

const RETRYABLE = new Set([
  grpc.status.UNAVAILABLE,
  grpc.status.DEADLINE_EXCEEDED,
  grpc.status.RESOURCE_EXHAUSTED,
  grpc.status.ABORTED,
  grpc.status.INTERNAL,
  grpc.status.UNKNOWN,
]);

/**
 * A request over a gRPC size limit, with RESOURCE_EXHAUSTED: a server's (grpc-js and gRPC core:
 * `… larger than max (<size> vs. <limit>)`) or this client's `grpc.max_send_message_length`
 * (`Attempted to send message with a size larger than <limit>`). Sending it again cannot
 * succeed, unlike the broker's in-flight budget.
 */
const TOO_LARGE = /larger than max \(\d+ vs\.? (\d+)\)|send message with a size larger than (\d+)/;

function retryable(e: grpc.ServiceError): boolean {
  return (
    RETRYABLE.has(e.code) && !(e.code === grpc.status.RESOURCE_EXHAUSTED && TOO_LARGE.test(e.details ?? ''))
  );
}

/**
 * The fields the broker judges by their value alone (and the token): a refusal about one of them
 * awaits every event with the same value.
 */
const VALUE_CHECKED = new Set([
  'thread_id',
  'run_id',
  'user_id',
  'event_type',
  'category_name',
  'content_json',
  'metadata_json',
  'created_at_text',
] as const);
type ValueChecked = typeof VALUE_CHECKED extends Set<infer F> ? F : never;

/**
 * The events of a request that a refusal is about, when it names one (the broker's
 * `events[i].<field>: …` or `events[i]: …`): that one, and when the field is judged by its value
 * alone ({@link VALUE_CHECKED}), every event with the same value (the same refusal awaits them).
 */
function refusedEvents(err: unknown, events: readonly RawEvent[]): Set<number> | undefined {
  if (!(err instanceof RunstreamError)) return undefined;
  if (err.code !== 'invalid_argument' && err.code !== 'permission_denied') return undefined;
  const m = REFUSED_EVENT.exec(err.message);
  const i = m ? Number(m[1]) : Number.NaN;
  const named = events[i];
  if (named === undefined) return undefined;
  const field = m?.[2] === '.' ? /^\w+/.exec(err.message.slice(m[0].length))?.[0] : undefined;
  if (!VALUE_CHECKED.has(field as ValueChecked)) return new Set([i]);
  const key = field as ValueChecked;
  const refused = new Set<number>();
  events.forEach((e, j) => {
    if (e[key] === named[key]) refused.add(j);
  });
  return refused;
}

/** A refusal naming one event: `events[i].<field>: …` or `events[i]: …`, after `request <n>: ` on a stream. */
const REFUSED_EVENT = /^(?:request \d+: )?events\[(\d+)\](\.|(?=: ))/;

/** An upper bound of the bytes an event's framing and short strings take in a request. */
function framingBytes(e: RawEvent): number {
  const short =
    e.thread_id.length +
    e.run_id.length +
    e.event_type.length +
    e.category_name.length +
    e.event_id.length +
    e.user_id.length +
    (e.created_at_text?.length ?? 0);
  return short * 3 + EVENT_FRAMING_BYTES;
}

/** The bytes an event takes in a request, at most, with its content and metadata counted. */
function exactWireBytes(e: RawEvent): number {
  return Buffer.byteLength(e.content_json) + Buffer.byteLength(e.metadata_json) + framingBytes(e);
}

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
  /** Characters of content and metadata (what `maxBatchBytes` counts). */
  bytes: number;
  /** Bytes it takes in a request, at most: exact once counted ({@link Pending.exact}). */
  wire: number;
  exact: boolean;
  resolve: (a: EventAck) => void;
  reject: (e: Error) => void;
}

interface Flush {
  /** The last event handed over before the flush. */
  upto: number;
  /** Its events not yet settled: those after the previous flush's `upto`. */
  left: number;
  resolve: () => void;
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
  | ((new (
      target: string,
      creds: grpc.ChannelCredentials,
      opts?: grpc.ChannelOptions,
    ) => RawIngest) & { service: grpc.ServiceDefinition })
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
  /**
   * Flushes, in call order (so `upto`, the last event handed over before each, ascends). A flush
   * waits for its own and every earlier one's events; `left` counts the unsettled events after
   * the previous flush's `upto`, so an event settling touches one flush, found by bisection, and
   * flushes resolve in order.
   */
  #flushes: Flush[] = [];
  #closed = false;
  /** The close in progress or done: every `close()` waits for it. */
  #closing: Promise<void> | undefined;
  readonly #abort = new AbortController();
  readonly #maxRequestBytes: number;
  readonly #stream: StreamChannel | undefined;
  readonly #cancelListeners = new Map<string, Set<(c: CancelControl) => void>>();
  /** Unary calls in flight: `abort()` cancels them. */
  readonly #calls = new Set<grpc.ClientUnaryCall>();

  constructor(opts: PublisherOptions) {
    checkOptions(opts);
    this.#opts = opts;
    const Ingest = loadIngest();
    const channelOptions: grpc.ChannelOptions = {
      'grpc.max_send_message_length': 64 * 1024 * 1024,
      'grpc.enable_http_proxy': 0,
      ...opts.channelOptions,
    };
    this.#client = new Ingest(
      opts.target,
      opts.credentials ?? grpc.credentials.createInsecure(),
      channelOptions,
    );
    // The smaller of the broker's limit and this channel's own (-1: none).
    const send = Number(channelOptions['grpc.max_send_message_length']);
    this.#maxRequestBytes = Math.min(
      opts.maxRequestBytes ?? DEFAULT_MAX_REQUEST_BYTES,
      send >= 0 ? send : Number.POSITIVE_INFINITY,
    );
    this.#idPrefix = opts.idPrefix ?? `ev-${randomBytes(6).toString('hex')}`;
    // Every retry's backoff listens on the signal: many threads may wait at once.
    setMaxListeners(0, this.#abort.signal);
    if (opts.mode === 'stream') {
      const method = Ingest.service.PublishStream as grpc.MethodDefinition<RawRequest, RawResponse>;
      const serialize = method.requestSerialize;
      this.#stream = new StreamChannel(
        () => this.#metadata(),
        (md) => this.#client.PublishStream(md),
        (req) => serialize(req).length,
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
    const max = this.#opts.maxQueuedEvents ?? DEFAULT_MAX_QUEUED_EVENTS;
    if (this.#queued >= max) {
      return Promise.reject(
        new RunstreamError(
          'resource_exhausted',
          `maxQueuedEvents: ${max} events are unacknowledged; await ready() before publishing more`,
        ),
      );
    }
    let event: RawEvent;
    let bytes: number;
    let size: { wire: number; exact: boolean } | RunstreamError;
    try {
      event = this.#toRaw(e);
      bytes = event.content_json.length + event.metadata_json.length;
      size = this.#wireSize(event, bytes);
    } catch (err) {
      return Promise.reject(err);
    }
    if (size instanceof RunstreamError) return Promise.reject(size);
    return new Promise<EventAck>((resolve, reject) => {
      let q = this.#threads.get(event.thread_id);
      if (q === undefined) {
        q = { pending: [], bytes: 0, timer: undefined, soon: false, inFlight: false };
        this.#threads.set(event.thread_id, q);
      }
      q.pending.push({ event, n: ++this.#handed, bytes, ...size, resolve, reject });
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
    let earlier = 0;
    for (const f of this.#flushes) earlier += f.left;
    return new Promise((resolve) =>
      this.#flushes.push({ upto: this.#handed, left: this.#queued - earlier, resolve }),
    );
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
    const closed = abortedError();
    for (const q of this.#threads.values()) {
      if (q.timer !== undefined) clearTimeout(q.timer);
      q.timer = undefined;
      const dropped = q.pending.splice(0);
      q.bytes = 0;
      for (const p of dropped) p.reject(closed);
      this.#settled(dropped);
    }
    this.#stream?.abort(closed);
    for (const call of this.#calls) call.cancel();
    this.#client.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #toRaw(e: PublishEvent): RawEvent {
    if (e === null || typeof e !== 'object') throw invalid('event', 'must be an object');
    const raw: RawEvent = {
      thread_id: text(e.threadId, 'threadId'),
      run_id: text(e.runId, 'runId'),
      event_type: text(e.eventType, 'eventType'),
      category: '',
      category_name: text(e.category, 'category'),
      content_json: e.contentJson === undefined ? contentJson(e.content) : text(e.contentJson, 'contentJson'),
      metadata_json:
        e.metadataJson === undefined ? metadataJson(e.metadata) : text(e.metadataJson, 'metadataJson'),
      event_id: e.eventId === undefined ? `${this.#idPrefix}-${++this.#nextId}` : text(e.eventId, 'eventId'),
      user_id: e.userId === undefined ? '' : text(e.userId, 'userId'),
    };
    raw.category = GRPC_CATEGORY.get(raw.category_name) ?? 'CATEGORY_UNSPECIFIED';
    if (e.createdAt !== undefined) {
      const ms = (typeof e.createdAt === 'string' ? new Date(e.createdAt) : e.createdAt).getTime();
      if (Number.isNaN(ms)) throw new RunstreamError('invalid_argument', 'createdAt: not a valid date');
      raw.created_at = { seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1_000_000 };
    }
    if (e.createdAtText !== undefined) {
      if (e.createdAt !== undefined) {
        throw new RunstreamError('invalid_argument', 'createdAtText: cannot be given with createdAt');
      }
      raw.created_at_text = text(e.createdAtText, 'createdAtText');
    }
    return raw;
  }

  /** The most bytes `event` takes in a request, or the refusal of an event no request can carry. */
  #wireSize(event: RawEvent, chars: number): { wire: number; exact: boolean } | RunstreamError {
    const max = this.#requestBudget();
    // A UTF-16 code unit is at most 3 bytes of UTF-8: most events need no count.
    const bound = chars * 3 + framingBytes(event);
    if (bound <= max) return { wire: bound, exact: false };
    const wire = exactWireBytes(event);
    if (wire <= max) return { wire, exact: true };
    const field = event.content_json.length >= event.metadata_json.length ? 'content_json' : 'metadata_json';
    return new RunstreamError(
      'invalid_argument',
      `${field}: the event takes ${wire} bytes, more than a request of the broker carries ` +
        `(maxRequestBytes=${this.#maxRequestBytes})`,
    );
  }

  /** What a request's events may take together. */
  #requestBudget(): number {
    return this.#maxRequestBytes - REQUEST_FRAMING_BYTES;
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
    const budget = this.#requestBudget();
    let n = 0;
    let bytes = 0;
    let wire = 0;
    for (; n < q.pending.length && n < maxEvents; n++) {
      const p = q.pending[n] as Pending;
      if (n > 0 && bytes + p.bytes > maxBytes) break;
      if (n > 0 && wire + p.wire > budget) {
        if (p.exact) break;
        p.wire = exactWireBytes(p.event); // the bound was too coarse to decide: count
        p.exact = true;
        if (wire + p.wire > budget) break;
      }
      bytes += p.bytes;
      wire += p.wire;
    }
    q.bytes -= bytes;
    return q.pending.splice(0, n);
  }

  async #send(thread: string, q: ThreadQueue): Promise<void> {
    if (q.pending.length === 0) return;
    q.inFlight = true;
    let batch = this.#takeBatch(q);
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
      const refused = refusedEvents(err, req.events);
      if (refused === undefined) {
        for (const p of batch) p.reject(err as Error);
      } else {
        // The broker refused these events and stored none: the others go again, first in line.
        const alone = aloneError(err as RunstreamError);
        const again = batch.filter((_p, i) => !refused.has(i));
        for (const i of refused) (batch[i] as Pending).reject(alone);
        if (this.#abort.signal.aborted) {
          const closed = abortedError();
          for (const p of again) p.reject(closed);
        } else {
          q.pending.unshift(...again);
          for (const p of again) q.bytes += p.bytes;
          batch = batch.filter((_p, i) => refused.has(i));
        }
      }
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
    const flushes = this.#flushes;
    if (flushes.length > 0) {
      for (const p of events) {
        // The first flush with upto >= p.n: p is among its events (none if p came after all).
        let lo = 0;
        let hi = flushes.length;
        while (lo < hi) {
          const mid = (lo + hi) >>> 1;
          if ((flushes[mid] as Flush).upto < p.n) lo = mid + 1;
          else hi = mid;
        }
        if (lo < flushes.length) (flushes[lo] as Flush).left--;
      }
      let done = 0;
      while (done < flushes.length && (flushes[done] as Flush).left <= 0) done++;
      for (const f of flushes.splice(0, done)) f.resolve();
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
        if (err instanceof RunstreamError) throw err;
        if (this.#abort.signal.aborted) throw abortedError();
        const e = err as grpc.ServiceError;
        const refresh =
          e.code === grpc.status.UNAUTHENTICATED && this.#opts.getToken !== undefined && !refreshed;
        if (refresh) refreshed = true;
        else if (!retryable(e) || attempt + 1 >= maxAttempts || this.#abort.signal.aborted) throw toError(e);
        const delayMs = refresh ? 0 : backoffDelayMs(attempt, retry);
        if (!refresh) {
          const onRetry = this.#opts.onRetry;
          if (onRetry) safely('onRetry', () => onRetry(toError(e), attempt + 1, delayMs));
        }
        await sleep(delayMs, this.#abort.signal);
      }
    }
  }

  async #unary(req: RawRequest): Promise<RawAck[]> {
    const md = await this.#metadata();
    // Aborted meanwhile: the channel is closed, and grpc-js would throw a bare Error.
    if (this.#abort.signal.aborted) throw abortedError();
    const deadline = Date.now() + (this.#opts.deadlineMs ?? DEFAULT_DEADLINE_MS);
    return new Promise((resolve, reject) => {
      const call = this.#client.Publish(req, md, { deadline }, (err, res) => {
        this.#calls.delete(call);
        if (err) reject(err);
        else resolve(res?.acks ?? []);
      });
      this.#calls.add(call);
    });
  }

  async #metadata(): Promise<grpc.Metadata> {
    const md = new grpc.Metadata();
    let token = this.#opts.token;
    if (this.#opts.getToken) {
      try {
        token = await this.#opts.getToken();
      } catch (err) {
        throw new RunstreamError('unauthenticated', `getToken: ${messageOf(err)}`, { cause: err });
      }
    }
    if (token) md.set('authorization', `Bearer ${token}`);
    return md;
  }

  #dispatchControl(c: CancelControl): void {
    const onControl = this.#opts.onControl;
    if (onControl) safely('onControl', () => onControl(c));
    for (const l of this.#cancelListeners.get(`${c.threadId}\u0000${c.runId}`) ?? []) {
      safely('an onCancel listener', () => l(c));
    }
  }
}

/**
 * A string field of an event, checked: a string, and well-formed UTF-16 (a lone surrogate has no
 * UTF-8, so it could only be sent as bytes the broker refuses, or stored changed).
 */
function text(value: unknown, field: string): string {
  if (typeof value !== 'string') throw invalid(field, `must be a string, not ${describe(value)}`);
  if (!value.isWellFormed())
    throw invalid(field, 'contains a lone UTF-16 surrogate, which UTF-8 cannot carry');
  return value;
}

/** `content` as JSON text: `null` when absent. */
function contentJson(content: unknown): string {
  const json = stringify(content === undefined ? null : content, 'content');
  if (json === undefined) throw invalid('content', `cannot be sent as JSON: ${describe(content)}`);
  return json;
}

/** `metadata` as JSON text of an object, or '' when absent. */
function metadataJson(metadata: unknown): string {
  if (metadata === undefined) return '';
  if (metadata === null || typeof metadata !== 'object' || Array.isArray(metadata)) {
    throw invalid('metadata', `must be an object, not ${describe(metadata)}`);
  }
  const json = stringify(metadata, 'metadata');
  if (json === undefined || !json.startsWith('{'))
    throw invalid('metadata', 'does not serialise to a JSON object');
  return json;
}

function stringify(value: unknown, field: string): string | undefined {
  try {
    return JSON.stringify(value);
  } catch (err) {
    throw invalid(field, `cannot be sent as JSON: ${messageOf(err)}`);
  }
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'undefined' ? 'undefined' : `a ${typeof value}`;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Calls a caller's callback. What it throws changes nothing for the events (they are the
 * publisher's to settle) and is reported as a process warning, never thrown into gRPC's event
 * handlers, where it would end the process.
 */
function safely(what: string, callback: () => void): void {
  try {
    callback();
  } catch (err) {
    warn(what, err);
  }
}

function warn(what: string, err: unknown): void {
  const warning = new Error(`${what} threw: ${messageOf(err)}`, { cause: err });
  warning.name = 'RunstreamPublisherWarning';
  process.emitWarning(warning);
}

const counts = ['maxBatchEvents', 'maxBatchBytes', 'maxRequestBytes', 'maxQueuedEvents'] as const;

/** The options a publisher can work with, or a refusal naming the first that it cannot. */
function checkOptions(o: PublisherOptions): void {
  if (o === null || typeof o !== 'object') throw invalid('options', 'must be an object');
  if (typeof o.target !== 'string' || o.target === '') throw invalid('target', 'must be host:port');
  for (const name of counts) checkCount(o[name], name, 1, true);
  checkMs(o.lingerMs, 'lingerMs', { max: Number.MAX_VALUE });
  // A deadline, and the stream's stall timer, is a timer.
  checkMs(o.deadlineMs, 'deadlineMs', { above: true });
  checkCount(o.retry?.maxAttempts, 'retry.maxAttempts', 1, true);
  checkBackoff(o.retry, 'retry');
  if (o.ack !== undefined && o.ack !== 'ACCEPTED' && o.ack !== 'PERSISTED') {
    throw invalid('ack', `must be ACCEPTED or PERSISTED, not ${String(o.ack)}`);
  }
  if (o.mode !== undefined && o.mode !== 'unary' && o.mode !== 'stream') {
    throw invalid('mode', `must be unary or stream, not ${String(o.mode)}`);
  }
}

function abortedError(): RunstreamError {
  return new RunstreamError('closed', 'the publisher was aborted');
}

/**
 * A refusal naming an event of a batch ({@link REFUSED_EVENT}), as the error of that event alone:
 * `<field>: …`, or `event: …` when it names no field.
 */
function aloneError(err: RunstreamError): RunstreamError {
  const message = err.message.replace(REFUSED_EVENT, (_all, _i, dot) => (dot === '.' ? '' : 'event'));
  return new RunstreamError(err.code, message, { cause: err });
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
    /** A request's size on the wire, to find the one a size limit refused. */
    readonly sizeOf: (req: RawRequest) => number,
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
      let md: grpc.Metadata;
      try {
        md = await this.metadata();
      } catch (err) {
        // No stream without its token: what waits for one fails; the next send tries again.
        this.#opening = undefined;
        for (const r of this.#unanswered.splice(0)) r.reject(err as Error);
        this.#watch(true);
        return;
      }
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
      call.on('error', (err: grpc.ServiceError) => this.#afterFailure(call, err));
      call.on('end', () => {
        if (this.#call === call && this.#unanswered.length > 0 && !this.#closed) {
          this.#afterFailure(
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

  /** {@link StreamChannel.#failed}, from an event handler: whatever it throws is reported, never thrown. */
  #afterFailure(call: grpc.ClientDuplexStream<RawRequest, RawResponse>, err: grpc.ServiceError): void {
    this.#failed(call, err).catch((e: unknown) => warn('the publish stream', e));
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
    if (!retryable(err) && err.code !== grpc.status.CANCELLED) {
      // The broker refused the first unanswered request (the ones after it may not have been
      // read), or gRPC one too large, which need not be the first.
      const [refused] = this.#unanswered.splice(this.#tooLarge(err), 1);
      refused?.reject(toError(err));
    } else if (++this.#attempt >= maxAttempts) {
      for (const r of this.#unanswered.splice(0)) r.reject(toError(err));
      return;
    }
    if (this.#unanswered.length === 0) return;
    const delayMs = backoffDelayMs(this.#attempt, this.retry);
    const onRetry = this.onRetry;
    const attempt = this.#attempt;
    if (onRetry) safely('onRetry', () => onRetry(toError(err), attempt, delayMs));
    await sleep(delayMs, this.signal);
    if (this.signal.aborted) return;
    if (!this.#call) await this.#ensureOpen();
    this.#watch(true);
  }

  /** Which unanswered request a size refusal ({@link TOO_LARGE}) is about: the first over its limit; 0 if none. */
  #tooLarge(err: grpc.ServiceError): number {
    const m = TOO_LARGE.exec(err.details ?? '');
    if (err.code !== grpc.status.RESOURCE_EXHAUSTED || !m) return 0;
    const limit = Number(m[1] ?? m[2]);
    return Math.max(
      0,
      this.#unanswered.findIndex((r) => this.sizeOf(r.req) > limit),
    );
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
