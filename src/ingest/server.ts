/**
 * `runstream.v1.Ingest`: agents publish the events of their runs here.
 */
import * as grpc from '@grpc/grpc-js';
import { watchExpiry } from '../auth/expiry.js';
import { type Authenticator, bearerFromGrpc, type Principal } from '../auth/principal.js';
import type { LogRecord } from '../domain/event.js';
import { parseTraceparent, TRACEPARENT_KEY } from '../domain/trace.js';
import {
  ErrorCode,
  InvalidArgumentError,
  PermissionDeniedError,
  RunstreamError,
  TokenExpiredError,
  toRunstreamError,
  UnavailableError,
} from '../errors.js';
import type { EventAck } from '../gen/runstream/v1/EventAck.js';
import type { IngestHandlers } from '../gen/runstream/v1/Ingest.js';
import type { PublishRequest__Output } from '../gen/runstream/v1/PublishRequest.js';
import type { PublishResponse } from '../gen/runstream/v1/PublishResponse.js';
import { type GrpcServer, MalformedMessage } from '../grpc/server.js';
import type { LogAck, LogPublisher } from '../log/publisher.js';
import type { Logger } from '../logger.js';
import { type AckLabel, type Metrics, secondsSince } from '../metrics.js';
import type { RunKey } from '../persist/deletions.js';
import { loadProto } from '../proto.js';
import { endWith, SpanKind, startSpan } from '../tracing.js';
import { type ControlFeeds, StreamControls } from './control.js';
import { type InflightBudget, requestBytes } from './inflight.js';
import type { PendingPersist, PersistWaiter } from './persist-waiter.js';
import { type ValidationLimits, validateEvents } from './validate.js';
import { decodePublishRequest, encodePublishResponse } from './wire.js';

export const INGEST_SERVICE = 'runstream.v1.Ingest';

/**
 * The longest an ACCEPTED duplicate waits for Postgres to say whether its original was deleted:
 * responses on a PublishStream go out in order, so the requests after it wait as long.
 */
export const DUPLICATE_CHECK_MAX_MS = 5_000;

/** How much one PublishStream, and the node, hold before they stop taking more. */
export interface IngestLimits {
  /** Requests of one stream received and not yet answered on the wire, past which it is not read. */
  readonly streamMaxInflight: number;
  /** Their bytes (see {@link requestBytes}), likewise. */
  readonly streamMaxInflightBytes: number;
}

export interface IngestServiceOptions {
  readonly publisher: LogPublisher;
  /** The deletion horizons of thread runs, in the order asked (persist/deletions.ts). */
  readonly deletionHorizons: (keys: readonly RunKey[]) => Promise<number[]>;
  /**
   * How long an ACCEPTED request with a duplicate waits for those horizons, ms, before it fails
   * UNAVAILABLE (a PERSISTED one waits within its ack timeout); {@link DUPLICATE_CHECK_MAX_MS}
   * if unset.
   */
  readonly duplicateCheckMs?: number | undefined;
  readonly streamLimits: IngestLimits;
  /** The node's budget of in-flight request bytes, shared by every call. */
  readonly budget: InflightBudget;
  readonly waiter: PersistWaiter;
  readonly limits: ValidationLimits;
  /** Checks the `authorization` metadata of every call and each event's thread. */
  readonly auth: Authenticator;
  readonly log: Logger;
  /** Control messages (cancel) for the runs a PublishStream publishes; none: no controls sent. */
  readonly controls?: ControlFeeds | undefined;
  readonly metrics?: Metrics | undefined;
}

/** A request whose events have been handed to the log; `result` settles with its response. */
interface Issued {
  readonly result: Promise<PublishResponse>;
}

/** `runstream.v1.Ingest`: validates, publishes to the log, acks at the requested level. */
export class IngestService {
  readonly #o: IngestServiceOptions;
  readonly #counters = new Map<
    string,
    { requests: { inc(n?: number): void }; events: { inc(n?: number): void } }
  >();

  constructor(o: IngestServiceOptions) {
    this.#o = o;
  }

  /** Registers the service on the process's gRPC server. */
  register(server: GrpcServer): void {
    const handlers: IngestHandlers = {
      Publish: (call, callback) => {
        const bytes = requestBytes(call.request);
        const { budget } = this.#o;
        if (!budget.tryTake(bytes)) {
          const err = new RunstreamError(
            ErrorCode.ResourceExhausted,
            `this node holds ${budget.held} bytes of publish requests in flight, its maximum ` +
              `(RS_INGEST_MAX_INFLIGHT_BYTES=${budget.maxBytes}); retry with backoff`,
          );
          this.#count(call.request, err);
          callback(this.#toStatus(err, 'Publish'));
          return;
        }
        this.#o.auth
          .authenticate(bearerFromGrpc(call.metadata))
          .then((principal) => this.#issue(call.request, principal, undefined, traceparentOf(call.metadata)))
          .then((issued) => issued.result)
          .finally(() => budget.release(bytes))
          .then(
            (response) => {
              this.#count(call.request, undefined);
              callback(null, response);
            },
            (err: unknown) => {
              this.#count(call.request, err);
              callback(this.#toStatus(err, 'Publish'));
            },
          );
      },
      PublishStream: (call) => this.#publishStream(call),
    };
    server.addService(INGEST_SERVICE, ingestDefinition(), handlers, {
      // A malformed request on a stream is refused in its turn, after the requests before it are answered.
      malformedInOrder: ['PublishStream'],
      decoders: { Publish: decodePublishRequest, PublishStream: decodePublishRequest },
    });
  }

  /**
   * Validates and hands a request's events to the log. Resolves once every publish has
   * been *issued* (so the next request's events land after these), with the promise of
   * the response.
   */
  async #issue(
    req: PublishRequest__Output,
    principal: Principal,
    onValidated?: (records: LogRecord[]) => void,
    traceparent?: string,
  ): Promise<Issued> {
    const ack = req.ack as string | number;
    if (ack !== 'ACK_LEVEL_UNSPECIFIED' && ack !== 'ACCEPTED' && ack !== 'PERSISTED') {
      throw new InvalidArgumentError('ack', `unknown ack level ${String(ack)}`);
    }
    const records = validateEvents(req.events, this.#o.limits, new Date(), traceparent);
    authorizePublish(records, principal);
    onValidated?.(records);
    const span = startSpan('runstream.ingest.publish', {
      kind: SpanKind.SERVER,
      traceparent,
      attributes: { 'runstream.events': records.length, 'runstream.ack': String(ack) },
    });
    let pending: PendingPersist | undefined;
    try {
      pending = ack === 'PERSISTED' ? await this.#o.waiter.prepare(records) : undefined;
    } catch (err) {
      void endWith(span, Promise.reject(err)).catch(() => undefined);
      throw err;
    }
    let published: Promise<LogAck[]>;
    const startMs = performance.now();
    try {
      // Only a PERSISTED ack listens for the persister's commit receipts (log-batch.ts).
      published = this.#o.publisher.publish(records, { receipts: pending !== undefined });
    } catch (err) {
      pending?.dispose();
      void endWith(span, Promise.reject(err)).catch(() => undefined);
      throw err;
    }
    const publishSeconds = this.#o.metrics?.logPublishSeconds;
    const observed =
      publishSeconds === undefined
        ? published
        : published.then((pubAcks) => {
            publishSeconds.observe(secondsSince(startMs));
            return pubAcks;
          });
    // An ACCEPTED request is answered straight from its log acks, without an async frame (and
    // its promises) per request at one event per request; PERSISTED ones wait for receipts.
    const result =
      pending === undefined
        ? observed.then((pubAcks) =>
            pubAcks.some((a) => a.duplicate)
              ? this.#republishDeleted(records, pubAcks, false).then((fixed) =>
                  acceptedResponse(records, fixed),
                )
              : acceptedResponse(records, pubAcks),
          )
        : this.#persistedResponse(records, observed, pending);
    result.catch(() => undefined); // observed by the caller; never an unhandled rejection
    // A span that records nothing (no tracing SDK, or not sampled) need not be ended.
    if (span.isRecording()) void endWith(span, result).catch(() => undefined);
    return { result };
  }

  /** A PERSISTED request's answer: once Postgres has committed each of its events. */
  async #persistedResponse(
    records: readonly LogRecord[],
    published: Promise<LogAck[]>,
    pending: PendingPersist,
  ): Promise<PublishResponse> {
    try {
      const pubAcks = await published;
      // The ack timeout counts from the log's acks: looking up deletion horizons is inside it.
      const fixed = pubAcks.some((a) => a.duplicate)
        ? this.#republishDeleted(records, pubAcks, true)
        : pubAcks;
      return { acks: await pending.wait(fixed) };
    } finally {
      pending.dispose();
    }
  }

  /**
   * JetStream drops a message whose id it saw within its duplicate window, even when the
   * events it carried have since been deleted (a purge does not clear the window). The
   * rule is that an event accepted after its thread (run) was deleted is a new event: so a
   * duplicate whose original offset is at or below the deletion horizon is published again
   * under an id naming the horizon. A retry after the same delete is then a duplicate of
   * that one (a real duplicate: above the horizon); after a later delete, new again.
   * Messages are one thread and run each, so all records of one share their ack and horizon.
   */
  async #republishDeleted(
    records: readonly LogRecord[],
    acks: LogAck[],
    receipts: boolean,
  ): Promise<LogAck[]> {
    // The original messages, each by its thread, run and offset: an offset alone is a place
    // in one partition's stream, and messages of threads in other partitions share it.
    const byMessage = new Map<string, { offset: number; indexes: number[] }>();
    acks.forEach((a, i) => {
      if (!a.duplicate) return;
      const r = records[i] as LogRecord;
      const key = `${r.thread_id}\0${r.run_id}\0${a.seq}`;
      const message = byMessage.get(key);
      if (message) message.indexes.push(i);
      else byMessage.set(key, { offset: a.seq, indexes: [i] });
    });
    // All the messages' horizons at once, a statement per thousand (a retry may span
    // thousands of threads), and their publishes issued together: the publisher writes
    // them in the order issued.
    const messages = [...byMessage.values()];
    const lookup = this.#o.deletionHorizons(
      messages.map(({ indexes }) => records[indexes[0] as number] as LogRecord),
    );
    const horizons = receipts ? await lookup : await this.#checked(lookup, records, acks);
    const again: Promise<void>[] = [];
    const fixed = [...acks];
    messages.forEach(({ offset, indexes }, m) => {
      const horizon = horizons[m] as number;
      if (offset > horizon) return; // the original is alive: a real duplicate
      const published = this.#o.publisher.publish(
        indexes.map((i) => records[i] as LogRecord),
        { msgIdSuffix: `~${horizon}`, receipts },
      );
      again.push(
        published.then((newAcks) =>
          indexes.forEach((i, k) => {
            fixed[i] = newAcks[k] as LogAck;
          }),
        ),
      );
    });
    await Promise.all(again);
    return fixed;
  }

  /**
   * An ACCEPTED request's deletion check, bounded: with Postgres away or stalled, its answer
   * fails UNAVAILABLE (naming the duplicates) within {@link DUPLICATE_CHECK_MAX_MS} instead of
   * holding the request, and every request after it on its stream, as long as Postgres does.
   * It is not answered from JetStream's ack alone: an event sent again after its thread was
   * deleted is a new event, and would be dropped.
   */
  #checked(
    lookup: Promise<number[]>,
    records: readonly LogRecord[],
    acks: readonly LogAck[],
  ): Promise<number[]> {
    const ms = this.#o.duplicateCheckMs ?? DUPLICATE_CHECK_MAX_MS;
    const unavailable = (why: string, cause?: unknown) => {
      const ids: string[] = [];
      acks.forEach((a, i) => {
        if (a.duplicate && ids.length < 3)
          ids.push(`events[${i}] (event_id ${(records[i] as LogRecord).event_id})`);
      });
      const count = acks.filter((a) => a.duplicate).length;
      return new UnavailableError(
        `${ids.join(', ')}${count > ids.length ? ` and ${count - ids.length} more` : ''} ` +
          `${count === 1 ? 'is a duplicate' : 'are duplicates'} in the log, and whether ${count === 1 ? 'its' : 'their'} ` +
          `thread or run was deleted since could not be checked (${why}); publish the request again`,
        { cause },
      );
    };
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(unavailable(`Postgres did not answer within ${ms} ms`)), ms);
    });
    lookup.catch(() => undefined); // lost the race: settled here or not at all
    return Promise.race([
      lookup.catch((err: unknown) => {
        throw unavailable(`Postgres: ${(err as Error).message}`, err);
      }),
      late,
    ]).finally(() => clearTimeout(timer));
  }

  /**
   * Requests are issued in order and answered in order. A request counts as in flight from
   * the moment it is read until its response has been written out (the write's callback):
   * past the stream's limits, or while the node's budget is full, the stream is not read.
   * A producer that never reads its acks thus holds at most the stream's limits.
   */
  #publishStream(call: grpc.ServerDuplexStream<PublishRequest__Output, PublishResponse>): void {
    const { budget, streamLimits } = this.#o;
    let issueChain: Promise<unknown> = Promise.resolve();
    let respondChain: Promise<void> = Promise.resolve();
    let inflight = 0;
    let inflightBytes = 0;
    let paused = false;
    let stopWaitingForBudget: (() => void) | undefined;
    let failed = false;
    let ended = false;
    let index = 0;
    /** Resolvers of response writes not yet called back; all resolved if the call ends first. */
    const writing = new Set<() => void>();
    const full = (): boolean =>
      inflight >= streamLimits.streamMaxInflight ||
      (inflight > 0 && inflightBytes >= streamLimits.streamMaxInflightBytes) ||
      budget.full;
    const pace = (): void => {
      if (failed || ended) return;
      if (full()) {
        if (!paused) {
          paused = true;
          call.pause();
        }
        if (budget.full && !stopWaitingForBudget) {
          stopWaitingForBudget = budget.whenFree(() => {
            stopWaitingForBudget = undefined;
            pace();
          });
        }
      } else if (paused) {
        paused = false;
        call.resume();
      }
    };
    const write = (response: PublishResponse): Promise<void> =>
      new Promise((resolve) => {
        writing.add(resolve);
        call.write(response, () => {
          writing.delete(resolve);
          resolve();
        });
      });
    // Controls for this stream's runs go out between acks: `control` set, `acks` empty.
    const controls =
      this.#o.controls &&
      new StreamControls(this.#o.controls, (control) => {
        if (!failed && !ended) call.write({ acks: [], control });
      });
    const observe = controls && ((records: LogRecord[]) => controls.observe(records));
    // Authenticated once, from the call's metadata; the stream ends when the token expires.
    let stopExpiry = (): void => undefined;
    const over = (): void => {
      failed = true;
      stopExpiry();
      controls?.close();
      stopWaitingForBudget?.();
      for (const resolve of [...writing]) resolve();
      writing.clear();
    };
    const fail = (err: unknown, prefix = ''): void => {
      if (failed) return;
      over();
      const status = this.#toStatus(err, 'PublishStream');
      call.emit('error', { ...status, details: `${prefix}${status.details}` });
    };
    const principal = this.#o.auth.authenticate(bearerFromGrpc(call.metadata));
    // One trace for the stream's events, from the call's metadata.
    const traceparent = traceparentOf(call.metadata);
    /** The principal once known: a request then issues without awaiting it again. */
    let known: Principal | undefined;
    principal.then(
      (p) => {
        known = p;
        if (failed || ended) return;
        stopExpiry = watchExpiry(p, () => {
          if (!ended) fail(new TokenExpiredError('token expired; reopen the stream with a fresh token'));
        });
      },
      (err: unknown) => fail(err),
    );

    call.on('data', (req: PublishRequest__Output | MalformedMessage) => {
      if (failed) return;
      const n = index++;
      if (req instanceof MalformedMessage) {
        const { error, perRequest } = req.refusal('/runstream.v1.Ingest/PublishStream');
        respondChain = respondChain.then(() => fail(error, perRequest ? `request ${n}: ` : ''));
        return;
      }
      const bytes = requestBytes(req);
      inflight++;
      inflightBytes += bytes;
      budget.take(bytes);
      pace();
      const issued = issueChain.then(() =>
        known !== undefined
          ? this.#issue(req, known, observe, traceparent)
          : principal.then((p) => this.#issue(req, p, observe, traceparent)),
      );
      issueChain = issued.catch(() => undefined);
      respondChain = respondChain.then(async () => {
        try {
          const response = await (await issued).result;
          this.#count(req, undefined);
          if (!failed) await write(response);
        } catch (err) {
          this.#count(req, err);
          fail(err, `request ${n}: `);
        } finally {
          inflight--;
          inflightBytes -= bytes;
          budget.release(bytes);
          pace();
        }
      });
    });
    call.on('end', () => {
      void respondChain.then(() => {
        stopExpiry();
        controls?.close();
        if (!failed && !ended) call.end();
        ended = true;
      });
    });
    call.on('error', over);
    call.on('cancelled', over);
  }

  /** One request answered: `err` undefined for acks, else its error's code is the outcome. */
  #count(req: PublishRequest__Output, err: unknown): void {
    const m = this.#o.metrics;
    if (!m) return;
    const ack = ackLabel(req.ack);
    const outcome = err === undefined ? 'ok' : toRunstreamError(err).wsCode;
    // The labelled children, resolved once per (ack, outcome): no label hashing per request.
    const key = `${ack}\u0000${outcome}`;
    let c = this.#counters.get(key);
    if (c === undefined) {
      c = { requests: m.ingestRequests.labels(ack, outcome), events: m.ingestEvents.labels(ack, outcome) };
      this.#counters.set(key, c);
    }
    c.requests.inc();
    c.events.inc(req.events.length);
  }

  #toStatus(err: unknown, method: string): Partial<grpc.StatusObject> {
    const e = toRunstreamError(err);
    if (e.grpcStatus === grpc.status.INTERNAL || e.grpcStatus === grpc.status.UNAVAILABLE) {
      this.#o.log.warn({ err, method }, 'publish failed');
    }
    return { code: e.grpcStatus, details: e.message };
  }
}

/** The contract's Ingest service, its answers written by wire.ts where they are acks alone. */
function ingestDefinition(): grpc.ServiceDefinition {
  const contract = loadProto().proto.runstream.v1.Ingest.service;
  return Object.fromEntries(
    Object.entries(contract).map(([name, method]) => {
      const serialize = method.responseSerialize as (r: PublishResponse) => Buffer;
      const responseSerialize = (r: PublishResponse): Buffer => encodePublishResponse(r) ?? serialize(r);
      return [name, { ...method, responseSerialize }];
    }),
  );
}

/** The call's W3C `traceparent`, when it has a valid one. */
function traceparentOf(metadata: grpc.Metadata): string | undefined {
  const v = metadata.get(TRACEPARENT_KEY)[0];
  return parseTraceparent(typeof v === 'string' ? v : v?.toString());
}

/** An ACCEPTED request's answer: where its events are in the log. */
function acceptedResponse(records: readonly LogRecord[], pubAcks: readonly LogAck[]): PublishResponse {
  const acks: EventAck[] = new Array(pubAcks.length);
  for (let i = 0; i < pubAcks.length; i++) {
    const a = pubAcks[i] as LogAck;
    acks[i] = { event_id: records[i]?.event_id, duplicate: a.duplicate, seq: 0, offset: a.seq };
  }
  return { acks };
}

function ackLabel(ack: string | number): AckLabel {
  if (ack === 'PERSISTED') return 'PERSISTED';
  return ack === 'ACCEPTED' || ack === 'ACK_LEVEL_UNSPECIFIED' ? 'ACCEPTED' : 'invalid';
}

/**
 * Refuses the whole request when any event is for a thread the token may not publish to,
 * or, for a user-scoped token, carries another user's `user_id`.
 */
function authorizePublish(records: readonly LogRecord[], principal: Principal): void {
  for (let i = 0; i < records.length; i++) {
    const r = records[i] as LogRecord;
    if (!principal.canPublish(r.thread_id)) {
      throw new PermissionDeniedError(
        `events[${i}].thread_id: this token may not publish to thread ${r.thread_id}`,
      );
    }
    if (principal.userId !== undefined && r.user_id !== principal.userId) {
      throw new PermissionDeniedError(
        `events[${i}].user_id: this token may only publish events of user ${principal.userId}`,
      );
    }
  }
}
