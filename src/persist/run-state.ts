/** Where a run stands, for cancel requests. */
import type pg from 'pg';
import { TERMINAL_EVENT_TYPES } from '../run-lifecycle.js';

export interface RunState {
  /** The run has at least one stored event. */
  readonly known: boolean;
  /** The run's terminal lifecycle event, when it has one. */
  readonly terminal: { readonly seq: number; readonly eventType: string } | undefined;
}

/**
 * Whether a run has stored events and whether it has ended. The terminal lookup walks the
 * run's (thread_id, run_id, seq) index backwards; terminal events are at the end of a run.
 */
export async function runState(
  db: pg.Pool | pg.ClientBase,
  threadId: string,
  runId: string,
): Promise<RunState> {
  const { rows } = await db.query<{ known: boolean; seq: string | null; event_type: string | null }>({
    name: 'rs_run_state',
    text: `SELECT EXISTS (SELECT 1 FROM run_events WHERE thread_id = $1 AND run_id = $2) AS known, t.seq, t.event_type
      FROM (SELECT 1) one
      LEFT JOIN LATERAL (
        SELECT seq, event_type FROM run_events
        WHERE thread_id = $1 AND run_id = $2 AND category = 3 AND event_type = ANY($3::text[])
        ORDER BY seq DESC LIMIT 1
      ) t ON true`,
    values: [threadId, runId, [...TERMINAL_EVENT_TYPES]],
  });
  const row = rows[0];
  return {
    known: row?.known === true,
    terminal:
      row?.seq === null || row?.seq === undefined
        ? undefined
        : { seq: Number(row.seq), eventType: row.event_type as string },
  };
}
