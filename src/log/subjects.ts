import { DEFAULT_PARTITIONS, partitionOf } from '../domain/partition.js';

/**
 * NATS subject names. Ids are validated to `[A-Za-z0-9_-]`, so each is one subject token.
 *
 * - `<prefix>.log.<p>.<thread>.<run>` ingest log (JetStream), one subject per thread and run,
 *                                   under the thread's partition `p` (domain/partition.ts)
 * - `<prefix>.log.<thread>.<run>`   the same before partitions (one token fewer): read once
 *                                   at an upgrade (persist/legacy-log.ts), never written
 * - `<prefix>.ev.<thread>`          committed events, for fan-out (core NATS)
 * - `<prefix>.committed.<ms>`       an events announcement's reply subject: when it was committed
 *                                   (epoch ms); nothing listens there (log/announcements.ts)
 * - `<prefix>.rcpt.<thread>`        commit receipts, for PERSISTED acks (core NATS)
 * - `<prefix>.ctl.<thread>.<run>`   control messages for a run's producer, e.g. cancel (core NATS)
 * - `<prefix>.del.<thread>`         deletion notices: the thread or one of its runs was deleted (core NATS)
 * - `<prefix>.resync`               a process reconnected to NATS: look in Postgres for what was lost (core NATS)
 * - `<prefix>.persisters`           a persister joined, left or let partitions go: rebalance now (core NATS)
 */
export class Subjects {
  constructor(
    readonly prefix: string,
    /** The log's partition count (RS_PARTITIONS, checked against the log at start). */
    readonly partitions: number = DEFAULT_PARTITIONS,
  ) {}

  /** Wildcard covering the whole ingest log; the JetStream stream's subject. */
  get logAll(): string {
    return `${this.prefix}.log.>`;
  }
  log(threadId: string, runId: string): string {
    return `${this.prefix}.log.${partitionOf(threadId, this.partitions)}.${threadId}.${runId}`;
  }
  /** Every log subject of a thread (all its runs), for purging a deleted thread. */
  logOfThread(threadId: string): string {
    return `${this.prefix}.log.${partitionOf(threadId, this.partitions)}.${threadId}.*`;
  }
  /** Every log subject of a partition: what its persister reads. */
  logOfPartition(partition: number): string {
    return `${this.prefix}.log.${partition}.*.*`;
  }
  /** The log subjects of before partitions (two tokens after `log`, where partitions have three). */
  get legacyLogAll(): string {
    return `${this.prefix}.log.*.*`;
  }
  legacyLog(threadId: string, runId: string): string {
    return `${this.prefix}.log.${threadId}.${runId}`;
  }
  legacyLogOfThread(threadId: string): string {
    return `${this.prefix}.log.${threadId}.*`;
  }
  events(threadId: string): string {
    return `${this.prefix}.ev.${threadId}`;
  }
  /** The reply subject of the announcements of a batch committed at `epochMs`. */
  committedAt(epochMs: number): string {
    return `${this.committedAtPrefix}${epochMs}`;
  }
  /** What every {@link committedAt} subject starts with. */
  get committedAtPrefix(): string {
    return `${this.prefix}.committed.`;
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
  /** Rebalance notices among persisters (persist/persister.ts). */
  get persisters(): string {
    return `${this.prefix}.persisters`;
  }
  /** Every run's control subject: what an ingest process listens to. */
  get controlAll(): string {
    return `${this.controlPrefix}*.*`;
  }
  /** What every {@link control} subject starts with; `<thread>.<run>` follows. */
  get controlPrefix(): string {
    return `${this.prefix}.ctl.`;
  }
  /** Control messages (cancel requests) for the producer of a run. */
  control(threadId: string, runId: string): string {
    return `${this.controlPrefix}${threadId}.${runId}`;
  }
}

/**
 * The `Nats-Msg-Id` of an event: JetStream deduplicates on it within its window. It names the
 * run too: a duplicate is then always of a message on the same thread and run subject, so a
 * run deleted since is the duplicate's own (an event_id freed by a run delete and used in
 * another run of the thread within the window was dropped as a duplicate of the deleted one).
 */
export function msgId(threadId: string, runId: string, eventId: string): string {
  return `${threadId}:${runId}:${eventId}`;
}
