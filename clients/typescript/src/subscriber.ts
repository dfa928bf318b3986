/**
 * A resuming subscriber over WebSocket `/v1/ws`, for browsers and Node.
 *
 * It holds one subscription on its own connection and keeps its cursor: the last seq the
 * broker delivered *or skipped* (events, chat frames, `live`, the `seq` of error frames and the
 * `cursors` of slow-consumer and token-expiry frames). When the connection drops, the broker
 * restarts, or the broker cuts it off (1001, 4001, 4008, 1013, 1006), it reconnects with
 * exponential backoff and full jitter and resubscribes with `after_seq` = cursor and the same
 * filters, so nothing is lost, nothing is replayed that a filter had skipped, and no seq is
 * yielded twice. The resume rules are docs/clients.md; the frames are docs/protocol.md §9.
 */
import { type BackoffOptions, backoffDelayMs, sleep } from './backoff.js';
import { RETRYABLE_SUBSCRIPTION_CODES, RunstreamError } from './errors.js';
import { HistoryClient } from './history.js';
import { checkBackoff, checkCount, checkMs, invalid } from './options.js';
import type { Category, ChatFrame, RunStatus, WireEvent } from './types.js';

/**
 * What the subscriber needs of a WebSocket: the browser's `WebSocket`, Node 22's global, or the
 * `ws` package's class (`import WebSocket from 'ws'`) all fit. Handlers take `never` so that any
 * implementation's own event types are accepted.
 */
export interface WebSocketLike {
  readonly readyState: number;
  onopen: ((ev: never) => void) | null;
  onmessage: ((ev: never) => void) | null;
  onclose: ((ev: never) => void) | null;
  onerror: ((ev: never) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

export interface SubscribeOptions {
  /** The broker's WebSocket endpoint, e.g. `ws://127.0.0.1:8080/v1/ws`. */
  url: string;
  /**
   * `long-poll`: for networks whose proxies break WebSocket and streaming responses, poll the
   * events route with `wait_ms` (docs/protocol.md §14) under the same cursor rules. No chat
   * view and no `fromOffset`; a thread's deletion is not seen (a run's is).
   */
  transport?: 'websocket' | 'long-poll';
  /** Long-poll: the HTTP base. Default: `url` with ws→http and the path dropped. */
  httpUrl?: string;
  /** Long-poll: how long one poll may wait, ≤ 60 000. */
  pollWaitMs?: number;
  /** Long-poll: the fetch implementation. Default: `globalThis.fetch`. */
  fetch?: typeof fetch;
  threadId: string;
  /** Deliver seq > afterSeq. Default 0: the whole thread. */
  afterSeq?: number;
  /** Start at the thread's head (no history). Only for the first connection: resumes use the cursor. */
  liveOnly?: boolean;
  /** Start at a JetStream offset. Only for the first connection: resumes use the cursor. */
  fromOffset?: number;
  /** Only this run; the subscription ends after the run's terminal event. */
  runId?: string;
  categories?: readonly Category[];
  eventTypes?: readonly string[];
  /** `chat` delivers the live chat view (chat items) instead of events. */
  view?: 'events' | 'chat';
  /** A JWT, sent as `?access_token=` (browsers cannot set headers on a WebSocket). */
  token?: string;
  /** Called before every connection; return a fresh token. Wins over `token`. */
  getToken?: () => string | Promise<string>;
  /** The WebSocket implementation. Default: `globalThis.WebSocket` (browsers, Node ≥ 22). */
  WebSocket?: WebSocketConstructor;
  /** Reconnect delays. */
  backoff?: BackoffOptions;
  /**
   * Node's `ws` only (a browser's WebSocket cannot ping): ping this often, and drop a connection
   * that has not answered the previous ping, so a silent network partition is noticed and
   * resumed from. Default: off (the broker's own heartbeat still drops a dead peer on its side).
   */
  pingIntervalMs?: number;
  /** Give up after this many reconnects in a row that made no progress. Default: never. */
  maxReconnectAttempts?: number;
  /**
   * Items received and not yet taken by the iterator, at most (default 10 000). When they reach
   * it the subscription stops reading: it closes its connection and resubscribes from what was
   * taken once half are, so a slow consumer holds this many items, never a whole thread.
   * (Long-poll: this many and one page.)
   */
  maxBufferedItems?: number;
  /** A WebSocket that has not opened within this long is given up on and retried (default 20 000). */
  connectTimeoutMs?: number;
  /** Aborting closes the subscription. */
  signal?: AbortSignal;
  /**
   * Callback style: every item goes here as it arrives and nothing is buffered for iteration
   * (iterating such a subscription throws).
   */
  onItem?: (item: SubscriptionItem) => void;
  /** Callback style, events only (other items still go to `onItem`, if given). */
  onEvent?: (event: WireEvent) => void;
}

/** What a subscription yields. `end`, `deleted` and an error with `retrying: false` are last. */
export type SubscriptionItem =
  | { type: 'event'; event: WireEvent }
  | { type: 'chat'; frame: ChatFrame }
  /** Catch-up ended at `seq`: what follows is live. Sent again after each reconnect. */
  | { type: 'live'; seq: number }
  /** The run ended at its terminal event `seq` with `status`. The subscription is over. */
  | { type: 'end'; runId: string; seq: number; status: RunStatus }
  /** The thread, or the run `runId`, was deleted. The subscription is over. */
  | { type: 'deleted'; threadId: string; runId?: string }
  /** An error the broker or the connection reported. `retrying: false` ends the subscription. */
  | { type: 'error'; error: RunstreamError; retrying: boolean }
  /** The connection is gone; the next attempt follows in `delayMs`, from `cursor`. */
  | { type: 'reconnecting'; attempt: number; delayMs: number; cursor: number | undefined; reason: string };

export type SubscriptionState = 'connecting' | 'catching_up' | 'live' | 'reconnecting' | 'closed';

const SUBSCRIPTION_ID = 's1';
export const DEFAULT_POLL_WAIT_MS = 25_000;
export const DEFAULT_MAX_BUFFERED_ITEMS = 10_000;
export const DEFAULT_CONNECT_TIMEOUT_MS = 20_000;
/** A long-poll answered empty before its wait was over waits at least this long before the next. */
const EMPTY_POLL_PAUSE_MS = 100;

const POLL_PAGE_LIMIT = 500;
/** History answers these for a request a retry cannot fix. */
const FATAL_HTTP_STATUSES = new Set([400, 403, 404, 405, 410, 416]);
/** Close codes after which reconnecting cannot help. */
const FATAL_CLOSE_CODES = new Set([1002, 1003, 1007, 1008, 1009, 1010]);
const CLOSE_TOKEN_EXPIRED = 4001;

type ServerFrame =
  | { type: 'event'; id: string; event: WireEvent }
  | ({ type: 'chat'; id: string } & ChatFrame)
  | { type: 'live'; id: string; seq: number }
  | { type: 'end'; id: string; run_id: string; seq: number; status: RunStatus }
  | { type: 'deleted'; id: string; thread_id: string; run_id?: string }
  | { type: 'unsubscribed'; id: string; seq: number }
  | {
      type: 'error';
      id: string | null;
      code: string;
      message: string;
      seq?: number;
      cursors?: Record<string, number>;
    };

/** How one connection ended. */
interface ConnectionOutcome {
  final: boolean;
  reason: string;
  /** The connection delivered something new: the backoff starts over. */
  progressed: boolean;
  /** Reconnect at once (a token refresh), without waiting. */
  immediate?: boolean;
}

/** Opens a subscription; iterate it (`for await`) or pass `onItem` / `onEvent`. */
export function subscribe(opts: SubscribeOptions): Subscription {
  return new Subscription(opts);
}

export class Subscription implements AsyncIterable<SubscriptionItem>, AsyncDisposable {
  readonly threadId: string;
  readonly #opts: SubscribeOptions;
  readonly #WebSocket: WebSocketConstructor;
  readonly #abort = new AbortController();
  /** Items received and not yet taken, each with the cursor once it is taken. */
  #queue: { item: SubscriptionItem; cursor: number | undefined }[] = [];
  /** Iterators waiting for an item. */
  readonly #waiting = new Set<() => void>();
  /** The cursor of what arrived: resumes start after it. */
  #cursor: number | undefined;
  /** The cursor of what the caller has been given (iteration); see {@link Subscription.cursor}. */
  #given: number | undefined;
  /** The buffer reached maxBufferedItems: stop reading until it is half empty. */
  #full = false;
  /** Real progress since the last 4001: the next 4001 refreshes at once again. */
  #refreshesInARow = 0;
  readonly #maxBuffered: number;
  readonly #onAbort = (): void => this.close();
  #state: SubscriptionState = 'connecting';
  #ws: WebSocketLike | undefined;
  #done = false;
  #failed = false;
  #last: SubscriptionItem | undefined;
  readonly #callbackMode: boolean;
  /**
   * Resolves when the subscription is over, with its last item: `end`, `deleted`, an error with
   * `retrying: false` (also `callback_failed` when a callback threw), or undefined after close().
   */
  readonly finished: Promise<SubscriptionItem | undefined>;

  constructor(opts: SubscribeOptions) {
    validate(opts);
    this.#opts = opts;
    this.threadId = opts.threadId;
    const ctor = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (ctor === undefined && opts.transport !== 'long-poll') {
      throw new RunstreamError(
        'unsupported',
        'no WebSocket implementation: pass { WebSocket } (e.g. from the ws package) on Node < 22',
      );
    }
    this.#WebSocket = ctor as WebSocketConstructor;
    this.#callbackMode = opts.onItem !== undefined || opts.onEvent !== undefined;
    if (opts.afterSeq !== undefined) this.#cursor = opts.afterSeq;
    else if (!opts.liveOnly && opts.fromOffset === undefined) this.#cursor = 0;
    this.#given = this.#cursor;
    this.#maxBuffered = opts.maxBufferedItems ?? DEFAULT_MAX_BUFFERED_ITEMS;
    if (opts.signal) {
      if (opts.signal.aborted) this.#abort.abort();
      else opts.signal.addEventListener('abort', this.#onAbort, { once: true });
    }
    this.finished = this.#run();
  }

  /**
   * The last seq given to the caller or skipped before it; resume after it. Items received and
   * not yet taken by the iterator are not covered, so a subscription left early resumes with
   * them. `undefined` before a live-only or offset start has one.
   */
  get cursor(): number | undefined {
    return this.#callbackMode ? this.#cursor : this.#given;
  }

  /** Items received and not yet taken by the iterator. */
  get buffered(): number {
    return this.#queue.length;
  }

  get state(): SubscriptionState {
    return this.#state;
  }

  /** Stops the subscription and closes its connection. Idempotent. */
  close(): void {
    this.#stop();
  }

  #stop(): void {
    if (this.#abort.signal.aborted) return;
    this.#abort.abort();
    this.#ws?.close(1000, 'client closed');
    // What nobody took is dropped; the cursor stays at what was taken.
    this.#queue = [];
    this.#notify();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
    await this.finished;
  }

  [Symbol.asyncIterator](): AsyncIterator<SubscriptionItem> {
    if (this.#callbackMode) {
      throw new RunstreamError(
        'unsupported',
        'this subscription delivers to onItem/onEvent; it cannot be iterated',
      );
    }
    return {
      next: async (): Promise<IteratorResult<SubscriptionItem>> => {
        for (;;) {
          const entry = this.#queue.shift();
          if (entry !== undefined) {
            this.#given = entry.cursor;
            if (this.#full && this.#queue.length <= this.#maxBuffered / 2) this.#notify();
            return { value: entry.item, done: false };
          }
          if (this.#done || this.#abort.signal.aborted) return { value: undefined, done: true };
          await new Promise<void>((resolve) => {
            this.#waiting.add(resolve);
          });
        }
      },
      return: async (): Promise<IteratorResult<SubscriptionItem>> => {
        this.close();
        return { value: undefined, done: true };
      },
    };
  }

  #emit(item: SubscriptionItem): void {
    // Frames still arriving on a closed subscription's socket are nobody's.
    if (this.#failed || this.#abort.signal.aborted) return;
    this.#last = item;
    if (this.#callbackMode) {
      try {
        if (item.type === 'event') this.#opts.onEvent?.(item.event);
        this.#opts.onItem?.(item);
      } catch (err) {
        // A throwing callback must not reach the WebSocket's event loop: it ends the subscription.
        this.#failed = true;
        this.#last = {
          type: 'error',
          error: new RunstreamError(
            'callback_failed',
            `onItem/onEvent threw: ${(err as Error)?.message ?? err}`,
            {
              cause: err,
            },
          ),
          retrying: false,
        };
        this.#stop();
      }
      return;
    }
    this.#queue.push({ item, cursor: this.#cursor });
    if (this.#queue.length >= this.#maxBuffered && !this.#full) {
      // Stop reading: the connection goes, and a new one resumes from the cursor once there is room.
      this.#full = true;
      this.#ws?.close(1000, 'client buffer full');
    }
    this.#notify();
  }

  /** The cursor moved past what no item stands for (skipped events): the caller has it once nothing waits. */
  #skipped(): void {
    if (this.#queue.length === 0) this.#given = this.#cursor;
  }

  #notify(): void {
    if (this.#waiting.size === 0) return;
    const waiting = [...this.#waiting];
    this.#waiting.clear();
    for (const wake of waiting) wake();
  }

  /** Resolves once the buffer is half empty again (or the subscription is closed). */
  async #roomAgain(): Promise<void> {
    while (this.#queue.length > this.#maxBuffered / 2 && !this.#abort.signal.aborted) {
      await new Promise<void>((resolve) => this.#waiting.add(resolve));
    }
    this.#full = false;
  }

  async #run(): Promise<SubscriptionItem | undefined> {
    if (this.#opts.transport === 'long-poll') await this.#pollLoop();
    else await this.#socketLoop();
    this.#state = 'closed';
    this.#done = true;
    this.#ws = undefined;
    this.#opts.signal?.removeEventListener('abort', this.#onAbort);
    this.#notify();
    return this.#abort.signal.aborted && !this.#failed ? undefined : this.#last;
  }

  async #socketLoop(): Promise<void> {
    let attempt = 0;
    const signal = this.#abort.signal;
    while (!signal.aborted) {
      const outcome = await this.#connectOnce().catch(
        (err: unknown): ConnectionOutcome => ({
          final: false,
          progressed: false,
          reason: err instanceof Error ? err.message : String(err),
        }),
      );
      if (outcome.final || signal.aborted) break;
      if (this.#full) {
        // Not a failure: the caller is behind. Resume once it has taken half of what waits.
        await this.#roomAgain();
        continue;
      }
      if (outcome.progressed) attempt = 0;
      const max = this.#opts.maxReconnectAttempts ?? Number.POSITIVE_INFINITY;
      if (attempt >= max) {
        this.#emit({
          type: 'error',
          error: new RunstreamError(
            'connection_failed',
            `gave up after ${attempt} reconnects: ${outcome.reason}`,
          ),
          retrying: false,
        });
        break;
      }
      // A token refresh is not an attempt: it costs no wait and counts for nothing.
      const delayMs = outcome.immediate ? 0 : backoffDelayMs(attempt++, this.#opts.backoff);
      this.#state = 'reconnecting';
      this.#emit({ type: 'reconnecting', attempt, delayMs, cursor: this.#cursor, reason: outcome.reason });
      await sleep(delayMs, signal);
    }
  }

  /**
   * The long-poll transport: History's events route with `wait_ms`, from the cursor. The page's
   * `next_after_seq` is the cursor (it covers what the filters skipped). The first page that
   * has no more behind it is `live`. A run subscription asks the run's record after each page:
   * its `end_seq` at or below the cursor is the `end`; a run that had events and is gone was deleted.
   */
  async #pollLoop(): Promise<void> {
    const o = this.#opts;
    const signal = this.#abort.signal;
    const history = new HistoryClient({
      url: o.httpUrl ?? httpBase(o.url),
      ...(o.token === undefined ? {} : { token: o.token }),
      ...(o.getToken === undefined ? {} : { getToken: o.getToken }),
      ...(o.fetch === undefined ? {} : { fetch: o.fetch }),
    });
    const filters = {
      ...(o.runId === undefined ? {} : { runId: o.runId }),
      ...(o.categories === undefined ? {} : { categories: o.categories }),
      ...(o.eventTypes === undefined ? {} : { eventTypes: o.eventTypes }),
    };
    let attempt = 0;
    let live = false;
    let runSeen = false;
    let startChecked = false;
    this.#state = 'catching_up';
    let idle = 0;
    while (!signal.aborted) {
      if (this.#full) await this.#roomAgain();
      try {
        if (this.#cursor === undefined) {
          // live_only: start at the thread's head.
          const head = await history.listEvents(o.threadId, {
            beforeSeq: Number.MAX_SAFE_INTEGER,
            limit: 1,
            signal,
          });
          this.#cursor = head.events[0]?.seq ?? 0;
          this.#skipped();
        }
        const before = this.#cursor;
        if (o.runId !== undefined && !startChecked) {
          // A run that ended at or before the start point gets `end` at once, as on WebSocket.
          const ended = await this.#runEnded(history, o.runId, runSeen);
          if (ended === 'deleted' || ended === 'ended') return;
          runSeen ||= ended === 'seen';
          startChecked = true;
        }
        const waitMs = live ? (o.pollWaitMs ?? DEFAULT_POLL_WAIT_MS) : 0;
        const asked = Date.now();
        const page = await history.listEvents(o.threadId, {
          ...filters,
          afterSeq: this.#cursor,
          limit: POLL_PAGE_LIMIT,
          signal,
          ...(live ? { waitMs } : {}),
        });
        const problem = pageProblem(page, this.#cursor, this.threadId);
        if (problem !== undefined) throw new RunstreamError('protocol_error', problem);
        attempt = 0;
        for (const e of page.events) {
          if (e.seq <= this.#cursor) continue;
          this.#cursor = e.seq;
          this.#emit({ type: 'event', event: e });
        }
        this.#cursor = Math.max(this.#cursor, page.next_after_seq ?? this.#cursor);
        this.#skipped();
        if (page.end !== undefined) {
          // The broker's own word that the run ended by the cursor (a run's long-poll says so).
          this.#cursor = Math.max(this.#cursor, page.end.seq);
          this.#emit({ type: 'end', runId: page.end.run_id, seq: page.end.seq, status: page.end.status });
          return;
        }
        if (o.runId !== undefined && this.#cursor > before) {
          const ended = await this.#runEnded(history, o.runId, runSeen);
          if (ended === 'deleted' || ended === 'ended') return;
          runSeen ||= ended === 'seen';
        }
        if (!live && !page.has_more) {
          live = true;
          this.#state = 'live';
          this.#emit({ type: 'live', seq: this.#cursor });
        } else if (live && this.#cursor === before && Date.now() - asked < waitMs) {
          // Nothing, before the wait was over: a server that does not wait is not asked in a loop.
          await sleep(Math.max(EMPTY_POLL_PAUSE_MS, backoffDelayMs(idle++, o.backoff)), signal);
        } else idle = 0;
      } catch (err) {
        if (signal.aborted) return;
        const e = err instanceof RunstreamError ? err : new RunstreamError('connection_failed', String(err));
        const unauthenticated = e.status === 401 && o.getToken === undefined;
        if ((e.status !== undefined && FATAL_HTTP_STATUSES.has(e.status)) || unauthenticated) {
          this.#emit({ type: 'error', error: e, retrying: false });
          return;
        }
        const max = o.maxReconnectAttempts ?? Number.POSITIVE_INFINITY;
        if (attempt >= max) {
          this.#emit({ type: 'error', error: e, retrying: false });
          return;
        }
        const delayMs = backoffDelayMs(attempt, o.backoff);
        attempt++;
        live = false;
        this.#state = 'reconnecting';
        this.#emit({ type: 'reconnecting', attempt, delayMs, cursor: this.#cursor, reason: e.message });
        await sleep(delayMs, signal);
      }
    }
  }

  /** Long-poll run subscriptions: emits `end` or `deleted` when the run has ended at or before the cursor. */
  async #runEnded(
    history: HistoryClient,
    runId: string,
    seen: boolean,
  ): Promise<'ended' | 'deleted' | 'seen' | 'unknown'> {
    try {
      const run = await history.getRun(this.threadId, runId);
      if (run.end_seq !== null && this.#cursor !== undefined && run.end_seq <= this.#cursor) {
        this.#cursor = Math.max(this.#cursor, run.end_seq);
        this.#emit({ type: 'end', runId, seq: run.end_seq, status: run.status });
        return 'ended';
      }
      return 'seen';
    } catch (err) {
      if (!(err instanceof RunstreamError) || err.status !== 404) throw err;
      if (!seen) return 'unknown';
      this.#emit({ type: 'deleted', threadId: this.threadId, runId });
      return 'deleted';
    }
  }

  #subscribeFrame(): Record<string, unknown> {
    const o = this.#opts;
    const frame: Record<string, unknown> = { type: 'subscribe', id: SUBSCRIPTION_ID, thread_id: o.threadId };
    if (this.#cursor !== undefined) frame.after_seq = this.#cursor;
    else if (o.fromOffset !== undefined) frame.from_offset = o.fromOffset;
    else frame.live_only = true;
    if (o.runId !== undefined) frame.run_id = o.runId;
    if (o.categories !== undefined) frame.categories = [...o.categories];
    if (o.eventTypes !== undefined) frame.event_types = [...o.eventTypes];
    if (o.view !== undefined) frame.view = o.view;
    return frame;
  }

  async #connectOnce(): Promise<ConnectionOutcome> {
    this.#state = 'connecting';
    const getToken = this.#opts.getToken;
    const token = getToken ? await untilAborted(getToken, this.#abort.signal) : this.#opts.token;
    if (this.#abort.signal.aborted) return { final: true, progressed: false, reason: 'closed' };
    const ws = new this.#WebSocket(withToken(this.#opts.url, token));
    this.#ws = ws;
    const connectTimeoutMs = this.#opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    let timedOut = false;
    const openTimer = setTimeout(() => {
      timedOut = true;
      ws.close();
    }, connectTimeoutMs);
    // Chat frames of one event may share its seq; only what the resume point covers is a repeat.
    const resumedAfter = this.#cursor ?? -1;
    let progressed = false;
    let opened = false;
    let final: string | undefined;
    let serverReason: string | undefined;
    let lastError = '';
    /** A frame the protocol does not allow came: nothing more is taken from this connection. */
    let broken: string | undefined;

    const finish = (reason: string): void => {
      final = reason;
      ws.close(1000, 'subscription over');
    };
    const advance = (seq: number): void => {
      if (this.#cursor === undefined || seq > this.#cursor) {
        this.#cursor = seq;
        progressed = true;
      }
    };

    const onFrame = (f: ServerFrame): void => {
      if (final !== undefined || broken !== undefined || this.#full) return;
      if (f.type === 'error' && f.id === null) {
        // slow_consumer / token_expired (then 4008 / 4001), or too many connections (then 1013).
        const c = f.cursors?.[SUBSCRIPTION_ID];
        if (c !== undefined) {
          advance(c);
          this.#skipped();
        }
        serverReason = `${f.code}: ${f.message}`;
        return;
      }
      if (f.id !== SUBSCRIPTION_ID) return;
      switch (f.type) {
        case 'event': {
          if (this.#cursor !== undefined && f.event.seq <= this.#cursor) return;
          advance(f.event.seq);
          this.#emit({ type: 'event', event: f.event });
          return;
        }
        case 'chat': {
          if (f.seq <= resumedAfter) return;
          const { type: _t, id: _i, ...frame } = f;
          advance(f.seq);
          this.#emit({ type: 'chat', frame });
          return;
        }
        case 'live':
          advance(f.seq);
          this.#state = 'live';
          this.#emit({ type: 'live', seq: f.seq });
          return;
        case 'end':
          advance(f.seq);
          this.#emit({ type: 'end', runId: f.run_id, seq: f.seq, status: f.status });
          finish('end');
          return;
        case 'deleted':
          this.#emit({
            type: 'deleted',
            threadId: f.thread_id,
            ...(f.run_id === undefined ? {} : { runId: f.run_id }),
          });
          finish('deleted');
          return;
        case 'error': {
          if (f.seq !== undefined) advance(f.seq);
          const retrying = f.seq !== undefined && RETRYABLE_SUBSCRIPTION_CODES.has(f.code);
          const error = new RunstreamError(f.code, f.message, f.seq === undefined ? {} : { seq: f.seq });
          this.#emit({ type: 'error', error, retrying });
          if (retrying) {
            serverReason = `${f.code}: ${f.message}`;
            ws.close(1000, 'resubscribing');
          } else finish('error');
          return;
        }
        default:
          return;
      }
    };

    const stopPinging = this.#heartbeat(ws);
    return new Promise<ConnectionOutcome>((resolve) => {
      ws.onopen = (() => {
        clearTimeout(openTimer);
        opened = true;
        this.#state = 'catching_up';
        ws.send(JSON.stringify(this.#subscribeFrame()));
      }) as () => void;
      ws.onmessage = ((ev: { data: unknown }) => {
        if (final !== undefined || broken !== undefined || this.#full) return;
        let frame: unknown;
        try {
          frame = typeof ev.data === 'string' ? JSON.parse(ev.data) : undefined;
        } catch {
          frame = undefined;
        }
        const problem =
          frame === undefined ? 'a frame that is not JSON text' : frameProblem(frame, this.threadId);
        if (problem === undefined) {
          onFrame(frame as ServerFrame);
          return;
        }
        // A mangled frame may have been an event: resume from the cursor rather than skip it.
        broken = `the broker sent ${problem}`;
        this.#emit({ type: 'error', error: new RunstreamError('protocol_error', broken), retrying: true });
        ws.close(1000, 'protocol error');
      }) as (ev: { data: unknown }) => void;
      ws.onerror = ((ev: { message?: unknown; error?: unknown }) => {
        if (timedOut) return;
        if (typeof ev.message === 'string') lastError = ev.message;
        else if (ev.error instanceof Error) lastError = ev.error.message;
      }) as (ev: { message?: unknown }) => void;
      ws.onclose = ((ev: { code: number; reason: string }) => {
        clearTimeout(openTimer);
        stopPinging();
        if (this.#ws === ws) this.#ws = undefined;
        if (progressed) this.#refreshesInARow = 0;
        if (final !== undefined || this.#abort.signal.aborted) {
          resolve({ final: true, progressed, reason: final ?? 'closed' });
          return;
        }
        if (this.#full) {
          resolve({ final: false, progressed: true, reason: 'client buffer full' });
          return;
        }
        if (broken !== undefined) {
          resolve({ final: false, progressed, reason: broken });
          return;
        }
        if (timedOut) lastError = `the WebSocket did not open within ${connectTimeoutMs} ms`;
        resolve(this.#classifyClose(ev.code, ev.reason, opened, progressed, serverReason ?? lastError));
      }) as (ev: { code: number; reason: string }) => void;
    });
  }

  /** Pings over a `ws`-style socket (`ping()`, `on('pong')`, `terminate()`); a no-op elsewhere. */
  #heartbeat(ws: WebSocketLike): () => void {
    const intervalMs = this.#opts.pingIntervalMs;
    const node = ws as unknown as {
      ping?: () => void;
      terminate?: () => void;
      on?: (event: 'pong', fn: () => void) => void;
    };
    if (!intervalMs || typeof node.ping !== 'function' || typeof node.on !== 'function')
      return () => undefined;
    let answered = true;
    node.on('pong', () => {
      answered = true;
    });
    const timer = setInterval(() => {
      if (ws.readyState !== 1) return;
      if (!answered) {
        node.terminate?.();
        return;
      }
      answered = false;
      node.ping?.();
    }, intervalMs);
    return () => clearInterval(timer);
  }

  #classifyClose(
    code: number,
    reason: string,
    opened: boolean,
    progressed: boolean,
    detail: string,
  ): ConnectionOutcome {
    const why = `connection closed (${code}${reason ? ` ${reason}` : ''})${detail ? `: ${detail}` : ''}`;
    const fail = (errCode: string, message: string): ConnectionOutcome => {
      this.#emit({ type: 'error', error: new RunstreamError(errCode, message), retrying: false });
      return { final: true, progressed, reason: message };
    };
    if (!opened) {
      // Node's `ws` names the HTTP status of a refused upgrade; a browser cannot see it.
      const status = /Unexpected server response: (\d+)/.exec(detail)?.[1];
      if (status === '401' && this.#opts.getToken === undefined) return fail('unauthenticated', why);
      if (status === '403') return fail('permission_denied', why);
      if (status === '400' || status === '404')
        return fail(status === '400' ? 'invalid_argument' : 'not_found', why);
      return { final: false, progressed, reason: why };
    }
    if (code === CLOSE_TOKEN_EXPIRED) {
      if (this.#opts.getToken === undefined) return fail('token_expired', why);
      // A fresh token at once, the first time in a row; a broker that keeps refusing them is
      // retried with backoff, and counted.
      if (this.#refreshesInARow++ === 0)
        return { final: false, progressed: true, immediate: true, reason: why };
      return { final: false, progressed, reason: why };
    }
    if (FATAL_CLOSE_CODES.has(code)) return fail('invalid_argument', why);
    return { final: false, progressed, reason: why };
  }
}

/** `ws://host:8080/v1/ws` → `http://host:8080`. */
function httpBase(wsUrl: string): string {
  const u = new URL(wsUrl);
  u.protocol = u.protocol === 'wss:' ? 'https:' : 'http:';
  return `${u.protocol}//${u.host}`;
}

function withToken(url: string, token: string | undefined): string {
  if (token === undefined || token === '') return url;
  return `${url}${url.includes('?') ? '&' : '?'}access_token=${encodeURIComponent(token)}`;
}

/** `fn()`, or undefined once `signal` aborts (a token source that never answers cannot hold a closed subscription). */
function untilAborted<T>(fn: () => T | Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  if (signal.aborted) return Promise.resolve(undefined);
  return new Promise<T | undefined>((resolve, reject) => {
    const onAbort = (): void => resolve(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
    Promise.resolve()
      .then(fn)
      .then(
        (v) => {
          signal.removeEventListener('abort', onAbort);
          resolve(v);
        },
        (err: unknown) => {
          signal.removeEventListener('abort', onAbort);
          reject(err);
        },
      );
  });
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);
const isSeq = (v: unknown, min = 1): boolean => Number.isSafeInteger(v) && (v as number) >= min;

/**
 * What is wrong with a frame the broker sent, by docs/protocol.md §9, or undefined. Frames of
 * another subscription id and types this client does not know pass (and are ignored).
 */
function frameProblem(f: unknown, threadId: string): string | undefined {
  if (!isObject(f)) return 'a frame that is not a JSON object';
  if (typeof f.type !== 'string') return 'a frame without a type';
  if (f.type === 'error') {
    if (typeof f.code !== 'string' || typeof f.message !== 'string')
      return 'an error frame without code or message';
    if (f.seq !== undefined && !isSeq(f.seq, 0)) return 'an error frame whose seq is not a seq';
    if (
      f.cursors !== undefined &&
      !(isObject(f.cursors) && Object.values(f.cursors).every((c) => isSeq(c, 0)))
    ) {
      return 'an error frame whose cursors are not seqs';
    }
    return undefined;
  }
  if (f.id !== SUBSCRIPTION_ID) return undefined;
  switch (f.type) {
    case 'event': {
      const e = f.event;
      if (!isObject(e)) return 'an event frame without an event';
      if (!isSeq(e.seq)) return 'an event whose seq is not a positive integer';
      if (e.thread_id !== threadId)
        return `an event of another thread (${String(e.thread_id).slice(0, 100)})`;
      return undefined;
    }
    case 'chat':
      if (!isSeq(f.seq)) return 'a chat frame whose seq is not a positive integer';
      return isObject(f.message) && isSeq(f.message.first_seq) && typeof f.message.role === 'string'
        ? undefined
        : 'a chat frame without its message';
    case 'live':
      return isSeq(f.seq, 0) ? undefined : 'a live frame whose seq is not a seq';
    case 'end':
      return isSeq(f.seq) && typeof f.run_id === 'string' && typeof f.status === 'string'
        ? undefined
        : 'an end frame without run_id, seq or status';
    case 'deleted':
      return typeof f.thread_id === 'string' ? undefined : 'a deleted frame without thread_id';
    default:
      return undefined;
  }
}

/** What is wrong with a long-poll page, or undefined. */
function pageProblem(page: unknown, after: number, threadId: string): string | undefined {
  if (!isObject(page) || !Array.isArray(page.events)) return 'a page without events';
  for (const e of page.events as unknown[]) {
    if (!isObject(e) || !isSeq(e.seq)) return 'a page with an event whose seq is not a positive integer';
    if (e.thread_id !== threadId) return 'a page with an event of another thread';
  }
  const next = page.next_after_seq;
  if (next !== undefined && !isSeq(next, 0)) return 'a page whose next_after_seq is not a seq';
  if (
    page.has_more === true &&
    page.events.length === 0 &&
    (next === undefined || (next as number) <= after)
  ) {
    return `a page that has more but does not move the cursor (${after})`;
  }
  return undefined;
}

function validate(o: SubscribeOptions): void {
  if (typeof o.threadId !== 'string' || o.threadId === '')
    throw invalid('threadId', 'must be a non-empty string');
  checkBackoff(o.backoff, 'backoff');
  checkCount(o.maxReconnectAttempts, 'maxReconnectAttempts', 0, true);
  checkCount(o.maxBufferedItems, 'maxBufferedItems');
  checkMs(o.connectTimeoutMs, 'connectTimeoutMs', { min: 1 });
  checkMs(o.pingIntervalMs, 'pingIntervalMs');
  checkMs(o.pollWaitMs, 'pollWaitMs');
  const starts = [o.afterSeq !== undefined, o.liveOnly === true, o.fromOffset !== undefined].filter(Boolean);
  if (starts.length > 1) {
    throw new RunstreamError('invalid_argument', 'give at most one of afterSeq, liveOnly and fromOffset');
  }
  if (o.afterSeq !== undefined && (!Number.isSafeInteger(o.afterSeq) || o.afterSeq < 0)) {
    throw new RunstreamError('invalid_argument', 'afterSeq: must be a non-negative integer');
  }
  if (o.transport === 'long-poll' && (o.view === 'chat' || o.fromOffset !== undefined)) {
    throw new RunstreamError(
      'invalid_argument',
      'the long-poll transport has no chat view and no fromOffset',
    );
  }
  if (o.view === 'chat' && (o.categories !== undefined || o.eventTypes !== undefined)) {
    throw new RunstreamError(
      'invalid_argument',
      'categories and eventTypes cannot be combined with view "chat"',
    );
  }
}
