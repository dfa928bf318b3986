/**
 * The WebSocket transport (`/v1/ws`): one connection holds many subscriptions. It is a
 * parser of client frames (strict: an unknown key is refused naming it), a renderer of
 * server frames (frames.ts) and a writer into the socket; the subscription steps, the send
 * queue and the slow-consumer rule are the core's (fanout/core/).
 */
import type { Duplex } from 'node:stream';
import type { WebSocket } from 'ws';
import { watchExpiry } from '../../auth/expiry.js';
import type { Principal } from '../../auth/principal.js';
import { requiredId } from '../../domain/ids.js';
import {
  ErrorCode,
  InvalidArgumentError,
  PermissionDeniedError,
  quote,
  RunstreamError,
  toRunstreamError,
} from '../../errors.js';
import { type CancelReceipt, type CancelSource, checkReason, type RunControl } from '../../ingest/control.js';
import type { Logger } from '../../logger.js';
import { liveDelivery } from '../core/delivery-turns.js';
import { QueuedSink, type Renderer } from '../core/queued-sink.js';
import { refuseUnknownKeys, SUBSCRIBE_FIELDS, subscribeRequest } from '../core/request.js';
import type { SendQueue } from '../core/send-queue.js';
import type { SubscriptionService } from '../core/service.js';
import type { Subscription } from '../core/subscription.js';
import { RUN_COPY_LIMIT, runChunks } from './frame-runs.js';
import {
  cancelRequestedFrame,
  chatFrame,
  deletedFrame,
  endFrame,
  errorFrame,
  eventFrame,
  liveFrame,
  sharedEventFrame,
  unsubscribedFrame,
} from './frames.js';

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

/** The keys each client frame may carry. */
const SUBSCRIBE_KEYS: ReadonlySet<string> = new Set(['type', 'id', 'on_disconnect', ...SUBSCRIBE_FIELDS]);
const UNSUBSCRIBE_KEYS: ReadonlySet<string> = new Set(['type', 'id']);
const CANCEL_KEYS: ReadonlySet<string> = new Set(['type', 'id', 'thread_id', 'run_id', 'reason']);

export interface ConnectionOptions {
  readonly service: SubscriptionService;
  readonly maxSubscriptions: number;
  /** Bytes queued for the socket past which the client is cut off as too slow. */
  readonly maxBufferedBytes: number;
  /** Who authenticated at upgrade: checked on every subscribe; its expiry ends the connection. */
  readonly principal: Principal;
  /** Cancel requests (`cancel` frames, `on_disconnect: "cancel"`); absent: refused as unavailable. */
  readonly control?: RunControl | undefined;
  /** Called once when the connection is over. */
  readonly onClose: () => void;
  readonly log: Logger;
}

/** A frame's text, or a whole WebSocket frame as it goes on the wire (a shared event frame: frames.ts). */
type Frame = string | Buffer;

/** Frames collected for one write, with their sizes and their send queue's releases. */
interface FrameRun {
  readonly frames: Frame[];
  readonly bytes: number[];
  readonly done: (() => void)[];
}

/** WebSocket.OPEN (a value import of ws's class is not needed for it). */
const OPEN = 1;

export class Connection {
  readonly #ws: WebSocket;
  readonly #o: ConnectionOptions;
  readonly #subs = new Map<string, Subscription>();
  readonly #queue: SendQueue<Frame>;
  readonly #sink: QueuedSink<Frame>;
  #closed = false;
  /** Set when the server closes the connection (shutdown, slow consumer, token expiry): no on_disconnect cancel then. */
  #closedByServer = false;
  /** Subscriptions whose run is cancelled if the client goes away while they are active. */
  readonly #cancelOnDisconnect = new Map<Subscription, string>();
  readonly #stopExpiry: () => void;
  /** The frames of the run being written ({@link #corked}): they leave as one buffer when it ends. */
  #run: FrameRun | undefined;
  alive = true;

  constructor(ws: WebSocket, o: ConnectionOptions) {
    this.#ws = ws;
    this.#o = o;
    this.#queue = o.service.queue<Frame>(
      'websocket',
      {
        write: (frame, done, bytes) => this.#write(frame, done, bytes),
        size: (frame) => (typeof frame === 'string' ? Buffer.byteLength(frame) : frame.length),
        cork: (send) => this.#corked(send),
      },
      o.maxBufferedBytes,
      (queued) => this.#cutOffSlowConsumer(queued),
    );
    this.#sink = new QueuedSink(this.#queue, RENDERER, (sub) => this.#forget(sub));
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

  /**
   * The socket is corked around `send`: its frames leave in one write, not one write each;
   * in a live delivery turn, one write for every subscription of the connection (delivery-turns.ts).
   */
  #corked(send: () => void): void {
    const socket = this.#socket();
    if (socket === undefined || this.#closed) {
      send();
      return;
    }
    liveDelivery.corked(socket, () => this.#inRun(send));
  }

  /** ws has no public cork or socket; its maintainers point to the socket's (websockets/ws#1999). */
  #socket(): Duplex | undefined {
    return (this.#ws as unknown as { _socket?: Duplex })._socket;
  }

  /** Runs `send`, collecting the frames it writes into one run (frame-runs.ts), written when it returns. */
  #inRun(send: () => void): void {
    if (this.#run !== undefined) {
      send();
      return;
    }
    this.#run = { frames: [], bytes: [], done: [] };
    try {
      send();
    } finally {
      try {
        this.#flushRun();
      } finally {
        this.#run = undefined;
      }
    }
  }

  #write(frame: Frame, done: () => void, bytes: number): void {
    const run = this.#run;
    if (run !== undefined && (typeof frame !== 'string' || bytes < RUN_COPY_LIMIT)) {
      run.frames.push(frame);
      run.bytes.push(bytes);
      run.done.push(done);
      return;
    }
    // A large text, not copied: what the run holds goes first, then the frame as ws writes it.
    if (run !== undefined) this.#flushRun();
    if (typeof frame === 'string') this.#ws.send(frame, TEXT, () => done());
    else this.#writeWire([frame], [done]);
  }

  /** Writes the frames collected so far (collecting goes on, if it was on). */
  #flushRun(): void {
    const run = this.#run;
    if (run === undefined || run.frames.length === 0) return;
    this.#run = { frames: [], bytes: [], done: [] };
    const only = run.frames[0];
    // One text gains nothing from a copy.
    if (run.frames.length === 1 && typeof only === 'string') {
      const done = run.done[0] as () => void;
      this.#ws.send(only, TEXT, () => done());
      return;
    }
    this.#writeWire(runChunks(run.frames, run.bytes), run.done);
  }

  /**
   * Writes whole frames on the socket, in order; `done` are called once the last is written out.
   * A closing WebSocket is ws's to refuse frames on: ws would not send these either.
   */
  #writeWire(chunks: readonly Buffer[], done: readonly (() => void)[]): void {
    const socket = this.#socket();
    const written = (): void => {
      for (const d of done) d();
    };
    if (socket === undefined || this.#ws.readyState !== OPEN) {
      process.nextTick(written);
      return;
    }
    const last = chunks.length - 1;
    for (let i = 0; i < last; i++) socket.write(chunks[i] as Buffer);
    socket.write(chunks[last] as Buffer, written);
  }

  /** A frame of the connection's own (not a subscription's): answers to frames, refusals. */
  #reply(frame: string): void {
    this.#queue.send(frame);
  }

  #cursors(): Record<string, number> {
    return Object.fromEntries([...this.#subs.values()].map((s) => [s.id, s.resumeCursor]));
  }

  /** Tells the client where each subscription stopped, then closes: it resumes from there. */
  #cutOffSlowConsumer(queuedBytes: number): void {
    const cursors = this.#cursors();
    this.#queue.sendFinal(
      errorFrame(null, 'slow_consumer', 'send queue limit exceeded; resubscribe from the given seqs', {
        cursors,
      }),
    );
    this.#o.log.info({ queuedBytes, cursors }, 'cut off slow consumer');
    this.close(CLOSE_SLOW_CONSUMER, 'slow consumer');
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
      if (e.code === ErrorCode.Internal) this.#o.log.error({ err }, 'websocket frame failed');
      this.#reply(errorFrame(subId, e.wsCode, e.message));
    }
  }

  #subscribe(msg: Record<string, unknown>): void {
    refuseUnknownKeys(Object.keys(msg), SUBSCRIBE_KEYS, 'a subscribe frame', 'frame');
    const id = requireSubId(msg.id);
    const req = subscribeRequest(msg);
    if (req.view === 'chat' && RENDERER.chat === undefined) {
      throw new InvalidArgumentError('view', 'chat is not available here');
    }
    const cancelRunId = this.#parseOnDisconnect(msg, req.filter.runId, req.threadId);
    if (this.#subs.has(id)) {
      throw new InvalidArgumentError(
        'id',
        `subscription ${JSON.stringify(id)} already exists on this connection`,
      );
    }
    if (this.#subs.size >= this.#o.maxSubscriptions) {
      throw new RunstreamError(
        ErrorCode.ResourceExhausted,
        `at most ${this.#o.maxSubscriptions} subscriptions per connection (RS_WS_MAX_SUBSCRIPTIONS)`,
      );
    }
    const sub = this.#o.service.open(this.#o.principal, req, this.#sink, {
      id,
      onClose: (s) => this.#forget(s),
    });
    if (!sub.closed) {
      this.#subs.set(id, sub);
      if (cancelRunId !== undefined) this.#cancelOnDisconnect.set(sub, cancelRunId);
    }
  }

  #forget(sub: Subscription): void {
    if (this.#subs.get(sub.id) === sub) this.#subs.delete(sub.id);
    this.#cancelOnDisconnect.delete(sub);
  }

  /** `on_disconnect`: `"none"` (the default) or `"cancel"`, which needs a run and the right to cancel. */
  #parseOnDisconnect(
    msg: Record<string, unknown>,
    runId: string | undefined,
    threadId: string,
  ): string | undefined {
    const v = msg.on_disconnect;
    if (v === undefined || v === null || v === 'none') return undefined;
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
    return runId;
  }

  /** `{"type":"cancel","id","thread_id","run_id","reason"?}`: answered by `cancel_requested` or an error frame. */
  #cancel(msg: Record<string, unknown>): void {
    refuseUnknownKeys(Object.keys(msg), CANCEL_KEYS, 'a cancel frame', 'frame');
    const id = requireSubId(msg.id);
    const threadId = requiredId(msg.thread_id, 'thread_id');
    const runId = requiredId(msg.run_id, 'run_id');
    const reason = msg.reason ?? '';
    checkReason(reason);
    this.#requestCancel(threadId, runId, reason, 'websocket').then(
      (receipt) => this.#reply(cancelRequestedFrame(id, receipt)),
      (err: unknown) => {
        const e = toRunstreamError(err);
        this.#reply(errorFrame(id, e.wsCode, e.message));
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
    refuseUnknownKeys(Object.keys(msg), UNSUBSCRIBE_KEYS, 'an unsubscribe frame', 'frame');
    const id = requireSubId(msg.id);
    const sub = this.#subs.get(id);
    if (!sub)
      throw new RunstreamError(
        ErrorCode.NotFound,
        `no subscription ${JSON.stringify(id)} on this connection`,
      );
    sub.close();
    this.#reply(unsubscribedFrame(id, sub.resumeCursor));
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
    // Frames collected before the close (a slow consumer's cursors) leave before its close frame.
    this.#flushRun();
    this.#ws.close(code, reason);
    this.#onClose();
  }

  /** The token expired: say where each subscription stopped, so the client resumes with a new token. */
  #expire(): void {
    if (this.#closed) return;
    const cursors = this.#cursors();
    this.#queue.sendFinal(
      errorFrame(
        null,
        'token_expired',
        'token expired; reconnect with a fresh token and resubscribe from the given seqs',
        { cursors },
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
    // What the socket did not write will not be written: its bytes leave the node's budget.
    this.#queue.dispose();
    this.#o.onClose();
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

/** How subscription callbacks look on a WebSocket (frames.ts): one renderer for every connection. */
const RENDERER: Renderer<Frame> = {
  // A live event's frame is built once and shared by its subscribers; a catch-up event's is its own.
  event: (sub, e) => (e.shared ? sharedEventFrame(sub.id, e) : eventFrame(sub.id, e.json())),
  live: (sub, seq) => liveFrame(sub.id, seq),
  end: (sub, runId, seq, status) => endFrame(sub.id, runId, seq, status),
  deleted: (sub, runId) => deletedFrame(sub.id, sub.threadId, runId),
  error: (sub, err) => errorFrame(sub.id, err.wsCode, err.message, { seq: sub.resumeCursor }),
  chat: (sub, frame) => chatFrame(sub.id, frame.json),
};

function requireSubId(id: unknown): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > SUB_ID_MAX_LENGTH) {
    throw new InvalidArgumentError('id', `is required: a string of 1-${SUB_ID_MAX_LENGTH} characters`);
  }
  return id;
}
