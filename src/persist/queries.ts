/** Read queries over the event log. Always parameterised; seq cursors only. */
import type pg from 'pg';
import { categoryName, type StoredEvent } from '../event.js';

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

/** Highest seq of a thread; 0 when it has no events. */
export async function headSeq(db: pg.Pool | pg.ClientBase, threadId: string): Promise<number> {
  const { rows } = await db.query<{ head: string | null }>({
    name: 'rs_head',
    text: 'SELECT max(seq) AS head FROM run_events WHERE thread_id = $1',
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
