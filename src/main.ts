/**
 * The runstream process: reads the config, starts the stages, and is the only place
 * that handles signals. SIGTERM/SIGINT shut down gracefully; a second signal, or the
 * grace period running out, ends the process at once. `node dist/src/main.js` and
 * `runstream serve` (cli/serve.ts) both run {@link serve}.
 */
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startBroker } from './broker.js';
import { ConfigError, loadConfig } from './config.js';
import { createLogger } from './logger.js';

/** Runs the broker as this process, until a signal ends it (which exits the process). */
export function serve(): void {
  main().catch((err: unknown) => {
    process.stderr.write(
      `runstream: failed to start: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exit(1);
  });
}

async function main(): Promise<void> {
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`runstream: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const log = createLogger(config.logLevel);
  // A promise nobody awaited is a bug to fix, not a reason to drop every connection: log it.
  // (An uncaught exception still ends the process: its state is unknown.)
  process.on('unhandledRejection', (err: unknown) => log.error({ err }, 'unhandled promise rejection'));
  const broker = await startBroker(config, log);

  let signals = 0;
  const shutdown = (signal: NodeJS.Signals): void => {
    if (++signals > 1) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    log.info({ signal }, 'shutting down');
    const force = setTimeout(() => {
      log.error('shutdown grace period over: exiting now');
      process.exit(1);
    }, config.shutdownGraceMs + 5_000);
    force.unref();
    broker.close().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) serve();
