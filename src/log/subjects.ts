/**
 * NATS subject names. Ids are validated to `[A-Za-z0-9_-]`, so each is one subject token.
 *
 * - `<prefix>.log.<thread>.<run>`   ingest log (JetStream), one subject per thread and run
 * - `<prefix>.ev.<thread>`          committed events, for fan-out (core NATS)
 * - `<prefix>.rcpt.<thread>`        commit receipts, for PERSISTED acks (core NATS)
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
}

/** The `Nats-Msg-Id` of an event: JetStream deduplicates on it within its window. */
export function msgId(threadId: string, eventId: string): string {
  return `${threadId}:${eventId}`;
}
