/**
 * Stores a whole multi-thread batch, per thread exactly as storing each thread's events
 * alone, one thread after another, would. Two ways, with the same result:
 *
 * The fast path, for a batch with no rejected event and no event_id repeated within a thread
 * (the common case: new events): ONE statement in autocommit, `rs_store_rows` (migration
 * 0009's `rs_store_batch`, whose plans 0010 keeps index lookups, taking its text columns joined
 * in one text each since 0011: column-text.ts), one round trip and no BEGIN/COMMIT. In it, each
 * its own statement: the fence, the advisory locks, the heads, then the insert with the runs
 * upkeep. Each statement of a VOLATILE function takes a fresh snapshot under READ COMMITTED
 * (PostgreSQL docs, Function Volatility Categories; quoted in the migration), so the reads
 * after the locks see every earlier writer of those threads committed, as in the transaction.
 * When it finds an event already stored (its insert's ON CONFLICT) or a deletion horizon that
 * could drop one, it raises {@link SLOW_PATH_SQLSTATE}, which rolls it all back (the fence
 * too), and the batch goes the slow way.
 *
 * The slow path, {@link storeBatchInTransaction}: ONE READ COMMITTED transaction with a
 * constant number of set-based statements whatever the number of threads:
 *  0. the caller's fence, when given: the persister's partition leases and positions, which
 *     aborts the transaction when a lease was taken over (leases.ts);
 *  1. the threads' advisory locks, one statement, taken in key order (so two persisters
 *     with overlapping thread sets cannot deadlock); the statements after it take their
 *     snapshots once every earlier writer of those threads has committed;
 *  2. heads, deletion horizons and already-stored (thread_id, event_id) rows, one query;
 *  3. the deletion check (deletions.ts semantics), one query and only when needed;
 *  4. one insert (`unnest`) for every thread, seqs computed here per thread, and in the same
 *     statement (5) the runs upkeep (deltas from runs.ts `runDeltas`). thread_heads is not
 *     written: a head is GREATEST(max(seq), thread_heads.head_seq), and only a deletion,
 *     which removes rows, keeps the head of what it removed there (deletions.ts);
 *  6. for events the store refused (poison.ts), their dead letters, one statement.
 *
 * The runs upkeep SQL exists twice, in RECORD_SQL here and in rs_store_rows: a change to
 * one must be made to the other (test/batch-assigner.test.ts compares the two paths).
 */
import type pg from 'pg';
import { categoryNumber, type LogRecord, type StoredEvent, storedEvent } from '../domain/event.js';
import { arrayLiteral, joinedText } from './column-text.js';
import type { Horizons } from './deletions.js';
import { FencedError, type FenceEntry, fence as fenceLeases, type LeaseScope } from './leases.js';
import { noticeEventId, rejectionNotice, storableText } from './poison.js';
import { type RunDelta, runDeltas } from './runs.js';
import type { PendingEvent, Receipt, ThreadBatchResult } from './seq-assigner.js';

const LOCK_SQL = `SELECT pg_advisory_xact_lock(k)
  FROM (SELECT DISTINCT hashtextextended(t, 0) AS k FROM unnest($1::text[]) t ORDER BY k) s`;

// Per thread (event_id NULL): its head (thread_heads, or max(seq) before any), and its deletion
// horizons; then the rows that already hold any of the batch's (thread_id, event_id).
const EXISTING_SQL = `
  SELECT t.thread_id, NULL::text AS event_id,
         GREATEST((SELECT COALESCE(max(e.seq), 0) FROM run_events e WHERE e.thread_id = t.thread_id),
                  COALESCE(h.head_seq, 0))::int8 AS seq,
         COALESCE(h.deleted_upto_offset, 0)::int8 AS stream_offset,
         COALESCE(h.run_deleted_upto_offset, 0)::int8 AS run_horizon
    FROM unnest($1::text[]) AS t(thread_id) LEFT JOIN thread_heads h USING (thread_id)
  UNION ALL
  SELECT e.thread_id, e.event_id, e.seq, e.stream_offset, NULL::int8
    FROM (SELECT DISTINCT thread_id, event_id FROM unnest($2::text[], $3::text[]) AS q(thread_id, event_id)) q
    JOIN run_events e ON e.thread_id = q.thread_id AND e.event_id = q.event_id`;

const RUN_HORIZONS_SQL = `
  SELECT d.thread_id, d.run_id, d.deleted_upto_offset AS upto
    FROM (SELECT DISTINCT thread_id, run_id FROM unnest($1::text[], $2::text[]) AS q(thread_id, run_id)) q
    JOIN run_deletions d ON d.thread_id = q.thread_id AND d.run_id = q.run_id`;

const INSERT_SQL = `
  INSERT INTO run_events
    (thread_id, seq, event_id, run_id, event_type, category, user_id, created_at, content, metadata, stream_offset,
     category_name, created_at_text)
  SELECT x.thread_id, x.seq, x.event_id, x.run_id, x.event_type, x.category, x.user_id, x.created_at,
         x.content::json, x.metadata::json, x.stream_offset, x.category_name, x.created_at_text
    FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[], $6::int2[], $7::text[],
                $8::timestamptz[], $9::text[], $10::text[], $11::int8[], $12::text[], $13::text[])
         AS x(thread_id, seq, event_id, run_id, event_type, category, user_id, created_at,
              content, metadata, stream_offset, category_name, created_at_text)`;

// runs.ts RECORD_SQL with a thread_id column: under the threads' advisory locks nothing
// else writes these rows, so update-then-insert is race-free. Each (thread_id, run_id) is
// once in x. (thread_heads is not written here: a thread's head is GREATEST(max(seq),
// thread_heads.head_seq), and only deletions need head_seq, deletions.ts.)
const RECORD_SQL = `
  WITH x AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bool[], $6::int8[], $7::int8[],
                         $8::int8[], $9::int8[], $10::int8[], $11::int8[], $12::int8[], $13::timestamptz[],
                         $14::timestamptz[], $15::timestamptz[], $16::text[], $17::text[], $18::bool[],
                         $19::text[])
      AS x(thread_id, run_id, user_id, status, explicit, first_seq, last_seq, end_seq, events, messages,
           traces, lifecycles, started_at, updated_at, ended_at, metadata, outcome, mixed, sole)
  ), upd AS (
    UPDATE runs r SET
      user_id = CASE WHEN r.user_id = '' THEN x.user_id ELSE r.user_id END,
      users_mixed = r.users_mixed OR x.mixed OR x.sole <> r.user_id,
      status = CASE WHEN x.explicit THEN x.status
                    WHEN r.status = 'pending' AND x.status = 'running' THEN 'running'
                    ELSE r.status END,
      end_seq = CASE WHEN x.explicit THEN x.end_seq ELSE r.end_seq END,
      ended_at = CASE WHEN x.explicit THEN x.ended_at ELSE r.ended_at END,
      outcome = CASE WHEN x.explicit THEN x.outcome::json ELSE r.outcome END,
      metadata = COALESCE(x.metadata::json, r.metadata),
      first_seq = LEAST(r.first_seq, x.first_seq),
      last_seq = GREATEST(r.last_seq, x.last_seq),
      event_count = r.event_count + x.events,
      message_count = r.message_count + x.messages,
      trace_count = r.trace_count + x.traces,
      lifecycle_count = r.lifecycle_count + x.lifecycles,
      started_at = LEAST(r.started_at, x.started_at),
      updated_at = GREATEST(r.updated_at, x.updated_at)
    FROM x WHERE r.thread_id = x.thread_id AND r.run_id = x.run_id
    RETURNING r.thread_id, r.run_id
  )
  INSERT INTO runs (thread_id, run_id, user_id, users_mixed, status, first_seq, last_seq, end_seq,
                    event_count, message_count, trace_count, lifecycle_count, started_at, updated_at,
                    ended_at, metadata, outcome)
  SELECT x.thread_id, x.run_id, x.user_id, x.mixed, x.status, x.first_seq, x.last_seq, x.end_seq, x.events,
         x.messages, x.traces, x.lifecycles, x.started_at, x.updated_at, x.ended_at,
         COALESCE(x.metadata, '{}')::json, x.outcome::json
    FROM x WHERE NOT EXISTS (SELECT 1 FROM upd WHERE upd.thread_id = x.thread_id AND upd.run_id = x.run_id)`;

/**
 * Steps 4 and 5 in one statement, one round trip: the insert as a data-modifying CTE ahead of
 * RECORD_SQL's (its parameters after the insert's). Nothing in RECORD_SQL reads run_events,
 * so seeing the snapshot from before the insert changes nothing; a refused row fails the
 * statement as the insert alone would, with the same error.
 */
const INSERT_COLUMNS = 13;
const INSERT_AND_RECORD_SQL = `
  WITH ins AS (${INSERT_SQL.trim()}),
  ${RECORD_SQL.trim()
    .replace(/^WITH /, '')
    .replace(/\$(\d+)/g, (_, n: string) => `$${Number(n) + INSERT_COLUMNS}`)}`;

// A refused event's dead letter, once (a replay finds it there and its notice stored).
const DEAD_LETTER_SQL = `
  INSERT INTO dead_letters (thread_id, event_id, run_id, event_type, category, user_id, created_at, content,
                            metadata, stream_offset, error, sqlstate, notice_seq, category_name)
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int2[], $6::text[], $7::text[],
                       $8::text[], $9::text[], $10::int8[], $11::text[], $12::text[], $13::int8[], $14::text[])
  ON CONFLICT (thread_id, event_id) DO NOTHING`;

interface ThreadState {
  readonly threadId: string;
  readonly batch: readonly PendingEvent[];
  head: number;
  horizons: Horizons;
  readonly known: Map<string, Receipt>;
  readonly dropped: Set<number>;
  readonly runsToCheck: Set<string>;
}

/** What a batch proves and moves first: the persister's leases (leases.ts `fence`). */
export interface BatchFence {
  readonly scope: LeaseScope;
  readonly entries: readonly FenceEntry[];
}

/** rs_store_rows found a lease not held: DETAIL lists the lost partitions. */
export const FENCED_SQLSTATE = 'RS001';
/**
 * rs_store_rows found an event stored before, a deletion horizon, or columns that do not line
 * up (a text holding a separator): take the slow path.
 */
export const SLOW_PATH_SQLSTATE = 'RS002';

const FAST_SQL = `SELECT o_thread, o_head FROM rs_store_rows(${Array.from({ length: 39 }, (_, i) => `$${i + 1}`).join(', ')})`;

/**
 * Stores every thread's events of a batch (`groups`: thread_id → its events, in log
 * order) in one statement when it can, else in one transaction (see the top of this file).
 * Returns, per thread, the new events and a receipt per event. A lease of `fence` not held
 * throws {@link FencedError}, and nothing is stored.
 */
export async function storeBatch(
  client: pg.ClientBase,
  groups: ReadonlyMap<string, readonly PendingEvent[]>,
  fence?: BatchFence,
): Promise<Map<string, ThreadBatchResult>> {
  if (groups.size === 0 || !fastPathFits(groups)) return storeBatchInTransaction(client, groups, fence);
  try {
    return await storeBatchFast(client, groups, fence);
  } catch (err) {
    if ((err as { code?: unknown } | null)?.code !== SLOW_PATH_SQLSTATE) throw err;
    return storeBatchInTransaction(client, groups, fence);
  }
}

/** No rejection to dead-letter, no event_id twice in a thread: every event takes the next seq. */
function fastPathFits(groups: ReadonlyMap<string, readonly PendingEvent[]>): boolean {
  for (const batch of groups.values()) {
    if (batch.length > 1) {
      const ids = new Set<string>();
      for (const p of batch) {
        if (p.rejection || ids.has(p.record.event_id)) return false;
        ids.add(p.record.event_id);
      }
    } else if (batch[0]?.rejection) return false;
  }
  return true;
}

/** A stored event whose seq is made absolute in place once its thread's head is known. */
type Numbered = StoredEvent & { seq: number };

/** The fast path: rs_store_rows (migrations 0009-0011), one statement in autocommit. */
async function storeBatchFast(
  client: pg.ClientBase,
  groups: ReadonlyMap<string, readonly PendingEvent[]>,
  fence: BatchFence | undefined,
): Promise<Map<string, ThreadBatchResult>> {
  const t = { id: [] as string[], first: [] as number[] };
  const ev = new EventColumns();
  const deltas: { threadId: string; d: RunDelta }[] = [];
  // Per thread, its events numbered from 0 (seq = head + ordinal): made absolute once the heads are known.
  const inserted = new Map<string, Numbered[]>();
  for (const [threadId, batch] of groups) {
    const mine: Numbered[] = [];
    inserted.set(threadId, mine);
    if (batch.length === 0) continue;
    let first = Number.POSITIVE_INFINITY;
    for (const p of batch) {
      const r = p.record;
      mine.push(storedEvent(r, mine.length + 1, p.offset));
      if (p.offset < first) first = p.offset;
      ev.push(threadId, mine.length, r, p.offset);
    }
    t.id.push(threadId);
    t.first.push(first);
    for (const d of runDeltas(mine)) deltas.push({ threadId, d });
  }
  const entries = fence?.entries ?? [];
  let rows: { o_thread: string; o_head: string }[];
  try {
    ({ rows } = await client.query<{ o_thread: string; o_head: string }>({
      name: 'rs_batch_fast',
      text: FAST_SQL,
      // Text columns joined, number columns as literals (column-text.ts, migration 0011).
      values: [
        fence?.scope.stream ?? '',
        fence?.scope.member ?? '',
        arrayLiteral(entries.map((e) => e.partition)),
        arrayLiteral(entries.map((e) => e.epoch)),
        arrayLiteral(entries.map((e) => e.upto)),
        joinedText(t.id),
        arrayLiteral(t.first),
        ...ev.values().map(asText),
        ...runColumns(deltas).map(asText),
      ],
    }));
  } catch (err) {
    const e = err as { code?: unknown; detail?: unknown } | null;
    if (e?.code !== FENCED_SQLSTATE) throw err;
    const lost = new Set(
      String(e.detail ?? '')
        .split(',')
        .map(Number),
    );
    throw new FencedError(entries.filter((x) => lost.has(x.partition)));
  }
  const heads = new Map(rows.map((r) => [r.o_thread, Number(r.o_head)]));
  const results = new Map<string, ThreadBatchResult>();
  for (const [threadId, events] of inserted) {
    const head = heads.get(threadId) ?? 0;
    const receipts: Receipt[] = new Array(events.length);
    for (let i = 0; i < events.length; i++) {
      const e = events[i] as (typeof events)[number];
      e.seq += head;
      receipts[i] = { event_id: e.event_id, seq: e.seq, offset: e.offset };
    }
    results.set(threadId, { inserted: events, receipts });
  }
  return results;
}

/**
 * The slow path: the batch in one READ COMMITTED transaction of several statements (see the
 * top of this file), for any batch: redeliveries, repeats, deletions, rejections.
 */
export async function storeBatchInTransaction(
  client: pg.ClientBase,
  groups: ReadonlyMap<string, readonly PendingEvent[]>,
  fence?: BatchFence,
): Promise<Map<string, ThreadBatchResult>> {
  const results = new Map<string, ThreadBatchResult>();
  if (groups.size === 0) return results;
  const threadIds = [...groups.keys()];
  const states = new Map<string, ThreadState>();
  const qThreads: string[] = [];
  const qIds: string[] = [];
  for (const [threadId, batch] of groups) {
    states.set(threadId, {
      threadId,
      batch,
      head: 0,
      horizons: { thread: 0, runs: 0 },
      known: new Map(),
      dropped: new Set(),
      runsToCheck: new Set(),
    });
    for (const p of batch) {
      qThreads.push(threadId);
      qIds.push(p.record.event_id);
      if (p.rejection) {
        qThreads.push(threadId);
        qIds.push(noticeEventId(p.record));
      }
    }
  }

  await client.query('BEGIN');
  try {
    // The persister's proof that it still owns the batch's partitions (leases.ts), first.
    if (fence) await fenceLeases(client, fence.scope, fence.entries);
    await client.query({ name: 'rs_batch_lock', text: LOCK_SQL, values: [threadIds] });
    const existing = await client.query<{
      thread_id: string;
      event_id: string | null;
      seq: string;
      stream_offset: string | null;
      run_horizon: string | null;
    }>({ name: 'rs_batch_existing', text: EXISTING_SQL, values: [threadIds, qThreads, qIds] });
    for (const row of existing.rows) {
      const s = states.get(row.thread_id) as ThreadState;
      if (row.event_id === null) {
        s.head = Number(row.seq);
        s.horizons = { thread: Number(row.stream_offset), runs: Number(row.run_horizon) };
      } else
        s.known.set(row.event_id, {
          event_id: row.event_id,
          seq: Number(row.seq),
          offset: Number(row.stream_offset),
        });
    }

    // Deletions: an event at or below its thread's horizon, or its run's, belongs to a deleted past.
    const rThreads: string[] = [];
    const rRuns: string[] = [];
    for (const s of states.values()) {
      s.batch.forEach((p, i) => {
        if (p.offset <= s.horizons.thread) s.dropped.add(i);
        else if (p.offset <= s.horizons.runs) s.runsToCheck.add(p.record.run_id);
      });
      for (const run of s.runsToCheck) {
        rThreads.push(s.threadId);
        rRuns.push(run);
      }
    }
    if (rThreads.length > 0) {
      const { rows } = await client.query<{ thread_id: string; run_id: string; upto: string }>({
        name: 'rs_batch_run_horizons',
        text: RUN_HORIZONS_SQL,
        values: [rThreads, rRuns],
      });
      const upto = new Map<string, Map<string, number>>();
      for (const r of rows) {
        let m = upto.get(r.thread_id);
        if (!m) {
          m = new Map();
          upto.set(r.thread_id, m);
        }
        m.set(r.run_id, Number(r.upto));
      }
      for (const s of states.values()) {
        if (s.runsToCheck.size === 0) continue;
        const m = upto.get(s.threadId);
        s.batch.forEach((p, i) => {
          if (p.offset <= (m?.get(p.record.run_id) ?? 0)) s.dropped.add(i);
        });
      }
    }

    // Seqs, per thread: head+1, head+2, ... over the events not stored before.
    const ins = new EventColumns();
    const dead = {
      threadId: [] as string[],
      eventId: [] as string[],
      runId: [] as string[],
      eventType: [] as string[],
      category: [] as number[],
      userId: [] as string[],
      createdAt: [] as string[],
      content: [] as string[],
      metadata: [] as string[],
      offset: [] as number[],
      error: [] as string[],
      sqlstate: [] as string[],
      noticeSeq: [] as number[],
      categoryName: [] as (string | null)[],
    };
    const deltas: { threadId: string; d: RunDelta }[] = [];
    for (const s of states.values()) {
      const receipts: Receipt[] = new Array(s.batch.length);
      const inserted: StoredEvent[] = [];
      let fresh = 0;
      for (let i = 0; i < s.batch.length; i++) {
        const p = s.batch[i] as PendingEvent;
        const prior = s.known.get(p.record.event_id);
        if (prior) {
          receipts[i] = prior;
          continue;
        }
        if (s.dropped.has(i)) {
          receipts[i] = { event_id: p.record.event_id, seq: 0, offset: p.offset };
          continue;
        }
        let r = p.record;
        if (p.rejection) {
          receipts[i] = { event_id: r.event_id, seq: 0, offset: p.offset, rejected: p.rejection.reason };
          const notice = rejectionNotice(r, p.rejection);
          if (s.known.has(notice.event_id)) continue; // rejected before: its notice is stored
          dead.threadId.push(s.threadId);
          dead.eventId.push(r.event_id);
          dead.runId.push(r.run_id);
          dead.eventType.push(r.event_type);
          const deadCategory = categoryNumber(r.category);
          dead.category.push(deadCategory);
          dead.categoryName.push(deadCategory === 0 ? r.category : null);
          dead.userId.push(r.user_id);
          dead.createdAt.push(r.created_at_text ?? r.created_at);
          dead.content.push(storableText(r.content_json));
          dead.metadata.push(storableText(r.metadata_json));
          dead.offset.push(p.offset);
          dead.error.push(p.rejection.reason);
          dead.sqlstate.push(p.rejection.sqlstate);
          dead.noticeSeq.push(s.head + fresh + 1);
          r = notice;
        }
        fresh++;
        const seq = s.head + fresh;
        const receipt = { event_id: r.event_id, seq, offset: p.offset };
        s.known.set(r.event_id, receipt); // a later repeat in this batch is a duplicate
        if (!p.rejection) receipts[i] = receipt;
        inserted.push(storedEvent(r, seq, p.offset));
        ins.push(s.threadId, seq, r, p.offset);
      }
      if (fresh > 0) for (const d of runDeltas(inserted)) deltas.push({ threadId: s.threadId, d });
      results.set(s.threadId, { inserted, receipts });
    }

    if (ins.length > 0) {
      await client.query({
        name: 'rs_batch_insert_record',
        text: INSERT_AND_RECORD_SQL,
        values: [...ins.values(), ...runColumns(deltas)].map((c) => c.values),
      });
    }
    if (dead.threadId.length > 0) {
      await client.query({
        name: 'rs_batch_dead_letters',
        text: DEAD_LETTER_SQL,
        values: [
          dead.threadId,
          dead.eventId,
          dead.runId,
          dead.eventType,
          dead.category,
          dead.userId,
          dead.createdAt,
          dead.content,
          dead.metadata,
          dead.offset,
          dead.error,
          dead.sqlstate,
          dead.noticeSeq,
          dead.categoryName,
        ],
      });
    }
    await client.query('COMMIT');
    return results;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

/** A column as the fast path sends it: joined text, or an array literal (column-text.ts). */
function asText(column: Column): string {
  return column.kind === 'text' ? joinedText(column.values) : arrayLiteral(column.values);
}

/** A column of the insert or the runs upkeep, and what its values are. */
type Column =
  | { readonly kind: 'text'; readonly values: readonly (string | null)[] }
  | { readonly kind: 'number'; readonly values: readonly (number | boolean | null)[] };

const text = (values: readonly (string | null)[]): Column => ({ kind: 'text', values });
const number = (values: readonly (number | boolean | null)[]): Column => ({ kind: 'number', values });

/**
 * The run deltas as the parameters of the runs upkeep (RECORD_SQL's x, rs_store_rows's r_*),
 * in their order: thread_id, then the RunDelta fields.
 */
function runColumns(deltas: readonly { threadId: string; d: RunDelta }[]): Column[] {
  const col = <K extends keyof RunDelta>(k: K): RunDelta[K][] => deltas.map((x) => x.d[k]);
  return [
    text(deltas.map((x) => x.threadId)),
    text(col('run_id')),
    text(col('user_id')),
    text(col('status')),
    number(col('explicit')),
    number(col('first_seq')),
    number(col('last_seq')),
    number(col('end_seq')),
    number(col('events')),
    number(col('messages')),
    number(col('traces')),
    number(col('lifecycles')),
    text(col('started_at')),
    text(col('updated_at')),
    text(col('ended_at')),
    text(col('metadata')),
    text(col('outcome')),
    number(col('mixed')),
    text(col('sole')),
  ];
}

/**
 * The events to insert, as the insert's parameters (INSERT_SQL's x, rs_store_rows's e_*):
 * thread_id, seq (the slow path's) or ordinal within the thread (the fast path's), then the
 * record's columns.
 */
class EventColumns {
  readonly #threadId: string[] = [];
  readonly #seq: number[] = [];
  readonly #eventId: string[] = [];
  readonly #runId: string[] = [];
  readonly #eventType: string[] = [];
  readonly #category: number[] = [];
  readonly #userId: string[] = [];
  readonly #createdAt: string[] = [];
  readonly #content: string[] = [];
  readonly #metadata: string[] = [];
  readonly #offset: number[] = [];
  readonly #categoryName: (string | null)[] = [];
  readonly #createdAtText: (string | null)[] = [];

  get length(): number {
    return this.#threadId.length;
  }

  push(threadId: string, seq: number, r: LogRecord, offset: number): void {
    this.#threadId.push(threadId);
    this.#seq.push(seq);
    this.#eventId.push(r.event_id);
    this.#runId.push(r.run_id);
    this.#eventType.push(r.event_type);
    const category = categoryNumber(r.category);
    this.#category.push(category);
    this.#categoryName.push(category === 0 ? r.category : null);
    this.#userId.push(r.user_id);
    this.#createdAt.push(r.created_at);
    this.#createdAtText.push(r.created_at_text ?? null);
    this.#content.push(r.content_json);
    this.#metadata.push(r.metadata_json);
    this.#offset.push(offset);
  }

  values(): Column[] {
    return [
      text(this.#threadId),
      number(this.#seq),
      text(this.#eventId),
      text(this.#runId),
      text(this.#eventType),
      number(this.#category),
      text(this.#userId),
      text(this.#createdAt),
      text(this.#content),
      text(this.#metadata),
      number(this.#offset),
      text(this.#categoryName),
      text(this.#createdAtText),
    ];
  }
}
