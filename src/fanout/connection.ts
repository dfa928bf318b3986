import type { Duplex } from 'node:stream';
import type { WebSocket } from 'ws';
import { watchExpiry } from '../auth/expiry.js';
import type { Principal } from '../auth/principal.js';
import { scopedFilter } from '../auth/scope.js';
import {
  ErrorCode,
  InvalidArgumentError,
  PermissionDeniedError,
  quote,
  RunstreamError,
  toRunstreamError,
} from '../errors.js';
import { type CancelReceipt, type CancelSource, checkReason, type RunControl } from '../ingest/control.js';
import { ID_PATTERN } from '../ingest/validate.js';
import { parseFilter } from './filter.js';
import {
  cancelRequestedFrame,
  deletedFrame,
  endFrame,
  errorFrame,
  eventFrame,
  liveFrame,
  sharedEventFrame,
  unsubscribedFrame,
} from './frames.js';
import {
  type DeliveredEvent,
  type StartCursor,
  Subscription,
  type SubscriptionResources,
  type SubscriptionSink,
  subscriptionResources,
} from './subscription.js';

/** Close codes (4000-4999 are the application's). Documented in docs/protocol.md. */
export const CLOSE_SLOW_CONSUMER = 4008;
/** The connection's token expired: reconnect with a fresh one and resume from the cursors sent. */
export const CLOSE_TOKEN_EXPIRED = 4001;
export const CLOSE_GOING_AWAY = 1001;
/** The process already holds its maximum of WebSocket connections (RFC 6455 "Try Again Later"). */
export const CLOSE_TRY_AGAIN_LATER = 1013;
/** The `on_disconnect` subscribe option that cancels the run when the client goes away. */
export const ON_DISCONNECT_CANCEL = 'cancel';
export const SUB_ID_MAX_LENGTH = 128;
/** Frames are JSON text, also when handed to ws as bytes. */
const TEXT = { binary: false } as const;

export interface ConnectionOptions extends SubscriptionResources {
  readonly maxSubscriptions: number;
  /** Bytes queued for the socket past which the client is cut off as too slow. */
  readonly maxBufferedBytes: number;
  /** Who authenticated at upgrade: checked on every subscribe; its expiry ends the connection. */
  readonly principal: Principal;
  /** Cancel requests (`cancel` frames, `on_disconnect: "cancel"`); absent: refused as unavailable. */
  readonly control?: RunControl | undefined;
}

export class Connection implements SubscriptionSink {
  readonly #ws: WebSocket;
  readonly #o: ConnectionOptions;
  readonly #subs = new Map<string, Subscription>();
  /** Bytes handed to ws and not yet written to the socket. */
  #queuedBytes = 0;
  #drainWaiters: (() => void)[] = [];
  #closed = false;
  /** Set when the server closes the connection (shutdown, slow consumer, token expiry): no on_disconnect cancel then. */
  #closedByServer = false;
  /** Subscriptions whose run is cancelled if the client goes away while they are active. */
  readonly #cancelOnDisconnect = new Map<Subscription, string>();
  readonly #stopExpiry: () => void;
  alive = true;

  constructor(ws: WebSocket, o: ConnectionOptions) {
    this.#ws = ws;
    this.#o = o;
    this.#stopExpiry = watchExpiry(o.principal, () => this.#expire());
    ws.on('message', (data, isBinary) => this.#onMessage(data.toString(), isBinary));
    ws.on('pong', () => {
      this.alive = true;
    });
    ws.on('close', () => this.#onClose());
    ws.on('error', (err) => o.log.debug({ err }, 'websocket error'));
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Catch-up pauses while more than this is queued, so a replay never outruns the socket. */
  get #lowWatermark(): number {
    return Math.min(1024 * 1024, this.#o.maxBufferedBytes / 4);
  }

  event(sub: Subscription, e: DeliveredEvent): void {
    // A catch-up event is one subscriber's own: its frame is built for it alone.
    this.send(e.shared ? sharedEventFrame(sub.id, e) : eventFrame(sub.id, e.json()));
  }

  /** Corks the socket around `send`: its frames leave in one write, not one write each. */
  sendTogether(send: () => void): void {
    // ws has no public cork; its maintainers point to the socket's (websockets/ws#1999).
    const socket = (this.#ws as unknown as { _socket?: Duplex })._socket;
    if (socket === undefined || this.#closed) {
      send();
      return;
    }
    socket.cork();
    try {
      send();
    } finally {
      socket.uncork();
    }
  }

  live(sub: Subscription, seq: number): void {
    this.send(liveFrame(sub.id, seq));
  }

  end(sub: Subscription, runId: string, seq: number): void {
    this.send(endFrame(sub.id, runId, seq));
  }

  deleted(sub: Subscription, runId: string | undefined): void {
    this.send(deletedFrame(sub.id, sub.threadId, runId));
  }

  error(sub: Subscription, err: RunstreamError): void {
    this.send(errorFrame(sub.id, err.wsCode, err.message, { seq: sub.cursor }));
  }

  /** A text frame: a string, or its UTF-8 bytes. */
  send(frame: string | Buffer): boolean {
    if (this.#closed) return false;
    const bytes = typeof frame === 'string' ? Buffer.byteLength(frame) : frame.length;
    if (this.#queuedBytes + bytes > this.#o.maxBufferedBytes) {
      this.#cutOffSlowConsumer();
      return false;
    }
    this.#queuedBytes += bytes;
    this.#ws.send(frame, TEXT, () => {
      this.#queuedBytes -= bytes;
      if (this.#queuedBytes <= this.#lowWatermark && this.#drainWaiters.length > 0) {
        const waiters = this.#drainWaiters;
        this.#drainWaiters = [];
        for (const w of waiters) w();
      }
    });
    return true;
  }

  get backlogged(): boolean {
    return this.#queuedBytes > this.#lowWatermark;
  }

  drained(): Promise<void> {
    if (this.#closed || this.#queuedBytes <= this.#lowWatermark) return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  /** Tells the client where each subscription stopped, then closes: it resumes from there. */
  #cutOffSlowConsumer(): void {
    const cursors = Object.fromEntries([...this.#subs.values()].map((s) => [s.id, s.cursor]));
    const frame = errorFrame(
      null,
      'slow_consumer',
      'send queue limit exceeded; resubscribe from the given seqs',
      {
        cursors,
      },
    );
    this.#ws.send(frame);
    this.#o.log.info({ queuedBytes: this.#queuedBytes, cursors }, 'cut off slow consumer');
    this.#closedByServer = true;
    this.#ws.close(CLOSE_SLOW_CONSUMER, 'slow consumer');
    this.#onClose();
  }

  #onMessage(text: string, isBinary: boolean): void {
    let subId: string | null = null;
    try {
      if (isBinary) throw new InvalidArgumentError('frame', 'must be a JSON text frame');
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(text) as Record<string, unknown>;
      } catch {
        throw new InvalidArgumentError('frame', 'is not valid JSON');
      }
      if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) {
        throw new InvalidArgumentError('frame', 'must be a JSON object');
      }
      if (typeof msg.id === 'string') subId = msg.id;
      switch (msg.type) {
        case 'subscribe':
          this.#subscribe(msg);
          return;
        case 'unsubscribe':
          this.#unsubscribe(msg);
          return;
        case 'cancel':
          this.#cancel(msg);
          return;
        default:
          throw new InvalidArgumentError(
            'type',
            `must be "subscribe", "unsubscribe" or "cancel" (got ${quote(msg.type)})`,
          );
      }
    } catch (err) {
      const e = toRunstreamError(err);
      this.send(errorFrame(subId, e.wsCode, e.message));
    }
  }

  #subscribe(msg: Record<string, unknown>): void {
    const id = requireSubId(msg.id);
    if (typeof msg.thread_id !== 'string' || !ID_PATTERN.test(msg.thread_id)) {
      throw new InvalidArgumentError('thread_id', 'is required and must match [A-Za-z0-9_-]{1,128}');
    }
    if (!this.#o.principal.canRead(msg.thread_id)) {
      throw new PermissionDeniedError(`this token may not read thread ${msg.thread_id}`);
    }
    const start = parseStart(msg);
    const filter = scopedFilter(parseFilter(msg), this.#o.principal);
    const cancelOnDisconnect = this.#parseOnDisconnect(msg, filter.runId, msg.thread_id);
    if (this.#subs.has(id)) {
      throw new InvalidArgumentError(
        'id',
        `subscription ${JSON.stringify(id)} already exists on this connection`,
      );
    }
    if (this.#subs.size >= this.#o.maxSubscriptions) {
      throw new RunstreamError(
        ErrorCode.ResourceExhausted,
        `at most ${this.#o.maxSubscriptions} subscriptions per connection`,
      );
    }
    const sub = new Subscription({
      id,
      threadId: msg.thread_id,
      start,
      filter,
      ...subscriptionResources(this.#o),
      sink: this,
      onClose: (s) => {
        if (this.#subs.get(s.id) === s) this.#subs.delete(s.id);
        this.#cancelOnDisconnect.delete(s);
      },
    });
    this.#subs.set(id, sub);
    if (cancelOnDisconnect && filter.runId !== undefined) this.#cancelOnDisconnect.set(sub, filter.runId);
    void sub.start();
  }

  /** `on_disconnect`: `"none"` (the default) or `"cancel"`, which needs a run and the right to cancel. */
  #parseOnDisconnect(msg: Record<string, unknown>, runId: string | undefined, threadId: string): boolean {
    const v = msg.on_disconnect;
    if (v === undefined || v === null || v === 'none') return false;
    if (v !== ON_DISCONNECT_CANCEL) {
      throw new InvalidArgumentError('on_disconnect', 'must be "cancel" or "none"');
    }
    if (runId === undefined) {
      throw new InvalidArgumentError('on_disconnect', '"cancel" needs run_id: only a run can be cancelled');
    }
    if (!this.#o.control) {
      throw new RunstreamError(ErrorCode.Unavailable, 'cancel is not available on this node');
    }
    if (!this.#o.principal.canCancel(threadId)) {
      throw new PermissionDeniedError(`this token may not cancel runs of thread ${threadId}`);
    }
    return true;
  }

  /** `{"type":"cancel","id","thread_id","run_id","reason"?}`: answered by `cancel_requested` or an error frame. */
  #cancel(msg: Record<string, unknown>): void {
    const id = requireSubId(msg.id);
    if (typeof msg.thread_id !== 'string' || !ID_PATTERN.test(msg.thread_id)) {
      throw new InvalidArgumentError('thread_id', 'is required and must match [A-Za-z0-9_-]{1,128}');
    }
    if (typeof msg.run_id !== 'string' || !ID_PATTERN.test(msg.run_id)) {
      throw new InvalidArgumentError('run_id', 'is required and must match [A-Za-z0-9_-]{1,128}');
    }
    const reason = msg.reason ?? '';
    checkReason(reason);
    const threadId = msg.thread_id;
    const runId = msg.run_id;
    this.#requestCancel(threadId, runId, reason, 'websocket').then(
      (receipt) => this.send(cancelRequestedFrame(id, receipt)),
      (err: unknown) => {
        const e = toRunstreamError(err);
        this.send(errorFrame(id, e.wsCode, e.message));
      },
    );
  }

  #requestCancel(
    threadId: string,
    runId: string,
    reason: string,
    source: CancelSource,
  ): Promise<CancelReceipt> {
    if (!this.#o.control) {
      return Promise.reject(
        new RunstreamError(ErrorCode.Unavailable, 'cancel is not available on this node'),
      );
    }
    return this.#o.control.requestCancel({ threadId, runId, reason, source, principal: this.#o.principal });
  }

  #unsubscribe(msg: Record<string, unknown>): void {
    const id = requireSubId(msg.id);
    const sub = this.#subs.get(id);
    if (!sub)
      throw new RunstreamError(
        ErrorCode.NotFound,
        `no subscription ${JSON.stringify(id)} on this connection`,
      );
    sub.close();
    this.send(unsubscribedFrame(id, sub.cursor));
  }

  /** Heartbeat: a peer that did not answer the last ping is gone. */
  ping(): void {
    if (!this.alive) {
      this.#ws.terminate();
      this.#onClose();
      return;
    }
    this.alive = false;
    this.#ws.ping();
  }

  close(code = CLOSE_GOING_AWAY, reason = 'server shutting down'): void {
    this.#closedByServer = true;
    this.#ws.close(code, reason);
    this.#onClose();
  }

  /** The token expired: say where each subscription stopped, so the client resumes with a new token. */
  #expire(): void {
    if (this.#closed) return;
    const cursors = Object.fromEntries([...this.#subs.values()].map((s) => [s.id, s.cursor]));
    this.#ws.send(
      errorFrame(
        null,
        'token_expired',
        'token expired; reconnect with a fresh token and resubscribe from the given seqs',
        {
          cursors,
        },
      ),
    );
    this.#o.log.debug({ subject: this.#o.principal.subject, cursors }, 'websocket token expired');
    this.close(CLOSE_TOKEN_EXPIRED, 'token expired');
  }

  #onClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#stopExpiry();
    if (!this.#closedByServer) this.#cancelOnDisconnectRuns();
    for (const sub of [...this.#subs.values()]) sub.close();
    this.#subs.clear();
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const w of waiters) w();
  }

  /** The client went away (closed, or stopped answering pings): cancel the runs it asked us to. */
  #cancelOnDisconnectRuns(): void {
    const runs = [...this.#cancelOnDisconnect]
      .filter(([sub]) => this.#subs.get(sub.id) === sub)
      .map(([sub, runId]) => [sub.threadId, runId] as const);
    this.#cancelOnDisconnect.clear();
    if (runs.length === 0) return;
    // One after another, in subscription order: a dropped connection never floods the store.
    void (async () => {
      for (const [threadId, runId] of runs) {
        await this.#requestCancel(threadId, runId, 'subscriber disconnected', 'on_disconnect').catch(
          (err: unknown) =>
            this.#o.log.info(
              { err: toRunstreamError(err).message, threadId, runId },
              'on_disconnect cancel not issued',
            ),
        );
      }
    })();
  }
}

function requireSubId(id: unknown): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > SUB_ID_MAX_LENGTH) {
    throw new InvalidArgumentError('id', `is required: a string of 1-${SUB_ID_MAX_LENGTH} characters`);
  }
  return id;
}

/** `after_seq` (default 0), `from_offset`, or `live_only: true`: at most one of them. */
function parseStart(msg: Record<string, unknown>): StartCursor {
  const given = ['after_seq', 'from_offset', 'live_only'].filter(
    (k) => msg[k] !== undefined && msg[k] !== null,
  );
  if (given.length > 1)
    throw new InvalidArgumentError(given[1] as string, `cannot be combined with ${given[0]}`);
  if (msg.live_only !== undefined && msg.live_only !== null) {
    if (msg.live_only !== true) throw new InvalidArgumentError('live_only', 'must be true when given');
    return { kind: 'live' };
  }
  if (msg.from_offset !== undefined && msg.from_offset !== null) {
    return { kind: 'from_offset', offset: nonNegativeInt(msg.from_offset, 'from_offset', 1) };
  }
  if (msg.after_seq === undefined || msg.after_seq === null) return { kind: 'after_seq', seq: 0 };
  return { kind: 'after_seq', seq: nonNegativeInt(msg.after_seq, 'after_seq', 0) };
}

function nonNegativeInt(v: unknown, field: string, min: number): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
    throw new InvalidArgumentError(
      field,
      min === 0 ? 'must be a non-negative integer' : `must be an integer >= ${min}`,
    );
  }
  return v;
}
