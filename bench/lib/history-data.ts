/**
 * The History benchmark's data set (bench/history.ts), made in Postgres itself with
 * `generate_series`, in a few big INSERT ... SELECT statements:
 *
 *  - one thread (`BIG_THREAD`) of 1,000,000 events in 10 runs of 100,000, written in one
 *    stretch (its rows sit together in the heap, as a thread that streams alone does);
 *  - 100,000 threads of 10 events each, one run each, interleaved the way many live
 *    threads write them (row g belongs to thread g % 100,000), so each of a thread's rows
 *    sits on a different heap page;
 *  - `thread_heads` and `runs` filled from those rows as the persister would have kept
 *    them (migration 0004), so the API behaves as in production.
 *
 * Each run starts with `run_start` and ends with `run_end` (lifecycle); in between, a
 * cycle of 20 events: a human message, 13 `ai_chunk`s, a tool call and its result
 * (category message, 80%), and 4 trace events (20%). Contents are ~200 bytes of JSON.
 * Then VACUUM ANALYZE, as autovacuum would after a load this size.
 */
import type pg from 'pg';

export const BIG_THREAD = 'big-1m';
export const BIG_EVENTS = 1_000_000;
export const BIG_RUNS = 10;
export const BIG_RUN_EVENTS = BIG_EVENTS / BIG_RUNS;
export const SMALL_THREADS = 100_000;
export const SMALL_EVENTS = 10;

export function bigRunId(r: number): string {
  return `run-big-${String(r).padStart(2, '0')}`;
}

export function smallThreadId(i: number): string {
  return `t-${String(i).padStart(6, '0')}`;
}

/**
 * Text the contents are cut from (some multi-byte, as agents' tokens are). Each event
 * takes 170 characters of it from an offset that depends on its number.
 */
const TEXT =
  'The model compared three sources, and the answer is mostly consistent. However, the second ' +
  'source dates the treaty to 1648 while the others say 1649; 相关史料 suggests the later date. ' +
  'Next step: call the search tool with a narrower query, then summarise the findings for the user ' +
  'in two short paragraphs with citations [1][2][3] and a note on the remaining uncertainty.';

const TEXT_SQL = `'${TEXT.replaceAll("'", "''")}'`;

/** Content (~200 bytes of JSON) of event number `n` (an SQL expression) of the given type. */
function contentSql(type: string, n: string): string {
  const piece = `to_json(substr(${TEXT_SQL}, 1 + (${n} % 150)::int, 170))::text`;
  return `(CASE ${type}
      WHEN 'run_start' THEN '{"assistant_id":"agent-research","input":{"messages":[{"role":"user","content":' || ${piece} || '}]}}'
      WHEN 'run_end' THEN '{"status":"success","usage":{"input_tokens":' || (${n} % 9000) || ',"output_tokens":' || (${n} % 700) || '},"summary":' || ${piece} || '}'
      WHEN 'tool_call' THEN '{"id":"call-' || ${n} || '","name":"search","args":{"query":' || ${piece} || '}}'
      WHEN 'tool_result' THEN '{"call_id":"call-' || (${n} - 1) || '","content":' || ${piece} || '}'
      WHEN 'llm_usage' THEN '{"model":"gpt-x","input_tokens":' || (${n} % 9000) || ',"output_tokens":' || (${n} % 700) || ',"note":' || ${piece} || '}'
      ELSE '{"content":' || ${piece} || '}'
    END)::json`;
}

/**
 * Event type at position `p` of a run of `len` events (SQL expressions): `run_start`
 * first, `run_end` last, a cycle of 20 in between.
 */
function typeSql(p: string, len: string): string {
  return `(CASE
      WHEN ${p} = 0 THEN 'run_start'
      WHEN ${p} = ${len} - 1 THEN 'run_end'
      ELSE (ARRAY['span_start','human_message','ai_chunk','ai_chunk','ai_chunk','ai_chunk','ai_chunk',
                  'ai_chunk','ai_chunk','ai_chunk','ai_chunk','ai_chunk','ai_chunk','ai_chunk','ai_chunk',
                  'tool_call','tool_result','llm_usage','span_end','llm_usage'])[1 + (${p} % 20)::int]
    END)`;
}

function categorySql(type: string): string {
  return `(CASE WHEN ${type} IN ('run_start','run_end') THEN 3
               WHEN ${type} IN ('span_start','span_end','llm_usage') THEN 2 ELSE 1 END)::int2`;
}

const COLUMNS =
  'thread_id, seq, event_id, run_id, event_type, category, user_id, created_at, content, metadata, stream_offset';

/** The big thread: seq g = 1..1,000,000, run (g-1) / 100,000, offsets 1..1,000,000. */
const BIG_SQL = `
INSERT INTO run_events (${COLUMNS})
SELECT '${BIG_THREAD}', g, 'ev-' || g, 'run-big-' || lpad(((g - 1) / ${BIG_RUN_EVENTS})::text, 2, '0'),
       t, ${categorySql('t')}, 'user-big',
       timestamptz '2026-11-01 00:00:00+00' + g * interval '5 ms',
       ${contentSql('t', 'g')},
       ('{"id":"msg-' || ((g - 1) / ${BIG_RUN_EVENTS}) || '-' || (((g - 1) % ${BIG_RUN_EVENTS}) / 20) || '"}')::json,
       g
  FROM (SELECT g, ${typeSql(`((g - 1) % ${BIG_RUN_EVENTS})`, String(BIG_RUN_EVENTS))} AS t
          FROM generate_series(1, ${BIG_EVENTS}) g) x`;

/** 100,000 threads × 10 events, interleaved: row g is event 1 + g / 100,000 of thread g % 100,000. */
const SMALL_SQL = `
INSERT INTO run_events (${COLUMNS})
SELECT 't-' || lpad(i::text, 6, '0'), s, 'ev-' || s, 'run-' || lpad(i::text, 6, '0'),
       t, ${categorySql('t')}, 'user-' || (i % 1000),
       timestamptz '2026-11-02 00:00:00+00' + g * interval '5 ms',
       ${contentSql('t', 'g')},
       ('{"id":"msg-' || i || '"}')::json,
       ${BIG_EVENTS} + 1 + g
  FROM (SELECT g, g % ${SMALL_THREADS} AS i, 1 + g / ${SMALL_THREADS} AS s,
               ${typeSql(`(g / ${SMALL_THREADS})`, String(SMALL_EVENTS))} AS t
          FROM generate_series(0, ${SMALL_THREADS * SMALL_EVENTS - 1}) g) x
 ORDER BY g`;

/**
 * Every run ended with run_end (status success); one user per run. One pass over the rows:
 * the start and end events' contents are picked up by the aggregate itself.
 */
const RUNS_SQL = `
INSERT INTO runs (thread_id, run_id, user_id, users_mixed, status, first_seq, last_seq, end_seq, event_count,
                  message_count, trace_count, lifecycle_count, started_at, updated_at, ended_at, metadata, outcome)
SELECT thread_id, run_id, min(user_id), min(user_id) <> max(user_id), 'success', min(seq), max(seq), max(seq), count(*),
       count(*) FILTER (WHERE category = 1), count(*) FILTER (WHERE category = 2), count(*) FILTER (WHERE category = 3),
       min(created_at), max(created_at), max(created_at),
       ((array_agg(content::text) FILTER (WHERE event_type = 'run_start'))[1])::json,
       ((array_agg(content::text) FILTER (WHERE event_type = 'run_end'))[1])::json
  FROM run_events GROUP BY thread_id, run_id`;

/** The head of every thread: its highest seq (no deletions here), from its runs. */
const HEADS_SQL = `
INSERT INTO thread_heads (thread_id, head_seq)
SELECT thread_id, max(last_seq) FROM runs GROUP BY thread_id`;

export interface DataStats {
  /** Seconds per step. */
  readonly seconds: Record<string, number>;
  readonly rows: number;
  readonly threads: number;
  readonly runs: number;
  readonly avgContentBytes: number;
  readonly avgRowBytes: number;
  readonly tableBytes: number;
  /** Size of each index of run_events, bytes. */
  readonly indexBytes: Record<string, number>;
  readonly categories: Record<string, number>;
}

/** Fills a migrated, empty database; `log` gets a line per step. */
export async function generateHistoryData(
  db: pg.ClientBase,
  log: (line: string) => void,
): Promise<DataStats> {
  const seconds: Record<string, number> = {};
  const step = async (name: string, sql: string): Promise<void> => {
    const t0 = performance.now();
    const r = await db.query(sql);
    seconds[name] = Math.round((performance.now() - t0) / 100) / 10;
    log(`  ${name}: ${seconds[name]} s${r.rowCount ? ` (${r.rowCount.toLocaleString('en-US')} rows)` : ''}`);
  };
  // A bulk load: no WAL flush per statement needed, and big sorts/hashes in memory.
  await db.query("SET synchronous_commit = off; SET work_mem = '256MB'; SET maintenance_work_mem = '512MB'");
  await step('insert 1M-event thread', BIG_SQL);
  await step('insert 100,000 threads × 10', SMALL_SQL);
  await step('runs', RUNS_SQL);
  await step('thread_heads', HEADS_SQL);
  await step('VACUUM ANALYZE', 'VACUUM (ANALYZE) run_events, thread_heads, runs');

  const one = async <T>(sql: string): Promise<T> => (await db.query(sql)).rows[0] as T;
  const counts = await one<{ rows: string; threads: string; runs: string }>(
    `SELECT (SELECT count(*) FROM run_events) AS rows, (SELECT count(*) FROM thread_heads) AS threads,
            (SELECT count(*) FROM runs) AS runs`,
  );
  const sizes = await one<{ content: string; row: string; table: string }>(
    `SELECT (SELECT avg(octet_length(content::text)) FROM run_events TABLESAMPLE SYSTEM (1)) AS content,
            (SELECT avg(pg_column_size(r.*)) FROM run_events r TABLESAMPLE SYSTEM (1)) AS row,
            pg_table_size('run_events') AS table`,
  );
  const { rows: idx } = await db.query<{ name: string; bytes: string }>(
    `SELECT indexrelid::regclass::text AS name, pg_relation_size(indexrelid) AS bytes
       FROM pg_index WHERE indrelid = 'run_events'::regclass ORDER BY 1`,
  );
  const { rows: cats } = await db.query<{ category: number; n: string }>(
    `SELECT category, count(*) AS n FROM run_events WHERE thread_id = '${BIG_THREAD}' GROUP BY 1 ORDER BY 1`,
  );
  const catName = ['', 'message', 'trace', 'lifecycle'];
  return {
    seconds,
    rows: Number(counts.rows),
    threads: Number(counts.threads),
    runs: Number(counts.runs),
    avgContentBytes: Math.round(Number(sizes.content)),
    avgRowBytes: Math.round(Number(sizes.row)),
    tableBytes: Number(sizes.table),
    indexBytes: Object.fromEntries(idx.map((r) => [r.name, Number(r.bytes)])),
    categories: Object.fromEntries(cats.map((c) => [catName[c.category] ?? String(c.category), Number(c.n)])),
  };
}
