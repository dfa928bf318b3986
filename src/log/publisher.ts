/**
 * Publishes validated events to the JetStream log: a request's events for one thread and
 * run as one message on that thread+run subject (log-batch.ts), `Nats-Msg-Id` naming the
 * message's content so JetStream drops an identical retry within its duplicate window
 * (Postgres drops the rest).
 *
 * Publishes are queued and issued together once per event-loop turn (setImmediate), in
 * the order they were queued: every request that arrived in one turn shares one socket
 * write to NATS. One write per request cost ~70 µs of syscall time each, over a quarter of
 * the broker's CPU with token-sized requests (docs/benchmarks.md). The log keeps the
 * order of the calls, and a call costs one round trip.
 *
 * JetStream's acks come back on one wildcard subscription of this publisher's inbox,
 * matched by a counter in the reply subject, and are timed out by one sweep a second.
 * That is the JetStream publish protocol without nats.js's per-request machinery (a
 * request object, a timer and two `Error`s per publish, ~15% of the broker's busy time at
 * 5,000 requests/s).
 *
 * nats.js drops whatever it buffered while disconnected when it reconnects, and a publish
 * written just before a connection died may never have arrived. So on every reconnect the
 * publishes still waiting for their ack are issued again, in their original order, under
 * the same `Nats-Msg-Id`: JetStream stores one that arrived the first time only once, and
 * acks it with the original's sequence.
 */
import {
  createInbox,
  headers,
  type Msg,
  type NatsConnection,
  type Subscription,
} from '@nats-io/transport-node';
import type { LogRecord } from '../domain/event.js';
import { UnavailableError } from '../errors.js';
import { maxBodyBytes } from './connection.js';
import { encodeLogMessages, type LogMessage } from './log-batch.js';
import type { Subjects } from './subjects.js';

export const DEFAULT_PUBLISH_TIMEOUT_MS = 10_000;
const SWEEP_INTERVAL_MS = 1_000;

/** JetStream's answer to a publish: where the message is in the stream. */
export interface LogAck {
  /** The message's stream sequence (of the original, for a duplicate). */
  readonly seq: number;
  /** JetStream dropped the message as a repeat within its duplicate window. */
  readonly duplicate: boolean;
}

interface Waiter {
  readonly resolve: (ack: LogAck) => void;
  readonly reject: (err: Error) => void;
  readonly deadline: number;
  /** What was published, to issue it again after a reconnect. */
  readonly subject: string;
  readonly body: string;
  readonly msgId: string;
}

interface Queued extends Pick<Waiter, 'resolve' | 'reject'> {
  readonly message: LogMessage;
}

export class LogPublisher {
  #queue: Queued[] = [];
  readonly #inbox = createInbox();
  #sub: Subscription | undefined;
  #nextId = 0;
  /** Publishes awaiting their ack, by id; insertion order is deadline order. */
  readonly #waiting = new Map<number, Waiter>();
  #sweeper: NodeJS.Timeout | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly subjects: Subjects,
    private readonly timeoutMs: number = DEFAULT_PUBLISH_TIMEOUT_MS,
  ) {
    void (async () => {
      // Status events are delivered in a microtask after the connection is back, before any
      // later #flush (a setImmediate): re-issued publishes keep their place in the log.
      for await (const s of nc.status()) if (s.type === 'reconnect') this.#reissue();
    })().catch(() => undefined);
  }

  /**
   * Queues the records' messages (so that callers can order batches by the order of their
   * calls) and returns the promise of one ack per record, in input order: the ack of the
   * message that carries it. `msgIdSuffix` makes the messages' ids differ from an earlier
   * publish of the same events (see ingest's republish of deleted events).
   */
  publish(records: readonly LogRecord[], msgIdSuffix = ''): Promise<LogAck[]> {
    let messages = encodeLogMessages(records, maxBodyBytes(this.nc));
    if (msgIdSuffix !== '') messages = messages.map((m) => ({ ...m, msgId: `${m.msgId}${msgIdSuffix}` }));
    const acks = messages.map((m) => this.#enqueue(m));
    return Promise.all(acks).then(
      (messageAcks) => {
        const perRecord: LogAck[] = new Array(records.length);
        messages.forEach((m, k) => {
          for (const i of m.indexes) perRecord[i] = messageAcks[k] as LogAck;
        });
        return perRecord;
      },
      (err: unknown) => {
        throw new UnavailableError(`the event log did not accept the events: ${(err as Error).message}`, {
          cause: err,
        });
      },
    );
  }

  #enqueue(message: LogMessage): Promise<LogAck> {
    return new Promise<LogAck>((resolve, reject) => {
      if (this.#queue.push({ message, resolve, reject }) === 1) setImmediate(() => this.#flush());
    });
  }

  /** Issues every queued publish in one synchronous pass: nats.js writes them in one flush. */
  #flush(): void {
    const queue = this.#queue;
    this.#queue = [];
    // The SUB goes out before the first PUB on the same connection, so no ack can be missed.
    this.#sub ??= this.nc.subscribe(`${this.#inbox}.*`, { callback: (err, msg) => this.#onAck(err, msg) });
    this.#sweeper ??= setInterval(() => this.#sweep(), SWEEP_INTERVAL_MS).unref();
    const deadline = Date.now() + this.timeoutMs;
    for (const q of queue) {
      const id = ++this.#nextId;
      const m = q.message;
      const w: Waiter = {
        resolve: q.resolve,
        reject: q.reject,
        deadline,
        subject: this.subjects.log(m.threadId, m.runId),
        body: m.body,
        msgId: m.msgId,
      };
      try {
        this.#send(id, w);
      } catch (err) {
        q.reject(err as Error);
        continue;
      }
      this.#waiting.set(id, w);
    }
  }

  #send(id: number, w: Waiter): void {
    const h = headers();
    h.set('Nats-Msg-Id', w.msgId);
    this.nc.publish(w.subject, w.body, { reply: `${this.#inbox}.${id}`, headers: h });
  }

  /** Issues every publish still waiting for its ack again, in order (see the file comment). */
  #reissue(): void {
    for (const [id, w] of this.#waiting) {
      try {
        this.#send(id, w);
      } catch (err) {
        this.#waiting.delete(id);
        w.reject(err as Error);
      }
    }
  }

  #onAck(err: Error | null, msg: Msg): void {
    if (err) {
      // The subscription is gone (connection closed): nothing will be acked.
      for (const w of this.#waiting.values()) w.reject(err);
      this.#waiting.clear();
      this.#sub = undefined;
      return;
    }
    const id = Number(msg.subject.slice(this.#inbox.length + 1));
    const w = this.#waiting.get(id);
    if (!w) return; // timed out already
    this.#waiting.delete(id);
    if (msg.headers?.hasError) {
      // 503: nothing listens on the subject, i.e. no stream holds it.
      w.reject(new Error(`JetStream answered ${msg.headers.code} ${msg.headers.description}`));
      return;
    }
    try {
      const r = JSON.parse(msg.string()) as {
        seq?: number;
        duplicate?: boolean;
        error?: { code?: number; description?: string };
      };
      if (r.error || typeof r.seq !== 'number') {
        w.reject(new Error(`JetStream refused the message: ${r.error?.description ?? msg.string()}`));
      } else {
        w.resolve({ seq: r.seq, duplicate: r.duplicate === true });
      }
    } catch (parseErr) {
      w.reject(parseErr as Error);
    }
  }

  /** Fails the publishes whose ack is overdue. */
  #sweep(): void {
    const now = Date.now();
    for (const [id, w] of this.#waiting) {
      if (w.deadline > now) break;
      this.#waiting.delete(id);
      w.reject(new Error(`no ack from JetStream within ${this.timeoutMs} ms`));
    }
  }
}
