/** History's own read queries (the event pages are persist/queries.ts, the runs persist/runs.ts). */
import type pg from 'pg';

export interface ToolCallLookup {
  readonly threadId: string;
  readonly runIds: readonly string[];
  readonly callIds: readonly string[];
  /** Only calls stored before this seq. */
  readonly beforeSeq: number;
  readonly eventTypes: readonly string[];
}

/**
 * Content (JSON text) of the tool-call events that may hold the given call ids, within
 * the given runs: through the (thread_id, run_id, seq) index, so bounded by the runs.
 */
export async function toolCallsById(db: pg.Pool | pg.ClientBase, q: ToolCallLookup): Promise<string[]> {
  const { rows } = await db.query<{ content: string }>({
    name: 'rs_tool_calls_by_id',
    text: `SELECT content::text AS content FROM run_events
            WHERE thread_id = $1 AND run_id = ANY($2::text[]) AND seq < $3 AND event_type = ANY($4::text[])
              AND ((content->>'call_id') = ANY($5::text[]) OR (content->>'id') = ANY($5::text[])
                   OR (content->'tool_calls') IS NOT NULL)`,
    values: [q.threadId, q.runIds, q.beforeSeq, q.eventTypes, q.callIds],
  });
  return rows.map((r) => r.content);
}
