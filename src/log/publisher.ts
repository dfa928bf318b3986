/**
 * Publishes validated events to the JetStream log: a request's events for one thread and
 * run as one message on that thread+run subject (log-batch.ts), `Nats-Msg-Id` naming the
 * message's content so JetStream drops an identical retry within its duplicate window
 * (Postgres drops the rest).
 *
 * Publishes are queued and issued together once per event-loop turn (setImmediate),
 * in the order they were queued: every request that arrived in one turn shares one socket
 * write to NATS. One write per request cost ~70 µs of syscall time each, over a quarter of
 * the broker's CPU with token-sized requests (docs/benchmarks.md). The log keeps the
 * order of the calls, and a call costs one round trip.
 */
import type { JetStreamClient, PubAck } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { UnavailableError } from '../errors.js';
import type { LogRecord } from '../event.js';
import { maxBodyBytes } from './connection.js';
import { encodeLogMessages, type LogMessage } from './log-batch.js';
import type { Subjects } from './subjects.js';

export const DEFAULT_PUBLISH_TIMEOUT_MS = 10_000;

interface Queued {
  readonly message: LogMessage;
  readonly resolve: (ack: PubAck) => void;
  readonly reject: (err: unknown) => void;
}

export class LogPublisher {
  #queue: Queued[] = [];

  constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly subjects: Subjects,
    private readonly timeoutMs: number = DEFAULT_PUBLISH_TIMEOUT_MS,
  ) {}

  /**
   * Queues the records' messages (so that callers can order batches by the order of their
   * calls) and returns the promise of one ack per record, in input order: the ack of the
   * message that carries it.
   */
  publish(records: readonly LogRecord[]): Promise<PubAck[]> {
    const messages = encodeLogMessages(records, maxBodyBytes(this.nc));
    const acks = messages.map((m) => this.#enqueue(m));
    return Promise.all(acks).then(
      (messageAcks) => {
        const perRecord: PubAck[] = new Array(records.length);
        messages.forEach((m, k) => {
          for (const i of m.indexes) perRecord[i] = messageAcks[k] as PubAck;
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

  #enqueue(message: LogMessage): Promise<PubAck> {
    return new Promise<PubAck>((resolve, reject) => {
      if (this.#queue.push({ message, resolve, reject }) === 1) setImmediate(() => this.#flush());
    });
  }

  /** Issues every queued publish in one synchronous pass: nats.js writes them in one flush. */
  #flush(): void {
    const queue = this.#queue;
    this.#queue = [];
    for (const q of queue) {
      const m = q.message;
      this.js
        .publish(this.subjects.log(m.threadId, m.runId), m.body, { msgID: m.msgId, timeout: this.timeoutMs })
        .then(q.resolve, q.reject);
    }
  }
}
