/**
 * The types of seq assignment, and the one-thread form of it.
 *
 * The work itself is {@link storeBatch} (batch-assigner.ts), for a whole multi-thread batch.
 * A batch of new events (none stored before, none repeated, none rejected, no deletion in the
 * way) is stored by ONE statement in autocommit, the function rs_store_rows (migrations 0009-0011):
 * the fence, the threads' `pg_advisory_xact_lock`s in their own statement, then the heads
 * (each statement of the function takes a fresh snapshot, so after every earlier writer of
 * those threads has committed), then one `unnest` insert with seq = head+1, head+2, ... per
 * thread, and the runs. Any other batch, or one that function sends back, is stored in
 * one READ COMMITTED transaction of the same steps as separate statements, which also drops
 * the already-stored event_ids and the deleted past and dead-letters rejected events.
 * `UNIQUE (thread_id, seq)` and `UNIQUE (thread_id, event_id)` are the backstops.
 */
import type pg from 'pg';
import type { LogRecord, StoredEvent } from '../domain/event.js';
import type { Receipt, Rejection } from '../domain/receipt.js';
import { storeBatch } from './batch-assigner.js';

export interface PendingEvent {
  readonly record: LogRecord;
  /** JetStream stream sequence of the log message. */
  readonly offset: number;
  /**
   * Set when the store refused this event (poison.ts): it is kept in `dead_letters` and an
   * `event_rejected` notice is stored in its place, unless one already was.
   */
  readonly rejection?: Rejection;
}

export type { Receipt, Rejection } from '../domain/receipt.js';

export interface ThreadBatchResult {
  /** Newly stored events, in seq order. */
  readonly inserted: StoredEvent[];
  /** One receipt per pending event, in input order (duplicates included). */
  readonly receipts: Receipt[];
}

/** Stores one thread's batch (all events must share `threadId`), atomically (storeBatch). */
export async function storeThreadBatch(
  client: pg.ClientBase,
  threadId: string,
  batch: readonly PendingEvent[],
): Promise<ThreadBatchResult> {
  const results = await storeBatch(client, new Map([[threadId, batch]]));
  return results.get(threadId) ?? { inserted: [], receipts: [] };
}
