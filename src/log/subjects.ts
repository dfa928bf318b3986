/**
 * NATS subject names. Ids are validated to `[A-Za-z0-9_-]`, so each is one subject token.
 *
 * - `<prefix>.log.<thread>.<run>`   ingest log (JetStream), one subject per thread and run
 * - `<prefix>.ev.<thread>`          committed events, for fan-out (core NATS)
 * - `<prefix>.rcpt.<thread>`        commit receipts, for PERSISTED acks (core NATS)
 * - `<prefix>.ctl.<thread>.<run>`   control messages for a run's producer, e.g. cancel (core NATS)
 * - `<prefix>.del.<thread>`         deletion notices: the thread or one of its runs was deleted (core NATS)
 * - `<prefix>.resync`               a process reconnected to NATS: look in Postgres for what was lost (core NATS)
 */
export class Subjects {
  constructor(readonly prefix: string) {}

  /** Wildcard covering the whole ingest log; the JetStream stream's subject. */
  get logAll(): string {
    return `${this.prefix}.log.>`;
  }
  log(threadId: string, runId: string): string {
    return `${this.prefix}.log.${threadId}.${runId}`;
  }
  /** Every log subject of a thread (all its runs), for purging a deleted thread. */
  logOfThread(threadId: string): string {
    return `${this.prefix}.log.${threadId}.>`;
  }
  /** Thread id from a log subject. */
  threadOfLog(subject: string): string {
    const start = this.prefix.length + 5;
    return subject.slice(start, subject.indexOf('.', start));
  }
  events(threadId: string): string {
    return `${this.prefix}.ev.${threadId}`;
  }
  receipts(threadId: string): string {
    return `${this.prefix}.rcpt.${threadId}`;
  }
  /** Deletion notices of a thread, for the subscriptions on it (log/deletion-notices.ts). */
  deletions(threadId: string): string {
    return `${this.prefix}.del.${threadId}`;
  }
  /** Reconnect notices (log/resync.ts). */
  get resync(): string {
    return `${this.prefix}.resync`;
  }
  /** Control messages (cancel requests) for the producer of a run. */
  control(threadId: string, runId: string): string {
    return `${this.prefix}.ctl.${threadId}.${runId}`;
  }
}

/** The `Nats-Msg-Id` of an event: JetStream deduplicates on it within its window. */
export function msgId(threadId: string, eventId: string): string {
  return `${threadId}:${eventId}`;
}
