/**
 * The runstream process: reads the config, starts the stages, and is the only place
 * that handles signals. SIGTERM/SIGINT shut down gracefully; a second signal, or the
 * grace period running out, ends the process at once. `node dist/src/main.js` and
 * `runstream serve` (cli/serve.ts) both run {@link serve}.
 */
import cluster from 'node:cluster';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startBroker } from './broker.js';
import { type Config, ConfigError, loadConfig } from './config.js';
import { createLogger } from './logger.js';
import { explainPostgresError } from './persist/connect-errors.js';
import { slotFromArgv } from './workers/plan.js';
import { Supervisor, supervisorShutdownBoundMs } from './workers/supervisor.js';
import { startWorker } from './workers/worker.js';

/** Runs the broker as this process, until a signal ends it (which exits the process). */
export function serve(): void {
  main().catch((err: unknown) => {
    process.stderr.write(`runstream: failed to start: ${startupProblem(err)}\n`);
    process.exit(1);
  });
}

/**
 * One line for a failed start: what is wrong and what to do (a missing database is named,
 * with how to create it). At LOG_LEVEL=debug or trace, the stack too.
 */
function startupProblem(err: unknown): string {
  const known =
    startupConfig === undefined ? undefined : explainPostgresError(err, startupConfig.databaseUrl);
  if (known !== undefined) return known;
  if (!(err instanceof Error)) return String(err);
  return startupConfig?.logLevel === 'debug' || startupConfig?.logLevel === 'trace'
    ? (err.stack ?? err.message)
    : err.message.replace(/\s*\n\s*/g, ' ');
}

let startupConfig: Config | undefined;

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
  startupConfig = config;
  const slot = cluster.isWorker ? slotFromArgv(process.argv) : undefined;
  const log = createLogger(
    config.logLevel,
    'runstream',
    config.logFormat,
    slot === undefined ? {} : { worker: slot },
  );
  // A promise nobody awaited is a bug to fix, not a reason to drop every connection: log it.
  // (An uncaught exception still ends the process: its state is unknown.)
  process.on('unhandledRejection', (err: unknown) => log.error({ err }, 'unhandled promise rejection'));
  if (config.workers > 1 && cluster.isPrimary) return superviseWorkers(config, log);

  let close: () => Promise<void>;
  let signals = 0;
  if (slot !== undefined) {
    // The primary orders the shutdown: serving workers first, then the persister. A signal
    // sent to the whole group (Ctrl-C in a terminal, systemd's control-group kill) would
    // stop them all at once, so a worker leaves both signals to the primary, from its start.
    for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => undefined);
    const worker = await startWorker(config, slot, log);
    close = () => worker.broker.close();
    worker.onShutdownRequest(() => shutdown('SIGTERM'));
  } else {
    // A signal during start-up is kept and acted on once started: the default action would
    // end the process without a graceful shutdown of what has started.
    let early: NodeJS.Signals | undefined;
    const keep = (signal: NodeJS.Signals): void => {
      early ??= signal;
    };
    process.on('SIGTERM', keep);
    process.on('SIGINT', keep);
    const broker = await startBroker(config, log);
    close = () => broker.close();
    process.off('SIGTERM', keep);
    process.off('SIGINT', keep);
    process.on('SIGTERM', shutdown);
    process.on('SIGINT', shutdown);
    if (early !== undefined) shutdown(early);
  }

  function shutdown(signal: NodeJS.Signals): void {
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
    close().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  }
}

/** The primary of `RS_WORKERS` > 1: forks the workers and drains them on SIGTERM/SIGINT. */
async function superviseWorkers(config: Config, log: ReturnType<typeof createLogger>): Promise<void> {
  const supervisor = new Supervisor({ config, log, exec: fileURLToPath(import.meta.url) });
  let signals = 0;
  const shutdown = (signal: NodeJS.Signals): void => {
    if (++signals > 1) {
      log.warn({ signal }, 'second signal: exiting now');
      supervisor.kill();
      process.exit(1);
    }
    log.info({ signal }, 'shutting down');
    const force = setTimeout(() => {
      log.error('shutdown grace period over: exiting now');
      supervisor.kill();
      process.exit(1);
    }, supervisorShutdownBoundMs(config) + 1_000);
    force.unref();
    supervisor.close().then(
      () => {
        log.info('runstream stopped');
        process.exit(0);
      },
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
  await supervisor.start();
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) serve();
