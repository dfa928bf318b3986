// listEventsPage against a real Postgres whose statistics are stale: a thread written after
// the table's last ANALYZE (here: never analysed, autovacuum off) made the open-range query
// (`seq > $after ORDER BY seq LIMIT n`) a bitmap scan + sort of the whole rest of the thread
// for every page. Each statement now reads a bounded seq window, so a page reads about the
// page whatever the plan (EXPLAIN's row counts, not timings, are asserted). And the pages are
// those of that old query, across a deleted run, a deleted tail, filters and both directions.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import type { CategoryName, LogRecord, StoredEvent } from '../src/domain/event.js';
import { type EventFilter, NO_FILTER } from '../src/domain/filter.js';
import { TERMINAL_EVENT_TYPES } from '../src/domain/run-lifecycle.js';
import { createLogger } from '../src/logger.js';
import { deleteRows } from '../src/persist/deletions.js';
import { migrate } from '../src/persist/migrate.js';
import { headSeq, listEventsPage, type PageQuery, readEventJsonPage } from '../src/persist/queries.js';
import { storeThreadBatch } from '../src/persist/seq-assigner.js';
import { type PostgresHandle, startPostgres } from './helpers/postgres.js';

const T = 'big';
const RUNS = 200;
const RUN_EVENTS = 100; // 20,000 events, runs written two at a time, interleaved
const USERS = ['u0', 'u1', 'u2'];

let server: PostgresHandle;
let pool: pg.Pool;

/** Event `i` of run `r`: run_start, then a cycle of messages, tool calls and traces, then run_end. */
function record(r: number, i: number): LogRecord {
  const [type, category]: [string, CategoryName] =
    i === 0
      ? ['run_start', 'lifecycle']
      : i === RUN_EVENTS - 1
        ? ['run_end', 'lifecycle']
        : i % 10 === 3
          ? ['tool_call', 'message']
          : i % 10 === 7
            ? ['llm_usage', 'trace']
            : ['ai_chunk', 'message'];
  return {
    thread_id: T,
    run_id: `run-${r}`,
    event_id: `e-${r}-${i}`,
    event_type: type,
    category,
    // run 7 mixes users; the others are one user's
    user_id: USERS[(r === 7 ? i : r) % USERS.length] as string,
    created_at: new Date(Date.UTC(2026, 0, 1, 0, 0, 0, r * RUN_EVENTS + i)).toISOString(),
    content_json: JSON.stringify({ content: `token ${r}/${i}` }),
    metadata_json: '{}',
  };
}

before(async () => {
  server = await startPostgres();
  pool = new pg.Pool({ connectionString: server.url, max: 4 });
  pool.on('error', () => undefined);
  await migrate(pool, createLogger('silent'));
  // Never analysed, and nothing will: the statistics a thread has right after it was written.
  await pool.query('ALTER TABLE run_events SET (autovacuum_enabled = false)');
  const client = await pool.connect();
  try {
    let offset = 1;
    for (let r = 0; r < RUNS; r += 10) {
      const batch = [];
      for (let pair = r; pair < r + 10; pair += 2)
        for (let i = 0; i < RUN_EVENTS; i++)
          for (const run of [pair, pair + 1]) batch.push({ record: record(run, i), offset: offset++ });
      await storeThreadBatch(client, T, batch);
    }
  } finally {
    client.release();
  }
  // A hole in the middle (run-100, interleaved with run-101) and at the tail (run-199).
  await deleteRows(pool, { threadId: T, runId: 'run-100', logHorizon: 1_000_000 });
  await deleteRows(pool, { threadId: T, runId: 'run-199', logHorizon: 1_000_000 });
});
after(async () => {
  await pool.end();
  await server[Symbol.asyncDispose]();
});

/** The query listEventsPage sent before windows: one open-range statement. The oracle here. */
function oldQuery(q: PageQuery): { text: string; values: unknown[] } {
  const values: unknown[] = [q.threadId, q.afterSeq];
  const p = (v: unknown): string => `$${values.push(v)}`;
  const where = ['thread_id = $1', 'seq > $2'];
  if (q.uptoSeq !== undefined) where.push(`seq <= ${p(q.uptoSeq)}`);
  if (q.beforeSeq !== undefined) where.push(`seq < ${p(q.beforeSeq)}`);
  if (q.filter.runId !== undefined) where.push(`run_id = ${p(q.filter.runId)}`);
  const narrow: string[] = [];
  if (q.filter.categories)
    narrow.push(
      `COALESCE(category_name, (ARRAY['message', 'trace', 'lifecycle'])[category]) = ANY(${p([...q.filter.categories])}::text[])`,
    );
  if (q.filter.eventTypes) narrow.push(`event_type = ANY(${p([...q.filter.eventTypes])}::text[])`);
  if (q.filter.userId !== undefined) narrow.push(`user_id = ${p(q.filter.userId)}`);
  if (narrow.length > 0) {
    const terminal =
      q.withTerminal && q.filter.runId !== undefined
        ? ` OR (category = 3 AND event_type = ANY(${p([...TERMINAL_EVENT_TYPES])}::text[]))`
        : '';
    where.push(`((${narrow.join(' AND ')})${terminal})`);
  }
  const text = `SELECT seq FROM run_events WHERE ${where.join(' AND ')} ORDER BY seq${q.descending ? ' DESC' : ''} LIMIT ${p(q.limit)}`;
  return { text, values };
}

async function oldSeqs(q: PageQuery): Promise<number[]> {
  const { text, values } = oldQuery(q);
  return (await pool.query<{ seq: string }>(text, values)).rows.map((r) => Number(r.seq));
}

/** What a plan read from run_events: rows returned plus rows removed, per scan node, all loops. */
interface PlanNode {
  'Relation Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  Plans?: PlanNode[];
}

function rowsRead(n: PlanNode): number {
  const own =
    n['Relation Name'] === 'run_events'
      ? (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0) + (n['Rows Removed by Index Recheck'] ?? 0)) *
        n['Actual Loops']
      : 0;
  return own + (n.Plans ?? []).reduce((s, c) => s + rowsRead(c), 0);
}

interface Cost {
  readonly statements: number;
  readonly rows: number;
  readonly buffers: number;
}

/** `v` as an SQL literal (the values pages bind: numbers, ids, and arrays of them). */
function literal(c: pg.ClientBase, v: unknown): string {
  if (typeof v === 'number') return String(v);
  if (typeof v === 'string') return c.escapeLiteral(v);
  if (Array.isArray(v))
    return c.escapeLiteral(
      `{${v.map((x) => (typeof x === 'number' ? x : `"${String(x).replace(/["\\]/g, '\\$&')}"`)).join(',')}}`,
    );
  throw new Error(`no literal for ${String(v)}`);
}

/**
 * The statement's plan, run under EXPLAIN ANALYZE: the plan for its values (`custom`), or the
 * one Postgres may settle on for a prepared statement whatever its values (`generic`): pages'
 * statements are prepared, so after a few executions either can run.
 */
async function explain(
  text: string,
  values: unknown[],
  plan: 'custom' | 'generic' = 'custom',
): Promise<Cost> {
  const client = await pool.connect();
  let rows: { 'QUERY PLAN': [{ Plan: PlanNode }] }[];
  try {
    const how = 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)';
    if (plan === 'custom') rows = (await client.query(`${how} ${text}`, values)).rows;
    else {
      await client.query('SET plan_cache_mode = force_generic_plan');
      await client.query(`PREPARE rs_explain AS ${text}`);
      rows = (
        await client.query(`${how} EXECUTE rs_explain(${values.map((v) => literal(client, v)).join(', ')})`)
      ).rows;
      await client.query('DEALLOCATE rs_explain');
      await client.query('RESET plan_cache_mode');
    }
  } finally {
    client.release();
  }
  const root = (rows[0] as { 'QUERY PLAN': [{ Plan: PlanNode }] })['QUERY PLAN'][0].Plan;
  return {
    statements: 1,
    rows: rowsRead(root),
    buffers: root['Shared Hit Blocks'] + root['Shared Read Blocks'],
  };
}

/** Every statement listEventsPage sends for `q`, run again under EXPLAIN ANALYZE, summed. */
async function pageCost(
  q: PageQuery,
  plan: 'custom' | 'generic',
  read: (db: pg.Pool, q: PageQuery) => Promise<readonly { seq: number }[]> = listEventsPage,
): Promise<{ cost: Cost; seqs: number[] }> {
  const sent: { text: string; values: unknown[] }[] = [];
  const spy = {
    query: (config: { text: string; values: unknown[] }) => {
      sent.push(config);
      return pool.query(config);
    },
  } as unknown as pg.Pool;
  const seqs = (await read(spy, q)).map((e) => e.seq);
  let cost: Cost = { statements: 0, rows: 0, buffers: 0 };
  for (const s of sent) {
    const c = await explain(s.text, s.values, plan);
    cost = { statements: cost.statements + 1, rows: cost.rows + c.rows, buffers: cost.buffers + c.buffers };
  }
  return { cost, seqs };
}

const filter = (f: Partial<EventFilter>): EventFilter => ({ ...NO_FILTER, ...f });

test('with stale statistics a page reads about the page, where the open-range query read the thread', async (t) => {
  const { rows } = await pool.query(
    `SELECT s.last_analyze, s.last_autoanalyze FROM pg_stat_user_tables s WHERE relname = 'run_events'`,
  );
  assert.deepEqual(rows[0], { last_analyze: null, last_autoanalyze: null }, 'run_events was never analysed');
  const head = await headSeq(pool, T);
  const limit = 100;
  // oldReadsThread: whether the open-range statement of that shape goes wrong here (a two-sided
  // range is estimated small, so the descending one happens to get a bounded plan).
  const cases: { name: string; q: PageQuery; maxRows: number; oldReadsThread?: false }[] = [
    { name: 'first page', q: { threadId: T, afterSeq: 0, filter: NO_FILTER, limit }, maxRows: limit + 2 },
    {
      name: 'last page, descending',
      q: { threadId: T, afterSeq: 0, beforeSeq: head + 1, descending: true, filter: NO_FILTER, limit },
      maxRows: 2 * limit + 2,
      oldReadsThread: false,
    },
    {
      name: 'messages',
      q: { threadId: T, afterSeq: 0, filter: filter({ categories: new Set(['message']) }), limit },
      maxRows: 2 * limit + 2,
    },
    {
      name: "one user's events",
      q: { threadId: T, afterSeq: 5000, filter: filter({ userId: 'u1' }), limit },
      maxRows: 8 * limit,
    },
    {
      name: "a run's messages and end, from the start of the thread",
      q: {
        threadId: T,
        afterSeq: 0,
        filter: filter({ runId: 'run-150', categories: new Set(['message']) }),
        withTerminal: true,
        limit: 50, // of its 89 messages
      },
      maxRows: 2 * 50 + 2,
      oldReadsThread: false, // the run's own 100 rows bound the old read here
    },
  ];
  for (const c of cases) {
    const now = await pageCost(c.q, 'custom');
    // Catch-up's statements are prepared (their generic plan can run), with a byte budget.
    const catchUp = async (db: pg.Pool, q: PageQuery) =>
      (await readEventJsonPage(db, { ...q, maxBytes: 1 << 30 })).events;
    const generic = await pageCost(c.q, 'generic', catchUp);
    const old = oldQuery(c.q);
    const before = await explain(old.text, old.values);
    assert.deepEqual(now.seqs, await oldSeqs(c.q), `${c.name}: the old query's page`);
    assert.equal(now.seqs.length, c.q.limit, `${c.name}: a full page`);
    assert.deepEqual(generic.seqs, now.seqs, `${c.name}: catch-up's page`);
    const what = `${c.name}: ${now.cost.rows} rows (generic plan: ${generic.cost.rows}), ${now.cost.buffers} buffers in ${now.cost.statements} statements (old: ${before.rows} rows, ${before.buffers} buffers)`;
    assert.ok(now.cost.rows <= c.maxRows, what);
    assert.ok(generic.cost.rows <= c.maxRows, `${what}: the generic plan`);
    if (c.oldReadsThread === false) continue;
    // The setup reproduces the bug: the old statement read most of the thread for one page.
    assert.ok(before.rows > 5_000, `${what}: stale plan not reproduced`);
    assert.ok(now.cost.buffers * 5 < before.buffers, what);
    t.diagnostic(what);
  }
});

test('pages equal the open-range query across deleted runs, filters, bounds and both directions', async () => {
  // Statistics no longer matter to what a page holds; ANALYZE only makes the oracle fast.
  await pool.query('ANALYZE run_events');
  const head = await headSeq(pool, T);
  const { rows } = await pool.query<{ max: string }>('SELECT max(seq) FROM run_events WHERE thread_id = $1', [
    T,
  ]);
  assert.ok(head > Number(rows[0]?.max), 'the deleted tail leaves the head above the last row');
  const filters: { name: string; f: EventFilter; withTerminal?: boolean }[] = [
    { name: 'none', f: NO_FILTER },
    { name: 'messages', f: filter({ categories: new Set(['message']) }) },
    { name: 'lifecycle (sparse)', f: filter({ categories: new Set(['lifecycle']) }) },
    { name: 'tool calls and usage', f: filter({ eventTypes: new Set(['tool_call', 'llm_usage']) }) },
    { name: 'user u1', f: filter({ userId: 'u1' }) },
    { name: 'run-101 (beside the deleted run)', f: filter({ runId: 'run-101' }) },
    { name: 'run-100 (deleted)', f: filter({ runId: 'run-100' }) },
    {
      name: 'run-7 (mixed users), u2, with its end',
      f: filter({ runId: 'run-7', userId: 'u2' }),
      withTerminal: true,
    },
    {
      name: 'run-198 traces, with its end',
      f: filter({ runId: 'run-198', categories: new Set(['trace']) }),
      withTerminal: true,
    },
  ];
  // Walks the pages both ways from `from` and compares each with the old query's.
  const walk = async (
    name: string,
    base: Omit<PageQuery, 'afterSeq' | 'limit'>,
    limit: number,
    from: number,
    pages = Number.POSITIVE_INFINITY,
  ) => {
    let afterSeq = from;
    for (let n = 0; n < pages; n++) {
      const q = { ...base, afterSeq, limit };
      const page = await listEventsPage(pool, q);
      assert.deepEqual(
        page.map((e) => e.seq),
        await oldSeqs(q),
        `${name}: ascending page ${n} after ${afterSeq}`,
      );
      if (page.length < limit) break;
      afterSeq = (page[page.length - 1] as StoredEvent).seq;
    }
    let beforeSeq = from + 1;
    for (let n = 0; n < pages; n++) {
      const q = { ...base, afterSeq: 0, beforeSeq, descending: true, limit };
      const page = await listEventsPage(pool, q);
      assert.deepEqual(
        page.map((e) => e.seq),
        await oldSeqs(q),
        `${name}: descending page ${n} before ${beforeSeq}`,
      );
      if (page.length < limit) break;
      beforeSeq = (page[page.length - 1] as StoredEvent).seq;
    }
  };
  const hole = Number(
    (
      await pool.query<{ s: string }>(
        'SELECT first_seq AS s FROM runs WHERE thread_id = $1 AND run_id = $2',
        [T, 'run-101'],
      )
    ).rows[0]?.s,
  );
  for (const { name, f, withTerminal } of filters) {
    const base = { threadId: T, filter: f, withTerminal };
    await walk(name, base, 101, 0);
    await walk(name, base, 101, head);
    // Small pages across the deleted run, from just before it.
    await walk(`${name}, small pages`, base, 3, hole - 5, 20);
    // A catch-up's shape: bounded by a head read first.
    await walk(`${name}, upto`, { ...base, uptoSeq: head - 150 }, 101, 9_000);
    // A window: after_seq and before_seq together.
    const q = { ...base, afterSeq: 9_000, beforeSeq: 11_000, descending: true, limit: 60 };
    assert.deepEqual(
      (await listEventsPage(pool, q)).map((e) => e.seq),
      await oldSeqs(q),
      `${name}: window`,
    );
  }
  // Cursors past the head, and a thread that does not exist.
  for (const q of [
    { threadId: T, afterSeq: head + 10, filter: NO_FILTER, limit: 10 },
    { threadId: T, afterSeq: 0, beforeSeq: 2 ** 52, descending: true, filter: NO_FILTER, limit: 10 },
    { threadId: 'nobody', afterSeq: 0, filter: NO_FILTER, limit: 10 },
  ])
    assert.deepEqual(
      (await listEventsPage(pool, q)).map((e) => e.seq),
      await oldSeqs(q),
    );
  // Whole events, not only seqs: the same rows as the thread's own.
  const page = await listEventsPage(pool, { threadId: T, afterSeq: 9_990, filter: NO_FILTER, limit: 3 });
  const stored = await pool.query<{ event_id: string; run_id: string }>(
    'SELECT event_id, run_id FROM run_events WHERE thread_id = $1 AND seq > 9990 ORDER BY seq LIMIT 3',
    [T],
  );
  assert.deepEqual(
    page.map((e) => ({ event_id: e.event_id, run_id: e.run_id })),
    stored.rows,
  );
});
