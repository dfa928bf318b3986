/**
 * What Postgres spent its time on during one broker run (`--pg-stats`): the bench's Postgres
 * then loads `pg_stat_statements` (with `track=all`, so the statements inside PL/pgSQL
 * functions count too), and each run, whose database is its own, reads its statements before
 * the database is dropped. Times are the server's execution times, not CPU; a statement run
 * inside a function is counted both by itself and in the call that ran it.
 */
import pg from 'pg';

/** The server settings that turn it on. */
export const PG_STATS_SETTINGS: readonly string[] = [
  'shared_preload_libraries=pg_stat_statements',
  'pg_stat_statements.track=all',
];

export interface PgStatement {
  readonly calls: number;
  /** Execution time of all calls, ms. */
  readonly totalMs: number;
  readonly meanMs: number;
  readonly rows: number;
  /** The normalised text, whitespace collapsed, cut at 160 characters. */
  readonly query: string;
}

/** The `limit` statements of `databaseUrl`'s database that took the most time; undefined if unavailable. */
export async function topStatements(databaseUrl: string, limit = 8): Promise<PgStatement[] | undefined> {
  const client = new pg.Client({ connectionString: databaseUrl });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    const { rows } = await client.query<{
      calls: string;
      total: number;
      mean: number;
      rows: string;
      query: string;
    }>(
      `SELECT calls, total_exec_time AS total, mean_exec_time AS mean, rows, query
         FROM pg_stat_statements
        WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND query NOT ILIKE '%pg_stat_statements%'
        ORDER BY total_exec_time DESC
        LIMIT $1`,
      [limit],
    );
    const round = (ms: number) => Math.round(ms * 1000) / 1000;
    return rows.map((r) => ({
      calls: Number(r.calls),
      totalMs: round(r.total),
      meanMs: round(r.mean),
      rows: Number(r.rows),
      query: r.query.replace(/\s+/g, ' ').trim().slice(0, 160),
    }));
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** One line per statement: calls, ms per call, ms in all, the text. */
export function statementsText(statements: readonly PgStatement[]): string {
  return statements
    .map(
      (s) =>
        `    ${String(s.calls).padStart(7)} calls ${s.meanMs.toFixed(3).padStart(8)} ms each ` +
        `${Math.round(s.totalMs).toString().padStart(7)} ms in all  ${s.query}`,
    )
    .join('\n');
}
