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
 * The process's control messages, for all its PublishStreams: one NATS subscription to every
 * run's control subject (`<prefix>.ctl.*.*`), routed here to the streams of the run named by
 * the subject. A subscription per run cost a SUB, a round trip and an UNSUB for every run a
 * stream published, on this process and on nats-server, which a producer starting a run per
 * request paid per request; cancels are rare, so every ingest process reading all of them
 * costs next to nothing. Subscribed at start, it is in place before any event of a run is
 * published on the same connection, so a cancel (which needs a stored event) always finds it.
 */
export class ControlFeeds {
  /** `<thread>.<run>` → the listeners of the run's controls. */
  readonly #listeners = new Map<string, Set<(c: Control) => void>>();
  readonly #prefixLength: number;

  constructor(nc: NatsConnection, subjects: Subjects, log: Logger) {
    this.#prefixLength = subjects.controlPrefix.length;
    // Lives as long as the connection: the process's, closed at shutdown.
    nc.subscribe(subjects.controlAll, {
      callback: (err, msg) => {
        if (err) {
          // nats.js closes the subscription after this (a permissions violation): cancels no
          // longer reach this process's producers, who still see the stored event.
          log.error({ err }, 'control feed error');
          return;
        }
        // The subject past the prefix is `<thread>.<run>`: the key itself.
        const listeners = this.#listeners.get(msg.subject.slice(this.#prefixLength));
        if (!listeners) return;
        let control: Control;
        try {
          control = decodeControl(msg);
        } catch (decodeErr) {
          log.error({ err: decodeErr, subject: msg.subject }, 'undecodable control message');
          return;
        }
        // The one callback serves every run: a listener that throws must not stop it (nats.js
        // would end the connection's reading).
        for (const l of [...listeners]) {
          try {
            l(control);
          } catch (listenerErr) {
            log.error({ err: listenerErr, subject: msg.subject }, 'control listener failed');
          }
        }
      },
    });
  }

  /** Listens for the controls of a run; returns the function that stops listening. */
  listen(threadId: string, runId: string, listener: (c: Control) => void): () => void {
    // Ids never hold a dot, so the key is the subject's last two tokens.
    const key = `${threadId}.${runId}`;
    let set = this.#listeners.get(key);
    if (!set) {
      set = new Set();
      this.#listeners.set(key, set);
    }
    set.add(listener);
    const listeners = set;
    return () => {
      listeners.delete(listener);
      if (listeners.size === 0 && this.#listeners.get(key) === listeners) this.#listeners.delete(key);
    };
  }

  /** Number of runs listened to. */
  get size(): number {
    return this.#listeners.size;
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
  /** `<thread>.<run>` → the function that stops listening; insertion order is age. */
  readonly #runs = new Map<string, () => void>();
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
    /** The record before, when it left its run listened to: the same run is then skipped. */
    let listened: LogRecord | undefined;
    for (const r of records) {
      const terminal = isTerminal(r.category, r.event_type);
      if (!terminal && r.thread_id === listened?.thread_id && r.run_id === listened.run_id) continue;
      listened = terminal ? undefined : r;
      const key = `${r.thread_id}.${r.run_id}`;
      if (terminal) {
        this.#drop(key);
        continue;
      }
      if (this.#runs.has(key)) continue;
      if (this.#runs.size >= this.#maxRuns) this.#drop(this.#runs.keys().next().value as string);
      const unlisten = this.#feeds.listen(r.thread_id, r.run_id, (c) => {
        if (!this.#closed) this.#send(c);
      });
      this.#runs.set(key, unlisten);
    }
  }

  /** Number of runs listened to. */
  get size(): number {
    return this.#runs.size;
  }

  #drop(key: string): void {
    const unlisten = this.#runs.get(key);
    if (!unlisten) return;
    this.#runs.delete(key);
    unlisten();
  }

  /** Stops listening to every run. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const key of [...this.#runs.keys()]) this.#drop(key);
  }
}
