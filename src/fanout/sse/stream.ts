/**
 * One Server-Sent Events response carrying one subscription: the SSE transport's writer
 * and renderer. The send queue and its slow-consumer rule are the core's; this file owns
 * the response: the keep-alive comments, the token's expiry, the client's disconnect.
 *
 * What each subscription callback looks like on the wire is the {@link SseDialect}'s
 * business: runstream's own stream (routes.ts) and the LangGraph-compatible join
 * (langgraph/join.ts) share everything here and differ only in framing.
 *
 * The response's status line is written lazily, with the first frame: an error found
 * before anything was streamed (a cursor past the head, an expired offset, a database that
 * is down) is still answered as a plain HTTP error with its status code.
 */
import type { ServerResponse } from 'node:http';
import { watchExpiry } from '../../auth/expiry.js';
import type { Principal } from '../../auth/principal.js';
import type { RunStatusName } from '../../domain/run-lifecycle.js';
import { ErrorCode, RunstreamError, TokenExpiredError } from '../../errors.js';
import { sendError } from '../../http/util.js';
import type { Logger } from '../../logger.js';
import type { ChatFrame } from '../core/chat-view.js';
import { QueuedSink, type Renderer } from '../core/queued-sink.js';
import type { SendQueue } from '../core/send-queue.js';
import type { SubscriptionService } from '../core/service.js';
import type { DeliveredEvent, Subscription } from '../core/subscription.js';

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
  /** The run ended at `seq` with `status`; the response ends after these. */
  end(runId: string, seq: number, status: RunStatusName): readonly SseFrame[];
  /** The thread or run was deleted; the response ends after these. */
  deleted(threadId: string, runId: string | undefined, cursor: number): readonly SseFrame[];
  /** The stream failed after it started; `cursor` is where to resume. The response ends after these. */
  error(err: RunstreamError, cursor: number): readonly SseFrame[];
  /** A chat view frame; absent: this dialect offers no chat view. */
  chat?(frame: ChatFrame): readonly SseFrame[];
}

export interface SseStreamOptions {
  readonly res: ServerResponse;
  readonly dialect: SseDialect;
  readonly service: SubscriptionService;
  readonly keepAliveMs: number;
  /** Bytes queued for the socket past which the client is cut off as too slow. */
  readonly maxBufferedBytes: number;
  /** Who is reading: when its token expires, the stream ends with a `token_expired` error. */
  readonly principal: Principal;
  /** Extra response headers (e.g. `Location` for the LangGraph SDK's reconnects). */
  readonly headers?: Readonly<Record<string, string>>;
  /**
   * The client came back with `Last-Event-ID`: when its run had already ended before
   * anything was sent, answer 204 (which tells an EventSource to stop reconnecting).
   */
  readonly resumed?: boolean;
  readonly log: Logger;
  /** Called once when the stream is over; `byClient` when the client went away first. */
  readonly onClose: (byClient: boolean) => void;
}

/** Headers of every SSE response. */
export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  // nginx buffers proxied responses unless told not to; an SSE stream must not be.
  'x-accel-buffering': 'no',
} as const;

export class SseStream {
  readonly #o: SseStreamOptions;
  readonly #res: ServerResponse;
  readonly queue: SendQueue<string>;
  readonly sink: QueuedSink<string>;
  #sub: Subscription | undefined;
  #closed = false;
  /** The client went away before the server ended the response. */
  #closedByClient = false;
  /** The last `id:` written: keep-alives move it forward when a filter skipped events. */
  #lastId = -1;
  #keepAlive: NodeJS.Timeout | undefined;
  #stopExpiry: () => void = () => undefined;

  constructor(o: SseStreamOptions) {
    this.#o = o;
    this.#res = o.res;
    this.queue = o.service.queue<string>(
      'sse',
      {
        write: (text, done) => {
          this.#open();
          this.#res.write(text, () => done());
        },
        size: (text) => Buffer.byteLength(text),
      },
      o.maxBufferedBytes,
      () => this.#cutOffSlowConsumer(),
    );
    this.sink = new QueuedSink(this.queue, this.#renderer(), (_sub, how) => {
      if (how.kind === 'error' && !this.#res.headersSent) {
        sendError(this.#res, how.error);
        this.#onClose();
        return;
      }
      if (how.kind === 'end' && this.#o.resumed && !this.#res.headersSent) {
        this.#res.writeHead(204).end();
        this.#onClose();
        return;
      }
      this.#finish();
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

  #renderer(): Renderer<string> {
    const d = this.#o.dialect;
    const text = (frames: readonly SseFrame[]): string | undefined => {
      if (frames.length === 0) return undefined;
      for (const f of frames) if (f.id !== undefined) this.#lastId = f.id;
      return frames.length === 1 ? formatSse(frames[0] as SseFrame) : frames.map(formatSse).join('');
    };
    return {
      event: (_sub, e) => text(d.event(e)),
      live: (_sub, seq) => {
        const t = text(d.live(seq));
        // A client waiting for the response's headers (EventSource's `open`, an SDK's fetch)
        // gets them now, even when the dialect has nothing to say about going live.
        if (!this.#closed && !this.#res.headersSent) {
          this.#open();
          this.#res.flushHeaders();
        }
        return t;
      },
      end: (_sub, runId, seq, status) =>
        this.#o.resumed && !this.#res.headersSent ? undefined : text(d.end(runId, seq, status)),
      deleted: (sub, runId) => text(d.deleted(sub.threadId, runId, sub.resumeCursor)),
      // Before anything was streamed, an error is an HTTP error (the ending hook sends it).
      error: (sub, err) => (this.#res.headersSent ? text(d.error(err, sub.resumeCursor)) : undefined),
      ...(d.chat ? { chat: (_sub: Subscription, frame: ChatFrame) => text(d.chat?.(frame) ?? []) } : {}),
    };
  }

  #open(): void {
    if (this.#res.headersSent) return;
    this.#res.writeHead(200, { ...SSE_HEADERS, ...this.#o.headers });
  }

  /** Ends the response after what was queued. */
  #finish(): void {
    if (this.#closed) return;
    this.#open();
    this.#res.end();
    this.#onClose();
  }

  /** An error the stream itself found (an expired token): an HTTP error before streaming, else an error frame. */
  #fail(err: RunstreamError): void {
    if (this.#closed) return;
    const cursor = this.#sub?.resumeCursor ?? 0;
    this.#sub?.close();
    if (!this.#res.headersSent) {
      sendError(this.#res, err);
      this.#onClose();
      return;
    }
    const frames = this.#o.dialect.error(err, cursor);
    if (frames.length > 0) this.queue.sendFinal(frames.map(formatSse).join(''));
    this.#finish();
  }

  /**
   * A comment keeps proxies and idle-timeout watchdogs from closing a quiet stream. When
   * a filter has skipped events since the last id, an `id:` line rides along: a block
   * with an id and no data dispatches no event, but moves the client's Last-Event-ID, so
   * a reconnect does not re-read what was skipped.
   */
  #sendKeepAlive(): void {
    if (this.#closed || this.queue.closed) return;
    const cursor = this.#sub?.resumeCursor ?? -1;
    const moved = this.#lastId >= 0 && cursor > this.#lastId;
    if (moved) this.#lastId = cursor;
    this.queue.send(formatSse(moved ? { comment: 'keep-alive', id: cursor } : { comment: 'keep-alive' }));
  }

  /** Past the queue limit: say where the client stopped, end the response, drop the socket later. */
  #cutOffSlowConsumer(): void {
    const cursor = this.#sub?.resumeCursor ?? 0;
    this.#o.log.info(
      { queuedBytes: this.queue.queuedBytes, cursor, thread: this.#sub?.threadId },
      'cut off slow sse consumer',
    );
    this.#fail(
      new RunstreamError(
        ErrorCode.SlowConsumer,
        `send queue limit of ${this.#o.maxBufferedBytes} bytes exceeded; reconnect with Last-Event-ID ${cursor}`,
      ),
    );
    const socket = this.#res.socket;
    if (socket && !socket.destroyed) {
      const timer = setTimeout(() => socket.destroy(), SSE_CUTOFF_GRACE_MS);
      timer.unref();
      socket.once('close', () => clearTimeout(timer));
    }
  }

  /** The stream is over: by our end, the client's disconnect or an error. */
  #onClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#keepAlive);
    this.#stopExpiry();
    this.#sub?.close();
    // The response is over: what it holds leaves the node's budget (a cut-off client's last
    // bytes stay with its socket for at most the grace period).
    this.queue.dispose();
    this.#o.onClose(this.#closedByClient);
  }

  /** Ends the stream without a word (server shutdown): clients reconnect with their Last-Event-ID. */
  close(): void {
    if (this.#closed) return;
    this.#res.destroy();
    this.#onClose();
  }
}
