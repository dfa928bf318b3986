/**
 * The threads list (`GET /v1/threads`): one row per thread that has runs, from the `runs`
 * table (a row per run, whatever the thread's length), in thread id order, paged by the
 * last id. The caller's readable threads (its token's ids and prefixes) and user scope are
 * applied in SQL, so a page is never short because of them.
 */
import type pg from 'pg';

export interface ThreadRecord {
  readonly thread_id: string;
  /** The thread's last seq (its cursor head). */
  readonly head_seq: number;
  readonly run_count: number;
  readonly event_count: number;
  readonly message_count: number;
  readonly started_at: string;
  readonly updated_at: string;
  /** The run with the highest first seq, and its status. */
  readonly last_run_id: string;
  readonly last_run_status: string;
}

export interface ThreadsQuery {
  /** Undefined: every thread. */
  readonly ids?: readonly string[] | undefined;
  readonly prefixes?: readonly string[] | undefined;
  /** Only threads with runs of this user, counting only those runs. */
  readonly userId?: string | undefined;
  /** Only threads whose id sorts after this one. */
  readonly after?: string | undefined;
  readonly limit: number;
}

const TS = (col: string): string => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/** `LIKE` pattern of an id prefix: ids may hold `_`, LIKE's any-character. */
const likePrefix = (p: string): string => `${p.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

/**
 * A page of threads. A thread's head is its whole head, GREATEST(max(seq), head_seq), whatever
 * runs a user filter leaves: the persister keeps no head, so runs' last seqs would miss another
 * user's later run.
 */
export async function listThreads(db: pg.Pool | pg.ClientBase, q: ThreadsQuery): Promise<ThreadRecord[]> {
  const values: unknown[] = [];
  const param = (v: unknown): string => {
    values.push(v);
    return `$${values.length}`;
  };
  const where: string[] = [];
  if (q.ids !== undefined || q.prefixes !== undefined) {
    const ids = q.ids ?? [];
    const prefixes = (q.prefixes ?? []).map(likePrefix);
    if (ids.length === 0 && prefixes.length === 0) return [];
    where.push(
      `(r.thread_id = ANY(${param(ids)}::text[]) OR r.thread_id LIKE ANY(${param(prefixes)}::text[]))`,
    );
  }
  if (q.userId !== undefined) where.push(`r.user_id = ${param(q.userId)}`);
  if (q.after !== undefined) where.push(`r.thread_id > ${param(q.after)}`);
  const { rows } = await db.query<Record<string, string>>(
    `SELECT r.thread_id, GREATEST((SELECT max(e.seq) FROM run_events e WHERE e.thread_id = r.thread_id), max(h.head_seq))::int8 AS head_seq,
            count(*)::int8 AS run_count, sum(r.event_count)::int8 AS event_count,
            sum(r.message_count)::int8 AS message_count,
            ${TS('min(r.started_at)')} AS started_at, ${TS('max(r.updated_at)')} AS updated_at,
            (array_agg(r.run_id ORDER BY r.first_seq DESC))[1] AS last_run_id,
            (array_agg(r.status ORDER BY r.first_seq DESC))[1] AS last_run_status
       FROM runs r LEFT JOIN thread_heads h USING (thread_id)
      ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''}
      GROUP BY r.thread_id
      ORDER BY r.thread_id
      LIMIT ${param(q.limit)}`,
    values,
  );
  return rows.map((r) => ({
    thread_id: r.thread_id as string,
    head_seq: Number(r.head_seq),
    run_count: Number(r.run_count),
    event_count: Number(r.event_count),
    message_count: Number(r.message_count),
    started_at: r.started_at as string,
    updated_at: r.updated_at as string,
    last_run_id: r.last_run_id as string,
    last_run_status: r.last_run_status as string,
  }));
}
