/** `runstream migrate`: applies the SQL migrations (sql/migrations/) and says which. */
import pg from 'pg';
import { ConfigError, loadConfig } from '../config.js';
import { createLogger } from '../logger.js';
import { explainPostgresError } from '../persist/connect-errors.js';
import { applyMigrations } from '../persist/migrate.js';
import { CommandError, EXIT_OK, parseFlags, type Subcommand } from './args.js';

const USAGE = `usage: runstream migrate

Applies the SQL migrations the database at DATABASE_URL does not have yet, in order, and
prints each one applied (the broker also applies them when it starts). Safe to run while
brokers run, and more than once: an applied migration is never applied again.`;

export const migrateCommand: Subcommand = {
  name: 'migrate',
  summary: 'apply the database migrations (DATABASE_URL) and say what was applied',
  usage: USAGE,
  async run(argv, io) {
    if (!parseFlags(this, argv, {}, io)) return EXIT_OK;
    let databaseUrl: string;
    try {
      databaseUrl = loadConfig().databaseUrl;
    } catch (err) {
      if (err instanceof ConfigError) throw new CommandError(err.message);
      throw err;
    }
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 1, connectionTimeoutMillis: 5_000 });
    pool.on('error', () => undefined);
    try {
      const report = await applyMigrations(pool, createLogger('silent'));
      for (const f of report.applied) io.out(`applied ${f}\n`);
      io.out(
        report.applied.length === 0
          ? `up to date: ${report.already.length} migrations were already applied\n`
          : `applied ${report.applied.length} migrations (${report.already.length} were already applied)\n`,
      );
      return EXIT_OK;
    } catch (err) {
      throw new CommandError(explainPostgresError(err, databaseUrl) ?? (err as Error).message);
    } finally {
      await pool.end().catch(() => undefined);
    }
  },
};
