/**
 * The `runs` table: one row per run, kept by the persister from the run's events in the
 * same transaction that stores them (so a run's counters and status never disagree with
 * its events). The status rule
 * is domain/run-lifecycle.ts; this file folds a batch's events into one change per run
 * ({@link runDeltas}) and reads the rows back.
 */
import type pg from 'pg';
import { CATEGORY_NUMBER, type StoredEvent } from '../domain/event.js';
import { classify, jsonObject, type RunStatusName } from '../domain/run-lifecycle.js';

/** What one thread-batch does to one run. */
export interface RunDelta {
  readonly run_id: string;
  /** First non-empty user_id of the batch's events of the run. */
  user_id: string;
  /** The batch's events of the run carry more than one user_id ('' counting as one). */
  mixed: boolean;
  /** The one user_id they all carry, when not mixed. */
  sole: string;
  /**
   * With `explicit`: the status set by the batch's latest start or terminal event. Without:
   * `running` if the batch had activity (a pending run becomes running), else `pending`.
   */
  status: RunStatusName;
  explicit: boolean;
  first_seq: number;
  last_seq: number;
  end_seq: number | null;
  events: number;
  messages: number;
  traces: number;
  lifecycles: number;
  started_at: string;
  updated_at: string;
  ended_at: string | null;
  /** Content of the batch's latest start event, when it is an object. */
  metadata: string | null;
  outcome: string | null;
}

/** Folds a batch's events (seq order) into one delta per run, in order of first appearance. */
export function runDeltas(inserted: readonly StoredEvent[]): RunDelta[] {
  const byRun = new Map<string, RunDelta & { active: boolean }>();
  for (const e of inserted) {
    let d = byRun.get(e.run_id);
    if (!d) {
      d = {
        run_id: e.run_id,
        user_id: '',
        mixed: false,
        sole: e.user_id,
        status: 'pending',
        explicit: false,
        active: false,
        first_seq: e.seq,
        last_seq: e.seq,
        end_seq: null,
        events: 0,
        messages: 0,
        traces: 0,
        lifecycles: 0,
        started_at: e.created_at,
        updated_at: e.created_at,
        ended_at: null,
        metadata: null,
        outcome: null,
      };
      byRun.set(e.run_id, d);
    }
    if (d.user_id === '' && e.user_id !== '') d.user_id = e.user_id;
    if (e.user_id !== d.sole) d.mixed = true;
    d.last_seq = e.seq;
    d.events++;
    if (e.category === 'message') d.messages++;
    else if (e.category === 'trace') d.traces++;
    else if (e.category === 'lifecycle') d.lifecycles++;
    if (e.created_at < d.started_at) d.started_at = e.created_at;
    if (e.created_at > d.updated_at) d.updated_at = e.created_at;
    const signal = classify(e.category, e.event_type, e.content_json);
    switch (signal.kind) {
      case 'start':
        d.explicit = true;
        d.status = 'running';
        d.end_seq = null;
        d.ended_at = null;
        d.outcome = null;
        if (jsonObject(e.content_json)) d.metadata = e.content_json;
        break;
      case 'terminal':
        d.explicit = true;
        d.status = signal.status;
        d.end_seq = e.seq;
        d.ended_at = e.created_at;
        d.outcome = e.content_json;
        break;
      case 'pending':
      case 'neutral':
        break;
      case 'other':
        d.active = true;
    }
  }
  const deltas: RunDelta[] = [];
  for (const { active, ...d } of byRun.values()) {
    if (!d.explicit) d.status = active ? 'running' : 'pending';
    deltas.push(d);
  }
  return deltas;
}

export interface RunRecord {
  readonly thread_id: string;
  readonly run_id: string;
  readonly user_id: string;
  readonly status: RunStatusName;
  readonly first_seq: number;
  readonly last_seq: number;
  readonly end_seq: number | null;
  readonly event_count: number;
  readonly message_count: number;
  readonly trace_count: number;
  readonly lifecycle_count: number;
  readonly started_at: string;
  readonly updated_at: string;
  readonly ended_at: string | null;
  /** JSON text. */
  readonly metadata_json: string;
  /** JSON text, or null while the run has not ended. */
  readonly outcome_json: string | null;
}

interface RunRow {
  thread_id: string;
  run_id: string;
  user_id: string;
  status: RunStatusName;
  first_seq: string;
  last_seq: string;
  end_seq: string | null;
  event_count: string;
  message_count: string;
  trace_count: string;
  lifecycle_count: string;
  started_at: string;
  updated_at: string;
  ended_at: string | null;
  metadata: string;
  outcome: string | null;
}

const TS = (col: string): string =>
  `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS ${col}`;
const RUN_COLUMNS = `thread_id, run_id, user_id, status, first_seq, last_seq, end_seq, event_count, message_count,
  trace_count, lifecycle_count, ${TS('started_at')}, ${TS('updated_at')}, ${TS('ended_at')},
  metadata::text AS metadata, outcome::text AS outcome`;

function toRun(r: RunRow): RunRecord {
  return {
    thread_id: r.thread_id,
    run_id: r.run_id,
    user_id: r.user_id,
    status: r.status,
    first_seq: Number(r.first_seq),
    last_seq: Number(r.last_seq),
    end_seq: r.end_seq === null ? null : Number(r.end_seq),
    event_count: Number(r.event_count),
    message_count: Number(r.message_count),
    trace_count: Number(r.trace_count),
    lifecycle_count: Number(r.lifecycle_count),
    started_at: r.started_at,
    updated_at: r.updated_at,
    ended_at: r.ended_at,
    metadata_json: r.metadata,
    outcome_json: r.outcome,
  };
}

/** One run, or undefined; with `userId`, only a run of that user. */
export async function getRun(
  db: pg.Pool | pg.ClientBase,
  threadId: string,
  runId: string,
  userId?: string,
): Promise<RunRecord | undefined> {
  const { rows } = await db.query<RunRow>({
    name: 'rs_get_run',
    text: `SELECT ${RUN_COLUMNS} FROM runs WHERE thread_id = $1 AND run_id = $2 AND ($3::text IS NULL OR user_id = $3)`,
    values: [threadId, runId, userId ?? null],
  });
  return rows[0] && toRun(rows[0]);
}

export interface RunsQuery {
  readonly threadId: string;
  /** Only runs with first_seq < beforeSeq. */
  readonly beforeSeq?: number | undefined;
  readonly statuses?: readonly RunStatusName[] | undefined;
  readonly userId?: string | undefined;
  readonly limit: number;
}

/** A thread's runs, newest (highest first_seq) first. */
export async function listRuns(db: pg.Pool | pg.ClientBase, q: RunsQuery): Promise<RunRecord[]> {
  const values: unknown[] = [q.threadId];
  const where = ['thread_id = $1'];
  const param = (v: unknown): string => {
    values.push(v);
    return `$${values.length}`;
  };
  if (q.beforeSeq !== undefined) where.push(`first_seq < ${param(q.beforeSeq)}`);
  if (q.userId !== undefined) where.push(`user_id = ${param(q.userId)}`);
  if (q.statuses && q.statuses.length > 0) where.push(`status = ANY(${param(q.statuses)}::text[])`);
  const { rows } = await db.query<RunRow>(
    `SELECT ${RUN_COLUMNS} FROM runs WHERE ${where.join(' AND ')} ORDER BY first_seq DESC LIMIT ${param(q.limit)}`,
    values,
  );
  return rows.map(toRun);
}

/**
 * Messages (category `message`) of a thread or a run, from the runs' counters: a row per
 * run, whatever the thread's length. A user-scoped count takes the counters of the runs
 * wholly that user's, and counts rows only in runs that mix users.
 */
export async function countMessages(
  db: pg.Pool | pg.ClientBase,
  threadId: string,
  runId?: string,
  userId?: string,
): Promise<number> {
  if (userId === undefined) {
    const { rows } = await db.query<{ n: string }>({
      name: 'rs_count_messages',
      text: `SELECT COALESCE(sum(message_count), 0)::int8 AS n FROM runs
              WHERE thread_id = $1 AND ($2::text IS NULL OR run_id = $2)`,
      values: [threadId, runId ?? null],
    });
    return Number(rows[0]?.n ?? 0);
  }
  const { rows } = await db.query<{ n: string }>({
    name: 'rs_count_messages_user',
    text: `SELECT (SELECT COALESCE(sum(message_count), 0) FROM runs
                    WHERE thread_id = $1 AND ($2::text IS NULL OR run_id = $2) AND user_id = $3
                      AND NOT users_mixed)
                + (SELECT count(*) FROM run_events
                    WHERE thread_id = $1 AND category = $4 AND user_id = $3
                      AND run_id = ANY(ARRAY(SELECT run_id FROM runs WHERE thread_id = $1
                                               AND ($2::text IS NULL OR run_id = $2) AND users_mixed)))
                AS n`,
    values: [threadId, runId ?? null, userId, CATEGORY_NUMBER.message],
  });
  return Number(rows[0]?.n ?? 0);
}
