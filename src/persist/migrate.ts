/**
 * Applies the numbered SQL files in `sql/migrations/` once each, in order, at start-up.
 * A session advisory lock makes it safe when several broker processes start together.
 */
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import type { Logger } from '../logger.js';
import { isConnectionFailure, withClient } from './pool-client.js';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../../sql/migrations/', import.meta.url));
/** Arbitrary constant key of the migration lock ("rs-migr" in ASCII). */
export const MIGRATION_LOCK_KEY = '8319675174349940338';
export const DATABASE_RETRY_BASE_MS = 250;
export const DATABASE_RETRY_MAX_MS = 5_000;

/** Postgres could not be reached (down, starting, a failover under way), as opposed to a bad migration. */
export function isUnreachable(err: unknown): boolean {
  if (isConnectionFailure(err)) return true;
  const code = (err as { code?: unknown } | null)?.code;
  if (code === 'ENOTFOUND' || code === 'EHOSTUNREACH' || code === 'EAI_AGAIN') return true;
  return /timeout exceeded when trying to connect|the database system is (starting up|shutting down)/i.test(
    String(err),
  );
}

/**
 * {@link migrate}, retried with backoff for as long as Postgres cannot be reached: a broker
 * started before its database waits for it instead of exiting. Rejects on a migration that
 * fails for another reason, or when `signal` aborts.
 */
export async function migrateWhenReachable(pool: pg.Pool, log: Logger, signal: AbortSignal): Promise<number> {
  for (let attempt = 0; ; attempt++) {
    signal.throwIfAborted();
    try {
      return await migrate(pool, log);
    } catch (err) {
      if (!isUnreachable(err) && !isUnreachable((err as Error).cause)) throw err;
      const waitMs = Math.min(DATABASE_RETRY_MAX_MS, DATABASE_RETRY_BASE_MS * 2 ** attempt);
      log.warn({ err: (err as Error).message, retryInMs: waitMs }, 'postgres unreachable: waiting for it');
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, waitMs);
        signal.addEventListener('abort', () => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }
}

/** Applies the migrations not applied yet; returns how many it applied. */
export async function migrate(pool: pg.Pool, log: Logger, dir: string = MIGRATIONS_DIR): Promise<number> {
  return (await applyMigrations(pool, log, dir)).applied.length;
}

export interface MigrationReport {
  /** Files applied now, in order. */
  readonly applied: readonly string[];
  /** Files applied before. */
  readonly already: readonly string[];
}

/** {@link migrate}, saying which files it applied and which were applied before. */
export async function applyMigrations(
  pool: pg.Pool,
  log: Logger,
  dir: string = MIGRATIONS_DIR,
): Promise<MigrationReport> {
  const files = (await readdir(dir)).filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f)).sort();
  return withClient(pool, async (client) => {
    const applied: string[] = [];
    const already: string[] = [];
    await client.query('SELECT pg_advisory_lock($1::bigint)', [MIGRATION_LOCK_KEY]);
    try {
      await client.query(
        `CREATE TABLE IF NOT EXISTS runstream_migrations (
           version    text        PRIMARY KEY,
           applied_at timestamptz NOT NULL DEFAULT now()
         )`,
      );
      const done = new Set(
        (await client.query<{ version: string }>('SELECT version FROM runstream_migrations')).rows.map(
          (r) => r.version,
        ),
      );
      for (const file of files) {
        const version = file.slice(0, 4);
        if (done.has(version)) {
          already.push(file);
          continue;
        }
        const sql = await readFile(`${dir}/${file}`, 'utf8');
        await client.query('BEGIN');
        try {
          await client.query(sql);
          await client.query('INSERT INTO runstream_migrations (version) VALUES ($1)', [version]);
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK');
          throw new Error(`migration ${file} failed: ${(err as Error).message}`, { cause: err });
        }
        applied.push(file);
        log.info({ migration: file }, 'applied migration');
      }
    } finally {
      await client.query('SELECT pg_advisory_unlock($1::bigint)', [MIGRATION_LOCK_KEY]);
    }
    return { applied, already };
  });
}
