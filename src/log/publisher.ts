/**
 * Publishes validated events to the JetStream log: a request's events for one thread and
 * run as one message on that thread+run subject (log-batch.ts), `Nats-Msg-Id` naming the
 * message's content so JetStream drops an identical retry within its duplicate window
 * (Postgres drops the rest).
 *
 * All publishes of a call are issued back to back on one connection before any ack is
 * awaited, so the log keeps their order and a call costs one round trip.
 */
import type { JetStreamClient, PubAck } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { UnavailableError } from '../errors.js';
import type { LogRecord } from '../event.js';
import { maxBodyBytes } from './connection.js';
import { encodeLogMessages } from './log-batch.js';
import type { Subjects } from './subjects.js';

export const DEFAULT_PUBLISH_TIMEOUT_MS = 10_000;

export class LogPublisher {
  constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly subjects: Subjects,
    private readonly timeoutMs: number = DEFAULT_PUBLISH_TIMEOUT_MS,
  ) {}

  /**
   * Issues every publish synchronously (so that callers can order batches by the order
   * of their calls) and returns the promise of one ack per record, in input order: the
   * ack of the message that carries it.
   */
  publish(records: readonly LogRecord[]): Promise<PubAck[]> {
    const messages = encodeLogMessages(records, maxBodyBytes(this.nc));
    const acks = messages.map((m) =>
      this.js.publish(this.subjects.log(m.threadId, m.runId), m.body, {
        msgID: m.msgId,
        timeout: this.timeoutMs,
      }),
    );
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
}
