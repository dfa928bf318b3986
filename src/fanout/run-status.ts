/**
 * A run's state as its stored events tell it: whether it has ended (its first terminal
 * lifecycle event), with which status, and when it started and last moved. Runs have no
 * table of their own: a run is the events that carry its id.
 */
import type pg from 'pg';
import { CATEGORY_NUMBER } from '../event.js';
import { TERMINAL_EVENT_TYPES } from '../run-lifecycle.js';

/** A run's final status, in LangGraph's words (what `GET /threads/{t}/runs/{r}` and `end` report). */
export type FinalStatus = 'success' | 'error' | 'timeout' | 'interrupted' | 'rollback';
const FINAL_STATUSES: ReadonlySet<string> = new Set<FinalStatus>([
  'success',
  'error',
  'timeout',
  'interrupted',
  'rollback',
]);

/** The terminal lifecycle event that ended a run. */
export interface RunTerminal {
  readonly seq: number;
  readonly eventType: string;
  /** The event's content, parsed (it is small: a status and maybe a message). */
  readonly content: unknown;
}

export interface RunSummary {
  readonly firstSeq: number;
  readonly lastSeq: number;
  /** RFC 3339 of the run's first and latest events. */
  readonly createdAt: string;
  readonly updatedAt: string;
  /** `assistant_id` from the run's `metadata` / `run_start` event, when it gave one. */
  readonly assistantId: string | undefined;
  readonly terminal: RunTerminal | undefined;
}

/** The run's first terminal lifecycle event, or undefined while it runs (or never ran). */
export async function runTerminal(
  db: pg.Pool | pg.ClientBase,
  threadId: string,
  runId: string,
): Promise<RunTerminal | undefined> {
  const { rows } = await db.query<{ seq: string; event_type: string; content: string }>({
    name: 'rs_run_terminal',
    text: `SELECT seq, event_type, content::text AS content FROM run_events
      WHERE thread_id = $1 AND run_id = $2 AND category = $3 AND event_type = ANY($4::text[])
      ORDER BY seq LIMIT 1`,
    values: [threadId, runId, CATEGORY_NUMBER.lifecycle, [...TERMINAL_EVENT_TYPES]],
  });
  const r = rows[0];
  return r && { seq: Number(r.seq), eventType: r.event_type, content: JSON.parse(r.content) as unknown };
}

/** What the stored events say about a run; undefined when it has none. */
export async function runSummary(
  db: pg.Pool | pg.ClientBase,
  threadId: string,
  runId: string,
): Promise<RunSummary | undefined> {
  const [span, start, terminal] = await Promise.all([
    db.query<{ first: string | null; last: string; created: string; updated: string }>({
      name: 'rs_run_span',
      text: `SELECT min(seq) AS first, max(seq) AS last,
          to_char(min(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created,
          to_char(max(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated
        FROM run_events WHERE thread_id = $1 AND run_id = $2`,
      values: [threadId, runId],
    }),
    db.query<{ content: string }>({
      name: 'rs_run_start',
      text: `SELECT content::text AS content FROM run_events
        WHERE thread_id = $1 AND run_id = $2 AND category = $3 AND event_type IN ('metadata', 'run_start')
        ORDER BY seq LIMIT 1`,
      values: [threadId, runId, CATEGORY_NUMBER.lifecycle],
    }),
    runTerminal(db, threadId, runId),
  ]);
  const s = span.rows[0];
  if (!s || s.first === null) return undefined;
  const startContent = start.rows[0] ? (JSON.parse(start.rows[0].content) as unknown) : undefined;
  const assistantId = field(startContent, 'assistant_id');
  return {
    firstSeq: Number(s.first),
    lastSeq: Number(s.last),
    createdAt: s.created,
    updatedAt: s.updated,
    assistantId,
    terminal,
  };
}

/**
 * The final status a terminal event stands for: its content's `status` when that is one
 * of LangGraph's, else what its type says (`end`/`run_end` succeeded, `error`/`run_error`
 * failed, a cancel or interrupt interrupted).
 */
export function finalStatus(t: Pick<RunTerminal, 'eventType' | 'content'>): FinalStatus {
  const status = field(t.content, 'status');
  if (status !== undefined && FINAL_STATUSES.has(status)) return status as FinalStatus;
  switch (t.eventType) {
    case 'end':
    case 'run_end':
      return 'success';
    case 'error':
    case 'run_error':
      return 'error';
    default:
      return 'interrupted';
  }
}

/** A string property of a JSON object, or undefined. */
export function field(value: unknown, key: string): string | undefined {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const v = (value as Record<string, unknown>)[key];
  return typeof v === 'string' ? v : undefined;
}
