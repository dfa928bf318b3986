/**
 * Control messages from subscribers back to a run's producer: today, "cancel this run".
 *
 * A cancel request is first stored as an ordinary lifecycle event (`cancel_requested`,
 * through the ingest log like any other), so history shows who asked and when, and every
 * subscriber sees it. Then it is announced on the core-NATS subject
 * `<prefix>.ctl.<thread>.<run>`, which every `Ingest.PublishStream` that has published
 * events of that run listens to, in whatever process it is; the stream passes it to its
 * producer as a `PublishResponse` with `control` set and no acks.
 *
 * Delivery to producers is at most once, to the streams connected at that moment; the
 * stored event is the durable record (see docs/grpc-subscribe-and-cancel.md).
 */
import type { Msg, NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';
import { v7 as uuidv7 } from 'uuid';
import { requireCancel } from '../auth/http.js';
import type { Principal } from '../auth/principal.js';
import type { LogRecord } from '../domain/event.js';
import { requiredId } from '../domain/ids.js';
import { CANCEL_REQUESTED_EVENT_TYPE, hasEnded, isTerminal } from '../domain/run-lifecycle.js';
import { ErrorCode, InvalidArgumentError, RunstreamError } from '../errors.js';
import type { CancelRun } from '../gen/runstream/v1/CancelRun.js';
import type { Control } from '../gen/runstream/v1/Control.js';
import type { LogPublisher } from '../log/publisher.js';
import type { Subjects } from '../log/subjects.js';
import { ThreadFeeds } from '../log/thread-feed.js';
import type { Logger } from '../logger.js';
import { getRun } from '../persist/runs.js';

/** Event type of the lifecycle event that records a cancel request. */
export { CANCEL_REQUESTED_EVENT_TYPE };
/** Longest `reason` accepted, in characters. */
export const MAX_CANCEL_REASON_LENGTH = 1024;
/** Runs one PublishStream listens to for control messages; past it the oldest is dropped. */
export const DEFAULT_MAX_CONTROLLED_RUNS_PER_STREAM = 1024;

/** Where a cancel request came from; stored in the event's content. */
export type CancelSource = 'websocket' | 'http' | 'on_disconnect';

export interface CancelRequest {
  readonly threadId: string;
  readonly runId: string;
  /** Free text, at most {@link MAX_CANCEL_REASON_LENGTH} characters; may be empty. */
  readonly reason: string;
  readonly source: CancelSource;
  readonly principal: Principal;
}

/** What a requester learns: the stored `cancel_requested` event. */
export interface CancelReceipt {
  readonly thread_id: string;
  readonly run_id: string;
  readonly event_id: string;
  /** JetStream stream sequence of the stored event. */
  readonly offset: number;
}

export interface RunControlOptions {
  readonly nc: NatsConnection;
  readonly publisher: LogPublisher;
  readonly subjects: Subjects;
  readonly pool: pg.Pool;
  readonly log: Logger;
}

/** Records cancel requests and routes them to the run's producers. */
export class RunControl {
  readonly #o: RunControlOptions;

  constructor(o: RunControlOptions) {
    this.#o = o;
  }

  /**
   * Checks the request, stores the `cancel_requested` event, then tells the producers.
   * Throws a client error when the ids or reason are invalid, the principal may not
   * cancel, the run has no events (NOT_FOUND) or has already ended (RUN_ENDED).
   */
  async requestCancel(req: CancelRequest): Promise<CancelReceipt> {
    const { threadId, runId, principal } = req;
    requiredId(threadId, 'thread_id');
    requiredId(runId, 'run_id');
    checkReason(req.reason);
    requireCancel(principal, threadId);
    // The run's status is the runs table's (domain/run-lifecycle.ts), as every reader sees
    // it; a user-scoped principal sees only the user's runs, as in History.
    const run = await getRun(this.#o.pool, threadId, runId, principal.userId);
    if (!run) {
      throw new RunstreamError(ErrorCode.NotFound, `run ${runId} of thread ${threadId} has no stored events`);
    }
    if (hasEnded(run.status)) {
      throw new RunstreamError(
        ErrorCode.RunEnded,
        `run ${runId} has already ended (${run.status} at seq ${run.end_seq})`,
      );
    }
    const requestedBy = principal.userId ?? principal.subject ?? '';
    const record: LogRecord = {
      thread_id: threadId,
      run_id: runId,
      event_id: uuidv7(),
      event_type: CANCEL_REQUESTED_EVENT_TYPE,
      category: 'lifecycle',
      user_id: principal.userId ?? '',
      created_at: new Date().toISOString(),
      content_json: JSON.stringify({ reason: req.reason, source: req.source, requested_by: requestedBy }),
      metadata_json: '{}',
    };
    // Nobody waits for its commit receipt: the answer is its offset.
    const [ack] = await this.#o.publisher.publish([record], { receipts: false });
    const cancel: CancelRun = {
      thread_id: threadId,
      run_id: runId,
      reason: req.reason,
      event_id: record.event_id,
      requested_by: requestedBy,
    };
    this.#o.nc.publish(this.#o.subjects.control(threadId, runId), JSON.stringify(cancel));
    this.#o.log.info(
      { threadId, runId, source: req.source, eventId: record.event_id },
      'run cancel requested',
    );
    return { thread_id: threadId, run_id: runId, event_id: record.event_id, offset: ack?.seq ?? 0 };
  }
}

/** Refuses a reason that is not a string of at most {@link MAX_CANCEL_REASON_LENGTH} characters. */
export function checkReason(reason: unknown): asserts reason is string {
  if (typeof reason !== 'string' || reason.length > MAX_CANCEL_REASON_LENGTH) {
    throw new InvalidArgumentError(
      'reason',
      `must be a string of at most ${MAX_CANCEL_REASON_LENGTH} characters`,
    );
  }
}

/**
 * The process's control-subject subscriptions, shared by all its PublishStreams: one NATS
 * subscription per run however many streams publish it.
 */
export class ControlFeeds {
  readonly #feeds: ThreadFeeds<Control>;

  constructor(nc: NatsConnection, subjects: Subjects, log: Logger) {
    // Keyed by `<thread>.<run>`; ids never hold a dot, so the key splits back exactly.
    this.#feeds = new ThreadFeeds<Control>(
      nc,
      (key) => {
        const dot = key.indexOf('.');
        return subjects.control(key.slice(0, dot), key.slice(dot + 1));
      },
      decodeControl,
      log,
    );
  }

  /** Listens for the controls of a run; resolves with the function that stops listening. */
  listen(threadId: string, runId: string, listener: (c: Control) => void): Promise<() => void> {
    return this.#feeds.listen(`${threadId}.${runId}`, listener);
  }

  /** Number of runs listened to. */
  get size(): number {
    return this.#feeds.size;
  }
}

function decodeControl(msg: Msg): Control {
  const c = JSON.parse(msg.string()) as CancelRun;
  return {
    cancel: {
      thread_id: String(c.thread_id),
      run_id: String(c.run_id),
      reason: String(c.reason ?? ''),
      event_id: String(c.event_id ?? ''),
      requested_by: String(c.requested_by ?? ''),
    },
  };
}

/**
 * The runs one PublishStream controls: every run it has published events of, until it
 * publishes the run's terminal event or the stream ends.
 */
export class StreamControls {
  readonly #feeds: ControlFeeds;
  readonly #send: (c: Control) => void;
  readonly #maxRuns: number;
  /** `<thread>.<run>` → the pending or done listen; insertion order is age. */
  readonly #runs = new Map<string, Promise<() => void>>();
  #closed = false;

  constructor(
    feeds: ControlFeeds,
    send: (c: Control) => void,
    maxRuns = DEFAULT_MAX_CONTROLLED_RUNS_PER_STREAM,
  ) {
    this.#feeds = feeds;
    this.#send = send;
    this.#maxRuns = maxRuns;
  }

  /**
   * Called with a request's validated records before they are published: starts listening
   * for runs seen for the first time, stops for runs whose terminal event this is.
   */
  observe(records: readonly LogRecord[]): void {
    if (this.#closed) return;
    for (const r of records) {
      const key = `${r.thread_id}.${r.run_id}`;
      if (isTerminal(r.category, r.event_type)) {
        this.#drop(key);
        continue;
      }
      if (this.#runs.has(key)) continue;
      if (this.#runs.size >= this.#maxRuns) this.#drop(this.#runs.keys().next().value as string);
      const listening = this.#feeds.listen(r.thread_id, r.run_id, (c) => {
        if (!this.#closed) this.#send(c);
      });
      listening.catch(() => undefined);
      this.#runs.set(key, listening);
    }
  }

  /** Number of runs listened to. */
  get size(): number {
    return this.#runs.size;
  }

  #drop(key: string): void {
    const listening = this.#runs.get(key);
    if (!listening) return;
    this.#runs.delete(key);
    void listening.then(
      (unlisten) => unlisten(),
      () => undefined,
    );
  }

  /** Stops listening to every run. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const key of [...this.#runs.keys()]) this.#drop(key);
  }
}
