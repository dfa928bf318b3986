/**
 * `runstream.v1.Subscriber`: the subscription for backend consumers, over a gRPC server
 * stream. Same cursors, filters, `live` marker, run end and errors as every transport;
 * each call is one subscription of the core, whose frames are `SubscribeResponse`s. An
 * error ends the call with its status, the stable code (`rs-error-code`) and the cursor
 * (`rs-cursor`) as trailers; a run's end or a deletion ends it with OK and the cursor.
 *
 * Backpressure is the core's send queue: catch-up waits while the call is backlogged;
 * live messages queue; past `maxBufferedBytes` queued the call ends with
 * RESOURCE_EXHAUSTED and the cursor to resume from, exactly like a slow WebSocket client.
 */
import { type Http2Stream, constants as http2Constants } from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { watchExpiry } from '../../auth/expiry.js';
import { type Authenticator, bearerFromGrpc } from '../../auth/principal.js';
import { checkedCategories, requestCategories } from '../../domain/event.js';
import { ErrorCode, RunstreamError, TokenExpiredError, toRunstreamError } from '../../errors.js';
import type { SubscribeRequest__Output } from '../../gen/runstream/v1/SubscribeRequest.js';
import type { SubscribeResponse } from '../../gen/runstream/v1/SubscribeResponse.js';
import type { SubscriberHandlers } from '../../gen/runstream/v1/Subscriber.js';
import type { ProtoGrpcType as SubscriberProto } from '../../gen/subscriber.js';
import type { GrpcServer } from '../../grpc/server.js';
import type { Logger } from '../../logger.js';
import { loadProto } from '../../proto.js';
import { QueuedSink, type Renderer } from '../core/queued-sink.js';
import { type SubscribeRequest, subscribeRequest } from '../core/request.js';
import type { SendQueue } from '../core/send-queue.js';
import type { SubscriptionService } from '../core/service.js';
import type { Subscription } from '../core/subscription.js';
import { eventProtoFromJson } from './event.js';

export const SUBSCRIBER_SERVICE = 'runstream.v1.Subscriber';
/** Trailing metadata of a failed call: the error's stable code (`RS_ERR_…`). */
export const ERROR_CODE_TRAILER = 'rs-error-code';
/**
 * Trailing metadata of every call that ends: the last seq the subscription passed
 * (delivered or skipped by a filter). Resubscribing with `after_seq` = this loses nothing.
 */
export const CURSOR_TRAILER = 'rs-cursor';
/**
 * How long an ended call may go without a message written out before its HTTP/2 stream is
 * reset, ms, at least (the slow-consumer stall, if longer, counts instead: one rule for a call
 * that has ended and one that has not). Its status goes out after the messages it was sent, so a
 * peer that never reads (its stream's window shut) would hold the call, its buffers and its
 * place under the node's call cap for good; HTTP/2 keepalive pings, answered by the connection,
 * do not notice. A peer that reads, however slowly, is never reset.
 */
export const GRPC_END_GRACE_MS = 10_000;

export interface GrpcSubscribeOptions {
  readonly service: SubscriptionService;
  /** Bytes queued on one call past which the subscriber is cut off as too slow. */
  readonly maxBufferedBytes: number;
  /** The slow-consumer stall (RS_SLOW_CONSUMER_STALL_MS): an ended call's grace is at least this. */
  readonly stallMs?: number | undefined;
  readonly auth: Authenticator;
  readonly log: Logger;
}

type Call = grpc.ServerWritableStream<SubscribeRequest__Output, SubscribeResponse>;

/** A queued message and the bytes it counts as (the event's JSON length, close to its proto size). */
interface Message {
  readonly msg: SubscribeResponse;
  readonly bytes: number;
}

/** `runstream.v1.Subscriber`; {@link close} ends every open call so the server can stop at once. */
export class GrpcSubscribeService {
  readonly #o: GrpcSubscribeOptions;
  readonly #calls = new Set<SubscribeCall>();
  #closed = false;

  constructor(o: GrpcSubscribeOptions) {
    this.#o = o;
  }

  register(server: GrpcServer): void {
    const handlers: SubscriberHandlers = {
      Subscribe: (call) => {
        void this.#subscribe(call);
      },
    };
    // src/proto.ts types the package by runstream.proto; subscriber.proto's root type adds this service.
    const proto = loadProto().proto as unknown as SubscriberProto;
    server.addService(SUBSCRIBER_SERVICE, proto.runstream.v1.Subscriber.service, handlers);
  }

  /** Number of open calls. */
  get size(): number {
    return this.#calls.size;
  }

  async #subscribe(call: Call): Promise<void> {
    const sc = new SubscribeCall(call, this.#o);
    this.#calls.add(sc);
    sc.onDone = () => this.#calls.delete(sc);
    try {
      if (this.#closed) throw new RunstreamError(ErrorCode.Unavailable, 'server shutting down');
      sc.admitted(this.#o.service.admit('grpc'));
      const principal = await this.#o.auth.authenticate(bearerFromGrpc(call.metadata));
      const req = parseSubscribeRequest(call.request);
      if (sc.closed) return;
      this.#o.service.authorize(principal, req);
      sc.attach(this.#o.service.open(principal, req, sc.sink), principal);
    } catch (err) {
      sc.fail(toRunstreamError(err));
    }
  }

  /** Ends every open call with UNAVAILABLE and its cursor: the clients resume on another node. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const sc of [...this.#calls]) {
      sc.fail(
        new RunstreamError(ErrorCode.Unavailable, 'server shutting down; resubscribe after_seq the cursor'),
      );
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** One Subscribe call: the writer and renderer of its subscription. */
class SubscribeCall {
  readonly #call: Call;
  readonly #log: Logger;
  readonly queue: SendQueue<Message>;
  readonly sink: QueuedSink<Message>;
  #sub: Subscription | undefined;
  #stopExpiry: () => void = () => undefined;
  #release: () => void = () => undefined;
  #closed = false;
  readonly #graceMs: number;
  /** Once ended, while its stream is open: resets the stream when nothing was written out for the grace. */
  #reset: NodeJS.Timeout | undefined;
  onDone: () => void = () => undefined;

  constructor(call: Call, o: GrpcSubscribeOptions) {
    this.#call = call;
    this.#log = o.log;
    this.#graceMs = Math.max(GRPC_END_GRACE_MS, o.stallMs ?? 0);
    this.queue = o.service.queue<Message>(
      'grpc',
      {
        write: (m, done) =>
          call.write(m.msg, () => {
            done();
            this.#reset?.refresh();
          }),
        size: (m) => m.bytes,
      },
      o.maxBufferedBytes,
      () => this.#cutOff(),
    );
    this.sink = new QueuedSink(this.queue, RENDERER, (sub, how) => {
      if (how.kind === 'error') this.fail(how.error);
      else this.#endOk(sub.resumeCursor);
    });
    call.on('cancelled', () => this.#finish());
    // A failed write (the peer went away) surfaces here; the call is over either way.
    call.on('error', () => this.#finish());
  }

  get closed(): boolean {
    return this.#closed;
  }

  admitted(release: () => void): void {
    this.#release = release;
    if (this.#closed) release();
  }

  /** Binds the subscription; a token that expires ends the call then. */
  attach(sub: Subscription, principal: import('../../auth/principal.js').Principal): void {
    this.#sub = sub;
    if (this.#closed) {
      sub.close();
      return;
    }
    this.#stopExpiry = watchExpiry(principal, () =>
      this.fail(new TokenExpiredError('the token expired; resubscribe with a fresh one')),
    );
  }

  #cutOff(): void {
    this.#log.info(
      { queuedBytes: this.queue.queuedBytes, cursor: this.#sub?.resumeCursor },
      'cut off slow grpc subscriber',
    );
    this.fail(
      new RunstreamError(
        ErrorCode.SlowConsumer,
        `send queue limit exceeded; resubscribe after_seq ${this.#sub?.resumeCursor ?? 0}`,
      ),
    );
  }

  /** Ends the call with OK; what was queued is still delivered first. */
  #endOk(cursor: number): void {
    if (this.#closed) return;
    const trailers = new grpc.Metadata();
    trailers.set(CURSOR_TRAILER, String(cursor));
    this.#finish();
    this.#call.end(trailers);
  }

  /**
   * Ends the call with the error's status, its code and the cursor as trailers. What was
   * queued is delivered first, so the cursor is exact.
   */
  fail(err: RunstreamError): void {
    if (this.#closed) return;
    if (err.code === ErrorCode.Internal) this.#log.error({ err }, 'grpc subscription failed');
    const metadata = new grpc.Metadata();
    metadata.set(ERROR_CODE_TRAILER, err.code);
    if (this.#sub) metadata.set(CURSOR_TRAILER, String(this.#sub.resumeCursor));
    this.#finish();
    this.#call.emit('error', { code: err.grpcStatus, details: err.message, metadata });
  }

  /**
   * The subscription is over. The call counts as open (its queue's bytes in the node's budget,
   * its place under the cap) until its HTTP/2 stream has closed, which one whose peer stopped
   * reading does only when reset: after the grace ({@link GRPC_END_GRACE_MS}) with nothing
   * written out.
   */
  #finish(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#stopExpiry();
    this.#sub?.close();
    const done = (): void => {
      this.queue.dispose();
      this.#release();
      this.onDone();
    };
    const stream = http2StreamOf(this.#call);
    if (stream === undefined || stream.closed || stream.destroyed) {
      done();
      return;
    }
    this.#reset = setTimeout(() => {
      this.#log.info(
        { queuedBytes: this.queue.queuedBytes },
        'reset a grpc call whose peer stopped reading after its end',
      );
      stream.close(http2Constants.NGHTTP2_CANCEL);
    }, this.#graceMs);
    this.#reset.unref();
    stream.once('close', () => {
      clearTimeout(this.#reset);
      this.#reset = undefined;
      done();
    });
  }
}

/**
 * The HTTP/2 stream under a grpc-js server call: grpc-js keeps it on the innermost of the
 * call's interceptor chain (`call.call`, then each `nextCall`) and offers no public way to
 * reset it. Undefined if this grpc-js keeps it elsewhere (the call then ends as it always did).
 */
function http2StreamOf(call: Call): Http2Stream | undefined {
  let c: unknown = (call as unknown as { call?: unknown }).call;
  for (let depth = 0; depth < 8 && typeof c === 'object' && c !== null; depth++) {
    const stream = (c as { stream?: unknown }).stream;
    if (stream && typeof (stream as Http2Stream).close === 'function' && 'closed' in (stream as object)) {
      return stream as Http2Stream;
    }
    c = (c as { nextCall?: unknown }).nextCall;
  }
  return undefined;
}

/** `SubscribeResponse`s, and what each counts as in the queue. */
const RENDERER: Renderer<Message> = {
  event: (_sub, e) => {
    const json = e.json();
    return { msg: { event: eventProtoFromJson(json) }, bytes: json.length };
  },
  live: (_sub, seq) => ({ msg: { live: { seq } }, bytes: 16 }),
  end: (_sub, runId, seq, status) => ({ msg: { end: { run_id: runId, seq, status } }, bytes: 32 }),
  deleted: (sub, runId) => ({
    msg: { deleted: { thread_id: sub.threadId, run_id: runId ?? '' } },
    bytes: 32,
  }),
  // An error is the call's status, not a message.
  error: () => undefined,
};

/** Validates a request by the core's rules; field names in errors are the proto's. */
export function parseSubscribeRequest(req: SubscribeRequest__Output): SubscribeRequest {
  // Proto cannot tell an empty list from an absent one: empty means "no filter".
  return checkedCategories(req.categories, req.category_names, () =>
    subscribeRequest({
      thread_id: req.thread_id,
      after_seq: req.start === 'after_seq' ? req.after_seq : undefined,
      from_offset: req.start === 'from_offset' ? req.from_offset : undefined,
      live_only: req.start === 'live_only' ? req.live_only : undefined,
      run_id: req.run_id === '' ? undefined : req.run_id,
      categories:
        req.categories.length + req.category_names.length === 0
          ? undefined
          : requestCategories(req.categories, req.category_names),
      event_types: req.event_types.length === 0 ? undefined : req.event_types,
    }),
  );
}
