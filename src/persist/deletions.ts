/**
 * Deleting a thread or a run from Postgres, and keeping it deleted.
 *
 * A deletion happens at a *horizon*: a JetStream offset at or above every log message of
 * the thread (run) that existed when it was deleted. It removes the rows and records the
 * horizon (thread_heads / run_deletions, migration 0004), all under the thread's advisory
 * lock, so it is ordered with the persister's transactions. Afterwards the persister
 * drops any message of that thread (run) at or below the horizon: a replay from an old
 * checkpoint after a crash, or a message that was still on its way through the log while
 * the delete ran, can never bring deleted events back. Messages above the horizon are
 * new events and are stored, with seqs above the thread's head: seqs are never reused.
 */
import type pg from 'pg';
import { PermissionDeniedError, UnavailableError } from '../errors.js';
import { byKeys } from './by-keys.js';
import { withClient } from './pool-client.js';

const LOCK_SQL = 'SELECT pg_advisory_xact_lock(hashtextextended($1, 0))';

/** A thread's deletion horizons, as read with its head at the start of a thread-batch. */
export interface Horizons {
  /** Thread deleted up to this offset (0: never). */
  readonly thread: number;
  /** Highest horizon of any deleted run of the thread (0: none). */
  readonly runs: number;
}

export interface DeleteRowsQuery {
  readonly threadId: string;
  /** Only this run; undefined: the whole thread. */
  readonly runId?: string | undefined;
  /** Only if every event of the thread (run) belongs to this user. */
  readonly userId?: string | undefined;
  /** The log's last offset, read before the delete. */
  readonly logHorizon: number;
  /**
   * The thread's partition (`log_partitions`' key): what the persister has stored of it bounds
   * where the thread's messages not stored yet can lie ({@link DeletedRows.from}). Without it,
   * a thread with nothing stored is looked for from the partition's start.
   */
  readonly partition?:
    | {
        readonly stream: string;
        readonly index: number;
        /**
         * The creation time of the partition stream `logHorizon` was read from. A persister that
         * finds its partition's stream made again clears the horizons of its threads
         * (leases.ts: adoptLogs); until it has, a horizon read from the new stream is refused.
         */
        readonly logCreated?: string | undefined;
      }
    | undefined;
}

export interface DeletedRows {
  readonly events: number;
  readonly runs: number;
  /** The horizon recorded: max(logHorizon, highest offset of a deleted row). */
  readonly horizon: number;
  /** The thread's head seq, which later events continue above. */
  readonly head: number;
  /**
   * The lowest log offset a message of the thread (run) can still have: the thread's lowest
   * row's or refused event's, whichever run they are of (a run's message may have stored
   * nothing of its own: its events were another run's duplicates), or the one after the
   * partition's stored position if lower. Stored offsets are a prefix of a thread's log, and
   * every message the persister has passed stored a row or a refused event of its thread unless
   * a delete dropped it, so the thread's messages not yet stored come after both. 1 when the
   * thread or any of its runs was deleted before (a message dropped for a delete stores
   * nothing, and one an earlier delete failed to remove may lie anywhere below), or when the
   * thread has nothing stored and the partition's position is not known.
   */
  readonly from: number;
}

/**
 * Deletes a thread's (run's) rows and records the horizon, in one transaction under the
 * thread's advisory lock. With a user scope, a thread (run) that holds another user's
 * events is refused whole (PermissionDeniedError) and nothing is deleted.
 */
export function deleteRows(pool: pg.Pool, q: DeleteRowsQuery): Promise<DeletedRows> {
  return withClient(pool, async (client) => {
    await client.query('BEGIN');
    try {
      await client.query({ name: 'rs_lock', text: LOCK_SQL, values: [q.threadId] });
      const run = q.runId ?? null;
      if (q.partition?.logCreated !== undefined) {
        // FOR KEY SHARE: the persister's fence and renewals do not wait on it; adoptLogs (FOR
        // UPDATE) does, so it clears a horizon of the old stream recorded here, and one of the
        // new stream is recorded only once it has run.
        const { rows } = await client.query<{ log_created: string | null }>({
          name: 'rs_delete_log_created',
          text: 'SELECT log_created FROM log_partitions WHERE stream = $1 AND partition = $2 FOR KEY SHARE',
          values: [q.partition.stream, q.partition.index],
        });
        const known = rows[0]?.log_created ?? null;
        if (known !== null && known !== q.partition.logCreated) {
          throw new UnavailableError(
            `the event log of partition ${q.partition.index} was made again and no persister has taken it up yet; ` +
              'nothing was deleted, try again in a few seconds',
          );
        }
      }
      if (q.userId !== undefined) {
        const { rows } = await client.query(
          `SELECT 1 FROM run_events WHERE thread_id = $1 AND ($2::text IS NULL OR run_id = $2)
             AND user_id <> $3 LIMIT 1`,
          [q.threadId, run, q.userId],
        );
        if (rows.length > 0) {
          const what = q.runId === undefined ? `thread ${q.threadId}` : `run ${q.runId}`;
          throw new PermissionDeniedError(
            `${what} holds events of other users; a delete scoped to user ${q.userId} removes only threads and runs wholly theirs`,
          );
        }
      }
      // Where the log's messages of the thread (run) can start (DeletedRows.from), read before
      // anything goes, by index probes, and under the thread's lock: a batch storing the
      // thread's messages takes it too, so none moves the position past them meanwhile.
      const { rows: start } = await client.query<{ from: string }>(
        `SELECT CASE WHEN EXISTS (SELECT 1 FROM thread_heads WHERE thread_id = $1 AND deleted_upto_offset > 0)
                       OR EXISTS (SELECT 1 FROM run_deletions WHERE thread_id = $1)
                     THEN 1
                     ELSE COALESCE(LEAST((SELECT min(stream_offset) FROM run_events WHERE thread_id = $1),
                                         (SELECT min(stream_offset) FROM dead_letters WHERE thread_id = $1),
                                         (SELECT last_offset + 1 FROM log_partitions
                                           WHERE stream = $2 AND partition = $3)), 1)
                END::int8 AS from`,
        [q.threadId, q.partition?.stream ?? null, q.partition?.index ?? null],
      );
      const from = Number(start[0]?.from ?? 1);
      // Which rows go: a thread's, or a run's (through the (thread_id, run_id, seq) index).
      const { rows: gone } = await client.query<{ n: string; seq: string | null; off: string | null }>(
        q.runId === undefined
          ? {
              text: `WITH d AS (DELETE FROM run_events WHERE thread_id = $1 RETURNING seq, stream_offset)
                     SELECT count(*) AS n, max(seq) AS seq, max(stream_offset) AS off FROM d`,
              values: [q.threadId],
            }
          : {
              text: `WITH d AS (DELETE FROM run_events WHERE thread_id = $1 AND run_id = $2
                                RETURNING seq, stream_offset)
                     SELECT count(*) AS n, max(seq) AS seq, max(stream_offset) AS off FROM d`,
              values: [q.threadId, q.runId],
            },
      );
      const events = Number(gone[0]?.n ?? 0);
      const horizon = Math.max(q.logHorizon, Number(gone[0]?.off ?? 0));
      const maxSeq = Number(gone[0]?.seq ?? 0);
      const runs = await client.query(
        'DELETE FROM runs WHERE thread_id = $1 AND ($2::text IS NULL OR run_id = $2)',
        [q.threadId, run],
      );
      // What the store refused of them goes too: a deleted thread (run) leaves nothing behind.
      await client.query(
        'DELETE FROM dead_letters WHERE thread_id = $1 AND ($2::text IS NULL OR run_id = $2)',
        [q.threadId, run],
      );
      if (q.runId !== undefined) {
        await client.query(
          `INSERT INTO run_deletions (thread_id, run_id, deleted_upto_offset) VALUES ($1, $2, $3)
           ON CONFLICT (thread_id, run_id) DO UPDATE
             SET deleted_upto_offset = GREATEST(run_deletions.deleted_upto_offset, EXCLUDED.deleted_upto_offset),
                 deleted_at = now()`,
          [q.threadId, q.runId, horizon],
        );
      } else {
        // Runs deleted below the thread's horizon need no record of their own any more.
        await client.query('DELETE FROM run_deletions WHERE thread_id = $1 AND deleted_upto_offset <= $2', [
          q.threadId,
          horizon,
        ]);
      }
      // The head never goes down; a thread deleted before any of it was stored gets one too.
      // The persister keeps no head (a head is GREATEST(max(seq), head_seq)): what a delete
      // removes may hold it, so the head is kept here, the rows left over counted in.
      const { rows: head } = await client.query<{ head_seq: string }>(
        q.runId === undefined
          ? {
              text: `INSERT INTO thread_heads AS h (thread_id, head_seq, deleted_upto_offset, deleted_at)
                     VALUES ($1, $2, $3, now())
                     ON CONFLICT (thread_id) DO UPDATE SET
                       head_seq = GREATEST(h.head_seq, EXCLUDED.head_seq),
                       deleted_upto_offset = GREATEST(h.deleted_upto_offset, EXCLUDED.deleted_upto_offset),
                       run_deleted_upto_offset = CASE WHEN h.run_deleted_upto_offset <= EXCLUDED.deleted_upto_offset
                                                      THEN 0 ELSE h.run_deleted_upto_offset END,
                       deleted_at = now()
                     RETURNING head_seq`,
              values: [q.threadId, maxSeq, horizon],
            }
          : {
              text: `INSERT INTO thread_heads AS h (thread_id, head_seq, run_deleted_upto_offset)
                     VALUES ($1, GREATEST($2::int8, (SELECT max(seq) FROM run_events WHERE thread_id = $1)), $3)
                     ON CONFLICT (thread_id) DO UPDATE SET
                       head_seq = GREATEST(h.head_seq, EXCLUDED.head_seq),
                       run_deleted_upto_offset = GREATEST(h.run_deleted_upto_offset, EXCLUDED.run_deleted_upto_offset)
                     RETURNING head_seq`,
              values: [q.threadId, maxSeq, horizon],
            },
      );
      await client.query('COMMIT');
      return { events, runs: runs.rowCount ?? 0, horizon, head: Number(head[0]?.head_seq ?? maxSeq), from };
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  });
}

/** A run of a thread, by its ids. */
export interface RunKey {
  readonly thread_id: string;
  readonly run_id: string;
}

/**
 * The offsets up to which threads' runs are deleted, in the order of `keys`: for each, the
 * higher of its thread's deletion horizon and its run's (0 when neither was ever deleted).
 * A statement per thousand keys (by-keys.ts).
 */
export async function deletionHorizons(
  db: pg.Pool | pg.ClientBase,
  keys: readonly RunKey[],
): Promise<number[]> {
  return byKeys(keys, async (chunk) => {
    const { rows } = await db.query<{ upto: string }>({
      name: 'rs_deletion_horizons',
      text: `SELECT GREATEST(
                      COALESCE((SELECT h.deleted_upto_offset FROM thread_heads h WHERE h.thread_id = k.thread_id), 0),
                      COALESCE((SELECT d.deleted_upto_offset FROM run_deletions d
                                 WHERE d.thread_id = k.thread_id AND d.run_id = k.run_id), 0)
                    )::int8 AS upto
               FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(thread_id, run_id, i)
              ORDER BY k.i`,
      values: [chunk.map((k) => k.thread_id), chunk.map((k) => k.run_id)],
    });
    return rows.map((r) => Number(r.upto));
  });
}
