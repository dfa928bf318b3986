/**
 * `runstream.v1.Subscriber`: the WebSocket subscription for backend consumers, over a
 * gRPC server stream. Same cursors, filters, `live` marker, run end and errors; each
 * call is one {@link Subscription} whose sink is the call.
 *
 * Backpressure: catch-up waits whenever `call.write` returns false, until 'drain'. Live
 * events cannot wait, so they queue; past `maxBufferedBytes` queued the call ends with
 * RESOURCE_EXHAUSTED and the cursor to resume from, exactly like a slow WebSocket client.
 */
import * as grpc from '@grpc/grpc-js';
import { watchExpiry } from '../auth/expiry.js';
import { type Authenticator, bearerFromGrpc, type Principal } from '../auth/principal.js';
import { scopedFilter } from '../auth/scope.js';
import {
  ErrorCode,
  InvalidArgumentError,
  PermissionDeniedError,
  RunstreamError,
  TokenExpiredError,
  toRunstreamError,
} from '../errors.js';
import type { SubscribeRequest__Output } from '../gen/runstream/v1/SubscribeRequest.js';
import type { SubscribeResponse } from '../gen/runstream/v1/SubscribeResponse.js';
import type { SubscriberHandlers } from '../gen/runstream/v1/Subscriber.js';
import type { ProtoGrpcType as SubscriberProto } from '../gen/subscriber.js';
import type { GrpcServer } from '../grpc/server.js';
import { ID_PATTERN } from '../ingest/validate.js';
import type { Logger } from '../logger.js';
import { loadProto } from '../proto.js';
import { type EventFilter, parseFilter } from './filter.js';
import { eventProtoFromJson } from './grpc-event.js';
import {
  type DeliveredEvent,
  type StartCursor,
  Subscription,
  type SubscriptionResources,
  type SubscriptionSink,
  subscriptionResources,
} from './subscription.js';

export const SUBSCRIBER_SERVICE = 'runstream.v1.Subscriber';
/** Trailing metadata of a failed call: the error's stable code (`RS_ERR_…`). */
export const ERROR_CODE_TRAILER = 'rs-error-code';
/**
 * Trailing metadata of every call that ends: the last seq the subscription passed
 * (delivered or skipped by a filter). Resubscribing with `after_seq` = this loses nothing.
 */
export const CURSOR_TRAILER = 'rs-cursor';

export interface GrpcSubscribeOptions extends SubscriptionResources {
  /** Bytes queued on one call past which the subscriber is cut off as too slow. */
  readonly maxBufferedBytes: number;
  /** Calls held at once (RS_GRPC_SUBSCRIBE_MAX_CALLS); past it a new one is RESOURCE_EXHAUSTED. */
  readonly maxCalls: number;
  readonly auth: Authenticator;
}

type Call = grpc.ServerWritableStream<SubscribeRequest__Output, SubscribeResponse>;

/** `runstream.v1.Subscriber`; {@link close} ends every open call so the server can stop at once. */
export class GrpcSubscribeService {
  readonly #o: GrpcSubscribeOptions;
  readonly #calls = new Set<SubscribeCall>();
  #nextId = 0;
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
    const sc = new SubscribeCall(call, this.#o.maxBufferedBytes, this.#o.log);
    this.#calls.add(sc);
    sc.onDone = () => this.#calls.delete(sc);
    try {
      if (this.#closed) throw new RunstreamError(ErrorCode.Unavailable, 'server shutting down');
      if (this.#calls.size > this.#o.maxCalls) {
        throw new RunstreamError(
          ErrorCode.ResourceExhausted,
          `this node holds its maximum of ${this.#o.maxCalls} Subscribe calls (RS_GRPC_SUBSCRIBE_MAX_CALLS); retry later or on another node`,
        );
      }
      const principal = await this.#o.auth.authenticate(bearerFromGrpc(call.metadata));
      const req = parseSubscribeRequest(call.request);
      if (!principal.canRead(req.threadId)) {
        throw new PermissionDeniedError(`this token may not read thread ${req.threadId}`);
      }
      if (sc.closed) return;
      const sub = new Subscription({
        id: `grpc-${++this.#nextId}`,
        threadId: req.threadId,
        start: req.start,
        filter: scopedFilter(req.filter, principal),
        ...subscriptionResources(this.#o),
        sink: sc,
        onClose: () => undefined,
      });
      sc.attach(sub, principal);
      await sub.start();
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

/** One Subscribe call: the sink of its subscription. */
class SubscribeCall implements SubscriptionSink {
  readonly #call: Call;
  readonly #maxBufferedBytes: number;
  readonly #log: Logger;
  #sub: Subscription | undefined;
  /** Bytes handed to the call and not yet written to its HTTP/2 stream. */
  #queuedBytes = 0;
  #drainWaiters: (() => void)[] = [];
  #stopExpiry: () => void = () => undefined;
  #closed = false;
  onDone: () => void = () => undefined;

  constructor(call: Call, maxBufferedBytes: number, log: Logger) {
    this.#call = call;
    this.#maxBufferedBytes = maxBufferedBytes;
    this.#log = log;
    call.on('cancelled', () => this.#finish());
    call.on('drain', () => this.#wakeIfDrained());
    // A failed write (the peer went away) surfaces here; the call is over either way.
    call.on('error', () => this.#finish());
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Catch-up pauses while the call's buffer wants draining (`write` returned false) or more
   * than the watermark is queued, so a replay stays well under the cut-off limit.
   */
  get backlogged(): boolean {
    return this.#call.writableNeedDrain || this.#queuedBytes > this.#lowWatermark;
  }

  get #lowWatermark(): number {
    return Math.min(1024 * 1024, this.#maxBufferedBytes / 4);
  }

  drained(): Promise<void> {
    if (this.#closed || !this.backlogged) return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  /** Binds the subscription; a token that expires ends the call then. */
  attach(sub: Subscription, principal: Principal): void {
    this.#sub = sub;
    this.#stopExpiry = watchExpiry(principal, () =>
      this.fail(new TokenExpiredError('the token expired; resubscribe with a fresh one')),
    );
  }

  event(_sub: Subscription, e: DeliveredEvent): void {
    const json = e.json();
    this.#write({ event: eventProtoFromJson(json) }, json.length);
  }

  live(_sub: Subscription, seq: number): void {
    this.#write({ live: { seq } }, 16);
  }

  end(sub: Subscription, runId: string, seq: number): void {
    this.#write({ end: { run_id: runId, seq } }, 16);
    this.#endOk(sub.cursor);
  }

  deleted(sub: Subscription, runId: string | undefined): void {
    this.#write({ deleted: { thread_id: sub.threadId, run_id: runId ?? '' } }, 16);
    this.#endOk(sub.cursor);
  }

  error(_sub: Subscription, err: RunstreamError): void {
    this.fail(err);
  }

  #write(msg: SubscribeResponse, bytes: number): void {
    if (this.#closed) return;
    // One message always fits an empty queue, however big, or a large event could never be sent.
    if (this.#queuedBytes > 0 && this.#queuedBytes + bytes > this.#maxBufferedBytes) {
      this.#log.info(
        { queuedBytes: this.#queuedBytes, cursor: this.#sub?.cursor },
        'cut off slow grpc subscriber',
      );
      this.fail(
        new RunstreamError(
          ErrorCode.SlowConsumer,
          `send queue limit exceeded; resubscribe after_seq ${this.#sub?.cursor ?? 0}`,
        ),
      );
      return;
    }
    this.#queuedBytes += bytes;
    this.#call.write(msg, () => {
      this.#queuedBytes -= bytes;
      this.#wakeIfDrained();
    });
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
    if (this.#sub) metadata.set(CURSOR_TRAILER, String(this.#sub.cursor));
    this.#finish();
    this.#call.emit('error', { code: err.grpcStatus, details: err.message, metadata });
  }

  #finish(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#stopExpiry();
    this.#sub?.close();
    this.#wake();
    this.onDone();
  }

  #wakeIfDrained(): void {
    if (this.#drainWaiters.length > 0 && !this.backlogged) this.#wake();
  }

  #wake(): void {
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const w of waiters) w();
  }
}

/** A validated Subscribe request. */
export interface ParsedSubscribeRequest {
  readonly threadId: string;
  readonly start: StartCursor;
  readonly filter: EventFilter;
}

/** Validates a request; field names in errors are the proto's. */
export function parseSubscribeRequest(req: SubscribeRequest__Output): ParsedSubscribeRequest {
  if (!ID_PATTERN.test(req.thread_id)) {
    throw new InvalidArgumentError('thread_id', 'is required and must match [A-Za-z0-9_-]{1,128}');
  }
  let start: StartCursor;
  switch (req.start) {
    case undefined:
      start = { kind: 'after_seq', seq: 0 };
      break;
    case 'after_seq':
      start = { kind: 'after_seq', seq: safeInt(req.after_seq, 'after_seq', 0) };
      break;
    case 'from_offset':
      start = { kind: 'from_offset', offset: safeInt(req.from_offset, 'from_offset', 1) };
      break;
    case 'live_only':
      if (req.live_only !== true) throw new InvalidArgumentError('live_only', 'must be true when set');
      start = { kind: 'live' };
      break;
  }
  // Proto cannot tell an empty list from an absent one: empty means "no filter".
  const filter = parseFilter({
    run_id: req.run_id === '' ? undefined : req.run_id,
    categories: req.categories.length === 0 ? undefined : req.categories.map((c) => String(c).toLowerCase()),
    event_types: req.event_types.length === 0 ? undefined : req.event_types,
  });
  return { threadId: req.thread_id, start, filter };
}

function safeInt(v: number | undefined, field: string, min: number): number {
  if (v === undefined || !Number.isSafeInteger(v) || v < min) {
    throw new InvalidArgumentError(
      field,
      min === 0 ? 'must be at most 2^53-1' : `must be an integer >= ${min}`,
    );
  }
  return v;
}
