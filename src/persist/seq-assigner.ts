/**
 * The heart of the broker: stores one thread's batch of events with gap-free seqs.
 *
 * One READ COMMITTED transaction per thread-batch:
 *  1. `pg_advisory_xact_lock` on the thread, as its own statement, so the statements
 *     after it take their snapshots once every earlier writer of the thread has committed;
 *  2. find which event_ids are already stored (redeliveries, retries), and the head seq;
 *  3. insert the new ones in one statement (`unnest`) with seq = head+1, head+2, ...
 *  4. move the thread's head and fold the events into their runs, in one statement (runs.ts).
 * Events of a thread or run deleted after they entered the log are dropped (deletions.ts).
 * `UNIQUE (thread_id, seq)` and `UNIQUE (thread_id, event_id)` are the backstops.
 */
import type pg from 'pg';
import { CATEGORY_NUMBER, type LogRecord, type StoredEvent } from '../event.js';
import { deletedInBatch } from './deletions.js';
import { recordBatch } from './runs.js';

export interface PendingEvent {
  readonly record: LogRecord;
  /** JetStream stream sequence of the log message. */
  readonly offset: number;
}

/** What became of one pending event. */
export interface Receipt {
  readonly event_id: string;
  readonly seq: number;
  /** Offset of the stored row: differs from the message's own when it was a duplicate. */
  readonly offset: number;
}

export interface ThreadBatchResult {
  /** Newly stored events, in seq order. */
  readonly inserted: StoredEvent[];
  /** One receipt per pending event, in input order (duplicates included). */
  readonly receipts: Receipt[];
}

const LOCK_SQL = 'SELECT pg_advisory_xact_lock(hashtextextended($1, 0))';

// Head of the thread (event_id NULL) plus the rows that already hold any of the batch's ids.
// The head is the one kept in thread_heads, which deleting the thread's tail does not lower
// (seqs are never reused); its row also carries the thread's deletion horizons (deletions.ts).
const EXISTING_SQL = `
  SELECT NULL::text AS event_id,
         GREATEST((SELECT COALESCE(max(seq), 0) FROM run_events WHERE thread_id = $1),
                  COALESCE(h.head_seq, 0))::int8 AS seq,
         COALESCE(h.deleted_upto_offset, 0)::int8 AS stream_offset,
         COALESCE(h.run_deleted_upto_offset, 0)::int8 AS run_horizon
    FROM (SELECT $1::text AS thread_id) t LEFT JOIN thread_heads h USING (thread_id)
  UNION ALL
  SELECT event_id, seq, stream_offset, NULL::int8
    FROM run_events WHERE thread_id = $1 AND event_id = ANY($2::text[])`;

const INSERT_SQL = `
  INSERT INTO run_events
    (thread_id, seq, event_id, run_id, event_type, category, user_id, created_at, content, metadata, stream_offset)
  SELECT $1, $2::int8 + x.ord, x.event_id, x.run_id, x.event_type, x.category, x.user_id, x.created_at,
         x.content::json, x.metadata::json, x.stream_offset
    FROM unnest($3::text[], $4::text[], $5::text[], $6::int2[], $7::text[], $8::timestamptz[],
                $9::text[], $10::text[], $11::int8[])
         WITH ORDINALITY AS x(event_id, run_id, event_type, category, user_id, created_at,
                              content, metadata, stream_offset, ord)`;

/** Stores a thread's batch (all events must share `threadId`), in one transaction. */
export async function storeThreadBatch(
  client: pg.ClientBase,
  threadId: string,
  batch: readonly PendingEvent[],
): Promise<ThreadBatchResult> {
  await client.query('BEGIN');
  try {
    await client.query({ name: 'rs_lock', text: LOCK_SQL, values: [threadId] });
    const ids = batch.map((p) => p.record.event_id);
    const existing = await client.query<{
      event_id: string | null;
      seq: string;
      stream_offset: string | null;
      run_horizon: string | null;
    }>({
      name: 'rs_existing',
      text: EXISTING_SQL,
      values: [threadId, ids],
    });
    let head = 0;
    let horizons = { thread: 0, runs: 0 };
    const known = new Map<string, Receipt>();
    for (const row of existing.rows) {
      if (row.event_id === null) {
        head = Number(row.seq);
        horizons = { thread: Number(row.stream_offset), runs: Number(row.run_horizon) };
      } else
        known.set(row.event_id, {
          event_id: row.event_id,
          seq: Number(row.seq),
          offset: Number(row.stream_offset),
        });
    }

    const deleted = await deletedInBatch(client, threadId, batch, horizons);
    const fresh: PendingEvent[] = [];
    const receipts: Receipt[] = new Array(batch.length);
    const inserted: StoredEvent[] = [];
    for (let i = 0; i < batch.length; i++) {
      const p = batch[i] as PendingEvent;
      const prior = known.get(p.record.event_id);
      if (prior) {
        receipts[i] = prior;
        continue;
      }
      if (deleted.has(i)) {
        // Its thread or run was deleted after it entered the log: it is never stored (seq 0).
        receipts[i] = { event_id: p.record.event_id, seq: 0, offset: p.offset };
        continue;
      }
      const seq = head + fresh.length + 1;
      const receipt = { event_id: p.record.event_id, seq, offset: p.offset };
      known.set(p.record.event_id, receipt); // a repeat later in this batch is a duplicate of this one
      receipts[i] = receipt;
      fresh.push(p);
      inserted.push({ ...p.record, seq, offset: p.offset });
    }

    if (fresh.length > 0) {
      const n = fresh.length;
      const cols = {
        eventId: new Array<string>(n),
        runId: new Array<string>(n),
        eventType: new Array<string>(n),
        category: new Array<number>(n),
        userId: new Array<string>(n),
        createdAt: new Array<string>(n),
        content: new Array<string>(n),
        metadata: new Array<string>(n),
        offset: new Array<number>(n),
      };
      for (let i = 0; i < n; i++) {
        const { record: r, offset } = fresh[i] as PendingEvent;
        cols.eventId[i] = r.event_id;
        cols.runId[i] = r.run_id;
        cols.eventType[i] = r.event_type;
        cols.category[i] = CATEGORY_NUMBER[r.category];
        cols.userId[i] = r.user_id;
        cols.createdAt[i] = r.created_at;
        cols.content[i] = r.content_json;
        cols.metadata[i] = r.metadata_json;
        cols.offset[i] = offset;
      }
      await client.query({
        name: 'rs_insert',
        text: INSERT_SQL,
        values: [
          threadId,
          head,
          cols.eventId,
          cols.runId,
          cols.eventType,
          cols.category,
          cols.userId,
          cols.createdAt,
          cols.content,
          cols.metadata,
          cols.offset,
        ],
      });
      await recordBatch(client, threadId, head + n, inserted);
    }
    await client.query('COMMIT');
    return { inserted, receipts };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}
