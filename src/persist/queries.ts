/** Read queries over the event log. Always parameterised; seq cursors only. */
import type pg from 'pg';
import { CATEGORY_NUMBER, categoryName, type StoredEvent } from '../event.js';
import type { EventFilter } from '../fanout/filter.js';
import { TERMINAL_EVENT_TYPES } from '../run-lifecycle.js';

interface EventRow {
  seq: string;
  stream_offset: string;
  thread_id: string;
  run_id: string;
  event_id: string;
  event_type: string;
  category: number;
  user_id: string;
  created_at: string;
  content: string;
  metadata: string;
}

const EVENT_COLUMNS = `seq, stream_offset, thread_id, run_id, event_id, event_type, category, user_id,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at,
  content::text AS content, metadata::text AS metadata`;

function toStored(r: EventRow): StoredEvent {
  return {
    seq: Number(r.seq),
    offset: Number(r.stream_offset),
    thread_id: r.thread_id,
    run_id: r.run_id,
    event_id: r.event_id,
    event_type: r.event_type,
    category: categoryName(r.category),
    user_id: r.user_id,
    created_at: r.created_at,
    content_json: r.content,
    metadata_json: r.metadata,
  };
}

/** Events of a thread with seq > afterSeq, ascending, at most `limit`. */
export async function listEventsAfter(
  db: pg.Pool | pg.ClientBase,
  threadId: string,
  afterSeq: number,
  limit: number,
): Promise<StoredEvent[]> {
  const { rows } = await db.query<EventRow>({
    name: 'rs_list_after',
    text: `SELECT ${EVENT_COLUMNS} FROM run_events WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
    values: [threadId, afterSeq, limit],
  });
  return rows.map(toStored);
}

export interface PageQuery {
  readonly threadId: string;
  readonly afterSeq: number;
  /** Inclusive upper bound, or none. */
  readonly uptoSeq?: number | undefined;
  /** Exclusive upper bound, or none (History's `before_seq`). */
  readonly beforeSeq?: number | undefined;
  /** Newest first: the page ends `limit` events below the upper bound ("load earlier"). */
  readonly descending?: boolean | undefined;
  readonly filter: EventFilter;
  /** With a run filter: also return the run's terminal lifecycle events, whatever the other filters. */
  readonly withTerminal?: boolean;
  readonly limit: number;
}

/**
 * A page of a thread's events in seq order, filtered in SQL. Only the clauses in use are
 * sent, so each shape gets its own plan (a run filter uses the (thread_id, run_id, seq) index).
 */
export async function listEventsPage(db: pg.Pool | pg.ClientBase, q: PageQuery): Promise<StoredEvent[]> {
  const values: unknown[] = [q.threadId, q.afterSeq];
  const where = ['thread_id = $1', 'seq > $2'];
  const param = (v: unknown): string => {
    values.push(v);
    return `$${values.length}`;
  };
  if (q.uptoSeq !== undefined) where.push(`seq <= ${param(q.uptoSeq)}`);
  if (q.beforeSeq !== undefined) where.push(`seq < ${param(q.beforeSeq)}`);
  if (q.filter.runId !== undefined) where.push(`run_id = ${param(q.filter.runId)}`);
  const narrow: string[] = [];
  if (q.filter.categories)
    narrow.push(`category = ANY(${param([...q.filter.categories].map((c) => CATEGORY_NUMBER[c]))}::int2[])`);
  if (q.filter.eventTypes) narrow.push(`event_type = ANY(${param([...q.filter.eventTypes])}::text[])`);
  // Inside `narrow`: a user-scoped run subscription still sees the run's terminal event, so it ends.
  if (q.filter.userId !== undefined) narrow.push(`user_id = ${param(q.filter.userId)}`);
  if (narrow.length > 0) {
    const terminal =
      q.withTerminal && q.filter.runId !== undefined
        ? ` OR (category = 3 AND event_type = ANY(${param([...TERMINAL_EVENT_TYPES])}::text[]))`
        : '';
    where.push(`((${narrow.join(' AND ')})${terminal})`);
  }
  const { rows } = await db.query<EventRow>(
    `SELECT ${EVENT_COLUMNS} FROM run_events WHERE ${where.join(' AND ')} ORDER BY seq${q.descending ? ' DESC' : ''} LIMIT ${param(q.limit)}`,
    values,
  );
  return rows.map(toStored);
}

/** The seq of a thread's first event at or after a log offset; undefined when there is none yet. */
export async function seqAtOffset(
  db: pg.Pool | pg.ClientBase,
  threadId: string,
  offset: number,
): Promise<number | undefined> {
  const { rows } = await db.query<{ seq: string }>({
    name: 'rs_seq_at_offset',
    text: 'SELECT seq FROM run_events WHERE thread_id = $1 AND stream_offset >= $2 ORDER BY stream_offset, seq LIMIT 1',
    values: [threadId, offset],
  });
  return rows[0] ? Number(rows[0].seq) : undefined;
}

/**
 * Highest seq a thread ever had; 0 when it never had an event. Deleting the thread's
 * tail does not lower it (thread_heads, migration 0004): later events continue above it.
 */
export async function headSeq(db: pg.Pool | pg.ClientBase, threadId: string): Promise<number> {
  const { rows } = await db.query<{ head: string | null }>({
    name: 'rs_head',
    text: `SELECT GREATEST((SELECT max(seq) FROM run_events WHERE thread_id = $1),
                           (SELECT head_seq FROM thread_heads WHERE thread_id = $1)) AS head`,
    values: [threadId],
  });
  return Number(rows[0]?.head ?? 0);
}

/** Stored rows for the given event ids of a thread (for acks of duplicates). */
export async function findEvents(
  db: pg.Pool | pg.ClientBase,
  threadId: string,
  eventIds: readonly string[],
): Promise<Map<string, { seq: number; offset: number }>> {
  const { rows } = await db.query<{ event_id: string; seq: string; stream_offset: string }>({
    name: 'rs_find',
    text: 'SELECT event_id, seq, stream_offset FROM run_events WHERE thread_id = $1 AND event_id = ANY($2::text[])',
    values: [threadId, eventIds],
  });
  return new Map(rows.map((r) => [r.event_id, { seq: Number(r.seq), offset: Number(r.stream_offset) }]));
}
