/**
 * Partition leases and positions in Postgres (migration 0008): who may store a partition,
 * until when, and how far it is stored.
 *
 * A lease is `(owner, epoch)` on a partition's row, valid until `expires_at` (Postgres's
 * clock). Taking a partition over bumps its epoch. Every seq transaction starts with
 * {@link fence}: one UPDATE of its partitions' rows that matches owner and epoch and moves
 * their positions. It locks those rows until commit, so a takeover waits for a transaction
 * in flight, and a transaction after a takeover matches no row and is rolled back: a
 * persister that lost a lease can never commit again, and a partition's position always
 * moves with the events stored under it.
 */
import type pg from 'pg';
import { partitionOf } from '../domain/partition.js';
import { withClient } from './pool-client.js';

/** A partition held: the epoch of the lease, and the position when it was taken. */
export interface Lease {
  readonly partition: number;
  readonly epoch: number;
  readonly lastOffset: number;
}

/** What a seq transaction proves and moves: a held partition and its new position. */
export interface FenceEntry {
  readonly partition: number;
  readonly epoch: number;
  readonly upto: number;
}

/** A seq transaction found leases it no longer holds (taken over): nothing was committed. */
export class FencedError extends Error {
  constructor(
    /** Partitions lost (with the epochs that were held). */
    readonly lost: readonly { readonly partition: number; readonly epoch: number }[],
  ) {
    super(`partition leases taken over: ${lost.map((l) => l.partition).join(', ')}`);
    this.name = 'FencedError';
  }
}

export interface LeaseScope {
  readonly stream: string;
  /** This persister's id, unique per process start. */
  readonly member: string;
  readonly leaseMs: number;
}

export interface Layout {
  /** Whether the messages from before partitions are all stored (legacy-log.ts). */
  readonly legacyDrained: boolean;
}

/**
 * Creates the stream's layout and partition rows on first use, or checks this process's
 * partition count against them. New partitions start at `startAfter`: the last sequence of
 * the log from before partitions (0 without one), which their streams start after.
 */
export async function ensureLayout(
  db: pg.Pool,
  stream: string,
  partitions: number,
  startAfter = 0,
): Promise<Layout> {
  const client = await db.connect();
  try {
    await client.query('BEGIN');
    await client.query("SELECT pg_advisory_xact_lock(hashtextextended('rs-layout:' || $1, 0))", [stream]);
    const { rows } = await client.query<{ partitions: number; legacy_drained: boolean }>(
      'SELECT partitions, legacy_drained FROM log_layout WHERE stream = $1',
      [stream],
    );
    const found = rows[0];
    if (found && found.partitions !== partitions) {
      throw new Error(
        `RS_PARTITIONS=${partitions}, but the persisters of stream ${stream} store ${found.partitions} ` +
          'partitions (log_layout in Postgres): every process must use the same count',
      );
    }
    if (!found) {
      await client.query('INSERT INTO log_layout (stream, partitions) VALUES ($1, $2)', [stream, partitions]);
      await client.query(
        `INSERT INTO log_partitions (stream, partition, last_offset, epoch)
         SELECT $1, p, $3, ${CLOCK_EPOCH} FROM generate_series(0, $2 - 1) p`,
        [stream, partitions, startAfter],
      );
    }
    await client.query('COMMIT');
    return { legacyDrained: found?.legacy_drained ?? false };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/**
 * A row's first epoch: the clock in ms, so a row made again (the table wiped by hand) never
 * hands out an epoch a persister may still hold from before.
 */
const CLOCK_EPOCH = '(extract(epoch from statement_timestamp()) * 1000)::int8';

/**
 * The partitions of `0 .. partitions-1` that have no row (the lease store was wiped or edited
 * by hand), made again at position 0: their log replays, and what is stored comes back as
 * duplicates. Returns the partitions made.
 */
export async function restoreMissing(db: pg.Pool, stream: string, partitions: number): Promise<number[]> {
  const { rows } = await db.query<{ partition: number }>({
    name: 'rs_lease_restore',
    text: `INSERT INTO log_partitions (stream, partition, last_offset, epoch)
           SELECT $1, p, 0, ${CLOCK_EPOCH} FROM generate_series(0, $2 - 1) p
           ON CONFLICT (stream, partition) DO NOTHING
           RETURNING partition`,
    values: [stream, partitions],
  });
  return rows.map((r) => r.partition).sort((a, b) => a - b);
}

export async function markLegacyDrained(db: pg.Pool, stream: string): Promise<void> {
  await db.query('UPDATE log_layout SET legacy_drained = true WHERE stream = $1', [stream]);
}

/** What a heartbeat learns. */
export interface Members {
  /** Persisters alive, itself included. */
  readonly live: number;
  /** Its place among them (their ids in order): shares follow it. */
  readonly index: number;
  /** Partition rows the stream has. */
  readonly rows: number;
}

/**
 * Says this persister is alive for another lease period, and returns who is (itself
 * included) and how many partition rows the stream has. Members dead for an hour are forgotten.
 */
export async function heartbeat(db: pg.Pool, s: LeaseScope): Promise<Members> {
  const { rows } = await db.query<{ others: string[]; partitions: string }>({
    name: 'rs_lease_heartbeat',
    text: `WITH me AS (
             INSERT INTO persister_members (stream, member, expires_at)
             VALUES ($1, $2, now() + $3 * interval '1 millisecond')
             ON CONFLICT (stream, member) DO UPDATE SET expires_at = EXCLUDED.expires_at
           ), gone AS (
             DELETE FROM persister_members
              WHERE stream = $1 AND member <> $2 AND expires_at < now() - interval '1 hour'
           )
           SELECT ARRAY(SELECT member FROM persister_members
                         WHERE stream = $1 AND member <> $2 AND expires_at > now()) AS others,
                  (SELECT count(*) FROM log_partitions WHERE stream = $1) AS partitions`,
    values: [s.stream, s.member, s.leaseMs],
  });
  const members = [...(rows[0]?.others ?? []), s.member].sort();
  return { live: members.length, index: members.indexOf(s.member), rows: Number(rows[0]?.partitions ?? 0) };
}

/**
 * A member's fair share of `partitions`: ⌊partitions / live⌋, and one more for the first
 * `partitions mod live` members in id order, so the shares add up to the partitions.
 */
export function shareOf(partitions: number, m: Members): number {
  return Math.floor(partitions / m.live) + (m.index < partitions % m.live ? 1 : 0);
}

/** Extends the leases still held; returns their partitions (a lease not returned was lost). */
export async function renew(db: pg.Pool, s: LeaseScope, held: readonly Lease[]): Promise<Set<number>> {
  if (held.length === 0) return new Set();
  const { rows } = await db.query<{ partition: number }>({
    name: 'rs_lease_renew',
    text: `UPDATE log_partitions p SET expires_at = now() + $3 * interval '1 millisecond'
             FROM unnest($4::int[], $5::int8[]) AS x(partition, epoch)
            WHERE p.stream = $1 AND p.owner = $2 AND p.partition = x.partition AND p.epoch = x.epoch
            RETURNING p.partition`,
    values: [s.stream, s.member, s.leaseMs, held.map((l) => l.partition), held.map((l) => l.epoch)],
  });
  return new Set(rows.map((r) => r.partition));
}

/**
 * Takes up to `n` partitions that nobody holds (released, or their lease ran out), lowest
 * first, skipping rows a transaction has locked (a seq transaction of their last owner in
 * flight: they are free at the next try).
 */
export async function acquire(db: pg.Pool, s: LeaseScope, n: number): Promise<Lease[]> {
  if (n <= 0) return [];
  const { rows } = await db.query<{ partition: number; epoch: string; last_offset: string }>({
    name: 'rs_lease_acquire',
    text: `UPDATE log_partitions p
              SET owner = $2, epoch = p.epoch + 1, expires_at = now() + $3 * interval '1 millisecond',
                  updated_at = now()
             FROM (SELECT partition FROM log_partitions
                    WHERE stream = $1 AND (owner IS NULL OR expires_at <= now())
                    ORDER BY partition LIMIT $4 FOR UPDATE SKIP LOCKED) free
            WHERE p.stream = $1 AND p.partition = free.partition
            RETURNING p.partition, p.epoch, p.last_offset`,
    values: [s.stream, s.member, s.leaseMs, n],
  });
  return rows
    .map((r) => ({ partition: r.partition, epoch: Number(r.epoch), lastOffset: Number(r.last_offset) }))
    .sort((a, b) => a.partition - b.partition);
}

/**
 * A persister's sign of life that needs no clock: a session advisory lock on its own
 * connection, held for as long as it runs. A process that died (kill -9, a crash) loses its
 * connection at once, and with it the lock.
 */
export async function holdMemberLock(client: pg.ClientBase, s: LeaseScope): Promise<boolean> {
  const { rows } = await client.query<{ held: boolean }>(
    "SELECT pg_try_advisory_lock(hashtextextended('rs-member:' || $1, 0)) AS held",
    [s.member],
  );
  return rows[0]?.held === true;
}

/**
 * The other persisters holding leases whose member lock is free: dead processes (their
 * connection is gone) whose leases have not run out yet. Their leases end now, and they leave
 * the members, so the partitions are taken over at the next acquire instead of a lease later.
 * A live persister that only lost its lock's connection (Postgres restarted) is fenced, and
 * takes its share again.
 */
export async function reapDead(db: pg.Pool, s: LeaseScope): Promise<string[]> {
  const { rows } = await db.query<{ owner: string }>({
    name: 'rs_lease_reap',
    text: `WITH dead AS (
             SELECT owner FROM (SELECT DISTINCT owner FROM log_partitions
                                 WHERE stream = $1 AND owner IS NOT NULL AND owner <> $2
                                   AND expires_at > now()) o
              WHERE CASE WHEN pg_try_advisory_lock(hashtextextended('rs-member:' || o.owner, 0))
                         THEN pg_advisory_unlock(hashtextextended('rs-member:' || o.owner, 0))
                         ELSE false END
           ), ended AS (
             UPDATE log_partitions p SET expires_at = now(), updated_at = now()
               FROM dead WHERE p.stream = $1 AND p.owner = dead.owner AND p.expires_at > now()
           ), gone AS (
             DELETE FROM persister_members m USING dead WHERE m.stream = $1 AND m.member = dead.owner
           )
           SELECT owner FROM dead`,
    values: [s.stream, s.member],
  });
  return rows.map((r) => r.owner);
}

/** Gives leases up at once (their positions stay), so another persister can take them now. */
export async function release(db: pg.Pool, s: LeaseScope, leases: readonly Lease[]): Promise<void> {
  if (leases.length === 0) return;
  await db.query({
    name: 'rs_lease_release',
    text: `UPDATE log_partitions p SET owner = NULL, expires_at = '-infinity', updated_at = now()
             FROM unnest($3::int[], $4::int8[]) AS x(partition, epoch)
            WHERE p.stream = $1 AND p.owner = $2 AND p.partition = x.partition AND p.epoch = x.epoch`,
    values: [s.stream, s.member, leases.map((l) => l.partition), leases.map((l) => l.epoch)],
  });
}

/** This persister leaves: the others divide the partitions without it. */
export async function leave(db: pg.Pool, s: LeaseScope): Promise<void> {
  await db.query('DELETE FROM persister_members WHERE stream = $1 AND member = $2', [s.stream, s.member]);
}

/**
 * The first statement of a seq transaction: proves each partition's lease and moves its
 * position; throws {@link FencedError} (the caller rolls back) for any lease not held.
 */
export async function fence(
  db: pg.ClientBase | pg.Pool,
  s: LeaseScope,
  entries: readonly FenceEntry[],
): Promise<void> {
  if (entries.length === 0) return;
  const { rows } = await db.query<{ partition: number }>({
    name: 'rs_lease_fence',
    text: `UPDATE log_partitions p SET last_offset = x.upto
             FROM unnest($3::int[], $4::int8[], $5::int8[]) AS x(partition, epoch, upto)
            WHERE p.stream = $1 AND p.owner = $2 AND p.partition = x.partition AND p.epoch = x.epoch
            RETURNING p.partition`,
    values: [
      s.stream,
      s.member,
      entries.map((e) => e.partition),
      entries.map((e) => e.epoch),
      entries.map((e) => e.upto),
    ],
  });
  if (rows.length === entries.length) return;
  const held = new Set(rows.map((r) => r.partition));
  throw new FencedError(entries.filter((e) => !held.has(e.partition)));
}

/** A partition's stream as a persister taking the partition found it. */
export interface LogFound {
  readonly lease: Lease;
  /** The stream's creation time, as JetStream reports it: a stream made again has another. */
  readonly created: string;
  /** The stream's last sequence. */
  readonly last: number;
}

/** Where a persister taking a partition reads it from (see {@link adoptLogs}). */
export interface AdoptedLog {
  readonly position: number;
  /** The stream was made again since the position was recorded: its log is read from its start. */
  readonly remade: boolean;
}

/** What {@link adoptLogs} found and did. */
export interface Adoption {
  /** By partition; a partition missing was taken over meanwhile (its lease is not held). */
  readonly logs: Map<number, AdoptedLog>;
  /** Threads whose deletion horizons were cleared (of partitions made again, or new). */
  readonly clearedThreads: number;
}

/**
 * Ties the positions of newly taken partitions to their streams (migration 0012). A stream
 * made again under the same name numbers its messages from 1: the partition's position and the
 * deletion horizons of its threads, offsets of the old stream, would skip the new log's first
 * messages and drop its events as deleted. A partition is taken as made again when its recorded
 * `log_created` differs from the stream's, when the position is past the stream's end, or when
 * nothing is recorded of it at all (no creation time, position 0: a new partition row, as for a
 * new RS_STREAM name in a database that held another). Its position goes back to 0 and the
 * horizons of its threads are cleared. A row from before creation times were kept, with a
 * position inside the stream, only has the stream's recorded. All in one transaction, on rows
 * locked FOR UPDATE and still leased to `s` at the epochs given, so no other persister and no
 * delete in flight (deletions.ts reads the row FOR KEY SHARE) interleaves with it.
 */
export async function adoptLogs(
  db: pg.Pool,
  s: LeaseScope,
  found: readonly LogFound[],
  partitions: number,
): Promise<Adoption> {
  const logs = new Map<number, AdoptedLog>();
  if (found.length === 0) return { logs, clearedThreads: 0 };
  return withClient(db, async (client) => {
    await client.query('BEGIN');
    try {
      const { rows } = await client.query<{
        partition: number;
        last_offset: string;
        log_created: string | null;
      }>({
        name: 'rs_lease_adopt_lock',
        text: `SELECT p.partition, p.last_offset, p.log_created FROM log_partitions p
                 JOIN unnest($3::int[], $4::int8[]) AS x(partition, epoch)
                   ON p.partition = x.partition AND p.epoch = x.epoch
                WHERE p.stream = $1 AND p.owner = $2
                ORDER BY p.partition
                  FOR UPDATE OF p`,
        values: [s.stream, s.member, found.map((f) => f.lease.partition), found.map((f) => f.lease.epoch)],
      });
      const byPartition = new Map(found.map((f) => [f.lease.partition, f]));
      const changed: { partition: number; created: string; remade: boolean; clear: boolean }[] = [];
      for (const row of rows) {
        const f = byPartition.get(row.partition) as LogFound;
        const position = Number(row.last_offset);
        const remade = position > f.last || (row.log_created !== null && row.log_created !== f.created);
        // Nothing recorded: whatever horizons its threads have are of another stream, or none.
        const clear = remade || (row.log_created === null && position === 0);
        logs.set(row.partition, { position: remade ? 0 : position, remade });
        if (clear || row.log_created !== f.created) {
          changed.push({ partition: row.partition, created: f.created, remade, clear });
        }
      }
      let clearedThreads = 0;
      const cleared = new Set(changed.filter((c) => c.clear).map((c) => c.partition));
      if (cleared.size > 0) {
        // Threads with a horizon are those ever deleted (or with a deleted run): few, read whole.
        const { rows: deleted } = await client.query<{ thread_id: string }>(
          `SELECT thread_id FROM thread_heads WHERE deleted_upto_offset > 0 OR run_deleted_upto_offset > 0
           UNION SELECT thread_id FROM run_deletions`,
        );
        const ids = deleted.map((r) => r.thread_id).filter((t) => cleared.has(partitionOf(t, partitions)));
        if (ids.length > 0) {
          await client.query(
            'UPDATE thread_heads SET deleted_upto_offset = 0, run_deleted_upto_offset = 0 WHERE thread_id = ANY($1::text[])',
            [ids],
          );
          await client.query('DELETE FROM run_deletions WHERE thread_id = ANY($1::text[])', [ids]);
        }
        clearedThreads = ids.length;
      }
      if (changed.length > 0) {
        await client.query(
          `UPDATE log_partitions p
              SET log_created = x.created, last_offset = CASE WHEN x.remade THEN 0 ELSE p.last_offset END,
                  updated_at = now()
             FROM unnest($2::int[], $3::text[], $4::bool[]) AS x(partition, created, remade)
            WHERE p.stream = $1 AND p.partition = x.partition`,
          [
            s.stream,
            changed.map((c) => c.partition),
            changed.map((c) => c.created),
            changed.map((c) => c.remade),
          ],
        );
      }
      await client.query('COMMIT');
      return { logs, clearedThreads };
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  });
}

/**
 * Of `partitions`, those whose recorded stream is the one `created` names (`created(p)`: the
 * partition stream's creation time now): their deletion horizons count in the log as it is. A
 * stream made again and not yet taken up by a persister (adoptLogs), or a partition never taken,
 * is left out: its horizons may be offsets of another stream.
 */
export async function logsTakenUp(
  db: pg.Pool,
  stream: string,
  partitions: readonly number[],
  created: (partition: number) => Promise<string | undefined>,
): Promise<Set<number>> {
  const [{ rows }, now] = await Promise.all([
    db.query<{ partition: number; log_created: string | null }>({
      name: 'rs_logs_taken_up',
      text: 'SELECT partition, log_created FROM log_partitions WHERE stream = $1 AND partition = ANY($2::int[])',
      values: [stream, partitions],
    }),
    Promise.all(partitions.map((p) => created(p))),
  ]);
  const current = new Map(partitions.map((p, i) => [p, now[i]]));
  return new Set(
    rows
      .filter((r) => r.log_created !== null && r.log_created === current.get(r.partition))
      .map((r) => r.partition),
  );
}

/** Every partition's position (tests, the legacy upgrade, `runstream` tools). */
export async function partitionPositions(
  db: pg.Pool | pg.ClientBase,
  stream: string,
): Promise<Map<number, number>> {
  const { rows } = await db.query<{ partition: number; last_offset: string }>(
    'SELECT partition, last_offset FROM log_partitions WHERE stream = $1',
    [stream],
  );
  return new Map(rows.map((r) => [r.partition, Number(r.last_offset)]));
}
