/**
 * One Server-Sent Events response carrying one {@link Subscription}: the SSE transport's
 * {@link SubscriptionSink}. It owns the response's send queue (bounded, paced by the
 * socket), the keep-alive comments, the token's expiry and the client's disconnect.
 *
 * What each subscription callback looks like on the wire is the {@link SseDialect}'s
 * business: runstream's own stream (`sse.ts`) and the LangGraph-compatible join
 * (`langgraph-join.ts`) share everything here and differ only in framing.
 *
 * The response's status line is written lazily, with the first frame: an error found
 * before anything was streamed (a cursor past the head, an expired offset, a database
 * that is down) is still answered as a plain HTTP error with its status code.
 */
import type { ServerResponse } from 'node:http';
import { watchExpiry } from '../auth/expiry.js';
import type { Principal } from '../auth/principal.js';
import { ErrorCode, RunstreamError, TokenExpiredError } from '../errors.js';
import { sendError } from '../http/util.js';
import type { Logger } from '../logger.js';
import type { DeliveredEvent, Subscription, SubscriptionSink } from './subscription.js';

/**
 * After a slow consumer is cut off, how long its final bytes may take to drain before the
 * socket is destroyed: the response was ended, but a peer that never reads would
 * otherwise hold its queue forever.
 */
export const SSE_CUTOFF_GRACE_MS = 10_000;

/** One SSE block. Fields are written in this order; an empty block is never sent. */
export interface SseFrame {
  /** A comment line (`: text`), ignored by every SSE parser; used for keep-alives. */
  readonly comment?: string;
  /** The `id:` field: a seq up to which everything has been passed (the resume point). */
  readonly id?: number;
  readonly event?: string;
  /** JSON text; a raw line break in it (JSON whitespace) becomes a second `data:` line. */
  readonly data?: string;
}

/** The SSE text of a frame, ending with the blank line that dispatches it. */
export function formatSse(f: SseFrame): string {
  let out = '';
  if (f.comment !== undefined) out += `: ${f.comment}\n`;
  if (f.id !== undefined) out += `id: ${f.id}\n`;
  if (f.event !== undefined) out += `event: ${f.event}\n`;
  if (f.data !== undefined) {
    // A parser joins data lines with "\n": JSON whitespace survives, the value is the same.
    if (!/[\r\n]/.test(f.data)) out += `data: ${f.data}\n`;
    else for (const line of f.data.split(/\r\n|\r|\n/)) out += `data: ${line}\n`;
  }
  return `${out}\n`;
}

/** How subscription callbacks are rendered as SSE frames; none to send nothing. */
export interface SseDialect {
  event(e: DeliveredEvent): readonly SseFrame[];
  /** Catch-up ended at `seq`. */
  live(seq: number): readonly SseFrame[];
  /** A run subscription passed the run's terminal event; the response ends after these. */
  end(runId: string, seq: number): readonly SseFrame[];
  /** The thread or run was deleted; the response ends after these. */
  deleted(threadId: string, runId: string | undefined, cursor: number): readonly SseFrame[];
  /** The stream failed after it started; `cursor` is where to resume. The response ends after these. */
  error(err: RunstreamError, cursor: number): readonly SseFrame[];
}

export interface SseStreamOptions {
  readonly res: ServerResponse;
  readonly dialect: SseDialect;
  readonly keepAliveMs: number;
  /** Bytes queued for the socket past which the client is cut off as too slow. */
  readonly maxBufferedBytes: number;
  /** Who is reading: when its token expires, the stream ends with a `token_expired` error. */
  readonly principal: Principal;
  /** Extra response headers (e.g. `Location` for the LangGraph SDK's reconnects). */
  readonly headers?: Readonly<Record<string, string>>;
  readonly log: Logger;
  /** Called once when the stream is over, whatever the reason. */
  readonly onClose: (stream: SseStream) => void;
}

/** Headers of every SSE response. */
export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  // nginx buffers proxied responses unless told not to; an SSE stream must not be.
  'x-accel-buffering': 'no',
} as const;

export class SseStream implements SubscriptionSink {
  readonly #o: SseStreamOptions;
  readonly #res: ServerResponse;
  #sub: Subscription | undefined;
  #closed = false;
  /** The client went away before the server ended the response. */
  #closedByClient = false;
  #backlogged = false;
  #drainWaiters: (() => void)[] = [];
  /** The last `id:` written: keep-alives move it forward when a filter skipped events. */
  #lastId = -1;
  #keepAlive: NodeJS.Timeout | undefined;
  #stopExpiry: () => void = () => undefined;

  constructor(o: SseStreamOptions) {
    this.#o = o;
    this.#res = o.res;
    this.#res.on('drain', () => {
      this.#backlogged = false;
      this.#wakeDrainWaiters();
    });
    this.#res.on('close', () => {
      if (!this.#closed) this.#closedByClient = true;
      this.#onClose();
    });
    this.#res.on('error', (err) => o.log.debug({ err }, 'sse response error'));
    this.#keepAlive = setInterval(() => this.#sendKeepAlive(), o.keepAliveMs);
    this.#keepAlive.unref();
    this.#stopExpiry = watchExpiry(o.principal, () =>
      this.#fail(
        new TokenExpiredError('the token expired; reconnect with a fresh one and your Last-Event-ID'),
        this.#sub?.cursor ?? 0,
      ),
    );
  }

  /** The subscription this stream carries; closed with the stream. */
  attach(sub: Subscription): void {
    this.#sub = sub;
    if (this.#closed) sub.close();
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The client disconnected while the stream was still going. */
  get closedByClient(): boolean {
    return this.#closedByClient;
  }

  get backlogged(): boolean {
    return this.#backlogged;
  }

  /** Bytes written to the response and not yet handed to the kernel. */
  get queuedBytes(): number {
    return this.#res.writableLength;
  }

  drained(): Promise<void> {
    if (this.#closed || !this.#backlogged) return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  event(_sub: Subscription, e: DeliveredEvent): void {
    this.#send(this.#o.dialect.event(e));
  }

  live(_sub: Subscription, seq: number): void {
    this.#send(this.#o.dialect.live(seq));
    // A client waiting for the response's headers (EventSource's `open`, an SDK's fetch)
    // gets them now, even when the dialect has nothing to say about going live.
    if (!this.#closed && !this.#res.headersSent) {
      this.#open();
      this.#res.flushHeaders();
    }
  }

  end(_sub: Subscription, runId: string, seq: number): void {
    this.finish(this.#o.dialect.end(runId, seq));
  }

  deleted(sub: Subscription, runId: string | undefined): void {
    this.finish(this.#o.dialect.deleted(sub.threadId, runId, sub.cursor));
  }

  error(sub: Subscription, err: RunstreamError): void {
    this.#fail(err, sub.cursor);
  }

  /**
   * Writes the last frames (past the queue limit if need be: they are small and the
   * response ends right after) and ends the response.
   */
  finish(frames: readonly SseFrame[]): void {
    if (this.#closed) return;
    this.#open();
    const text = frames.map(formatSse).join('');
    this.#res.end(text);
    this.#onClose();
  }

  /** An error before anything was streamed is an HTTP error; after, an error frame. */
  #fail(err: RunstreamError, cursor: number): void {
    if (this.#closed) return;
    if (!this.#res.headersSent) {
      sendError(this.#res, err);
      this.#onClose();
      return;
    }
    this.finish(this.#o.dialect.error(err, cursor));
  }

  #open(): void {
    if (this.#res.headersSent) return;
    this.#res.writeHead(200, { ...SSE_HEADERS, ...this.#o.headers });
  }

  #send(frames: readonly SseFrame[]): void {
    if (this.#closed || frames.length === 0) return;
    const text = frames.length === 1 ? formatSse(frames[0] as SseFrame) : frames.map(formatSse).join('');
    // A frame always fits an empty queue, so one event larger than the limit cannot wedge a client.
    const queued = this.#res.writableLength;
    if (queued > 0 && queued + Buffer.byteLength(text) > this.#o.maxBufferedBytes) {
      this.#cutOffSlowConsumer();
      return;
    }
    this.#open();
    if (!this.#res.write(text)) this.#backlogged = true;
    for (const f of frames) if (f.id !== undefined) this.#lastId = f.id;
  }

  /**
   * A comment keeps proxies and idle-timeout watchdogs from closing a quiet stream. When
   * a filter has skipped events since the last id, an `id:` line rides along: a block
   * with an id and no data dispatches no event, but moves the client's Last-Event-ID, so
   * a reconnect does not re-read what was skipped.
   */
  #sendKeepAlive(): void {
    if (this.#closed) return;
    const cursor = this.#sub?.cursor ?? -1;
    const moved = this.#lastId >= 0 && cursor > this.#lastId;
    this.#send([moved ? { comment: 'keep-alive', id: cursor } : { comment: 'keep-alive' }]);
  }

  /** Past the queue limit: say where the client stopped, end the response, drop the socket later. */
  #cutOffSlowConsumer(): void {
    const cursor = this.#sub?.cursor ?? 0;
    const queuedBytes = this.#res.writableLength;
    this.#o.log.info({ queuedBytes, cursor, thread: this.#sub?.threadId }, 'cut off slow sse consumer');
    this.#fail(
      new RunstreamError(
        ErrorCode.SlowConsumer,
        `send queue limit of ${this.#o.maxBufferedBytes} bytes exceeded; reconnect with Last-Event-ID ${cursor}`,
      ),
      cursor,
    );
    const socket = this.#res.socket;
    if (socket && !socket.destroyed) {
      const timer = setTimeout(() => socket.destroy(), SSE_CUTOFF_GRACE_MS);
      timer.unref();
      socket.once('close', () => clearTimeout(timer));
    }
  }

  #wakeDrainWaiters(): void {
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const w of waiters) w();
  }

  /** The stream is over: by our end, the client's disconnect or an error. */
  #onClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#keepAlive);
    this.#stopExpiry();
    this.#wakeDrainWaiters();
    this.#sub?.close();
    this.#o.onClose(this);
  }

  /** Ends the stream without a word (server shutdown): clients reconnect with their Last-Event-ID. */
  close(): void {
    if (this.#closed) return;
    this.#res.destroy();
    this.#onClose();
  }
}
