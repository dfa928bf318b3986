/**
 * Publishes validated events to the JetStream log: one message per event on the
 * thread+run subject, `Nats-Msg-Id` = thread:event_id so JetStream drops a retry
 * within its duplicate window (Postgres drops the rest).
 *
 * All publishes of a call are issued back to back on one connection before any ack is
 * awaited, so the log keeps their order and a batch costs one round trip, not N.
 */
import type { JetStreamClient, PubAck } from '@nats-io/jetstream';
import { UnavailableError } from '../errors.js';
import type { LogRecord } from '../event.js';
import { msgId, type Subjects } from './subjects.js';

export const DEFAULT_PUBLISH_TIMEOUT_MS = 10_000;

export class LogPublisher {
  constructor(
    private readonly js: JetStreamClient,
    private readonly subjects: Subjects,
    private readonly timeoutMs: number = DEFAULT_PUBLISH_TIMEOUT_MS,
  ) {}

  /**
   * Issues every publish synchronously (so that callers can order batches by the order
   * of their calls) and returns the promise of all acks, in input order.
   */
  publish(records: readonly LogRecord[]): Promise<PubAck[]> {
    const acks = records.map((r) =>
      this.js.publish(this.subjects.log(r.thread_id, r.run_id), JSON.stringify(r), {
        msgID: msgId(r.thread_id, r.event_id),
        timeout: this.timeoutMs,
      }),
    );
    return Promise.all(acks).catch((err: unknown) => {
      throw new UnavailableError(`the event log did not accept the events: ${(err as Error).message}`, {
        cause: err,
      });
    });
  }
}
