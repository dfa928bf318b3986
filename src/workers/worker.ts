/**
 * One worker of a host (`RS_WORKERS` > 1): runs its slot's roles ({@link workerPlan}) in a
 * broker of its own, on the ports node:cluster shares, tells the primary when it is up,
 * sends its metrics when the primary collects them, and answers `/metrics` with the whole
 * host's, which it asks the primary for.
 */
import { type Broker, startBroker } from '../broker.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { isToWorker, type ToPrimary } from './messages.js';
import { type Slot, workerPlan } from './plan.js';

/** A worker's scrape that the primary has not answered within this fails (the scrape gets a 500). */
export const SCRAPE_TIMEOUT_MS = 10_000;

export interface WorkerHandle {
  readonly slot: Slot;
  readonly broker: Broker;
  /** Calls `fn` when the primary asks this worker to shut down. */
  onShutdownRequest(fn: () => void): void;
}

function send(message: ToPrimary): void {
  process.send?.(message);
}

export async function startWorker(config: Config, slot: Slot, log: Logger): Promise<WorkerHandle> {
  const plan = workerPlan(config).find((p) => p.slot === slot);
  if (plan === undefined) throw new Error(`no worker ${JSON.stringify(slot)} in this host's plan`);
  let scrapeId = 0;
  const scrapes = new Map<number, (r: { contentType: string; body: string } | Error) => void>();
  const shutdownHandlers: (() => void)[] = [];
  // The primary may ask before the broker is up (a shutdown during start): kept for the handler.
  let shutdownRequested = false;
  let broker: Broker | undefined;
  process.on('message', (message: unknown) => {
    if (!isToWorker(message)) return;
    switch (message.rs) {
      case 'collect':
        void (broker?.metrics.registry.getMetricsAsJSON() ?? Promise.resolve([])).then(
          (metrics) => send({ rs: 'collected', id: message.id, metrics }),
          () => send({ rs: 'collected', id: message.id, metrics: [] }),
        );
        return;
      case 'scrape-result': {
        const answer = scrapes.get(message.id);
        scrapes.delete(message.id);
        answer?.('error' in message ? new Error(message.error) : message);
        return;
      }
      case 'shutdown':
        shutdownRequested = true;
        for (const fn of shutdownHandlers) fn();
        return;
    }
  });
  const scrape = (): Promise<{ contentType: string; body: string }> =>
    new Promise((resolve, reject) => {
      const id = ++scrapeId;
      const timer = setTimeout(() => {
        scrapes.delete(id);
        reject(new Error('the primary did not answer the metrics scrape'));
      }, SCRAPE_TIMEOUT_MS);
      scrapes.set(id, (r) => {
        clearTimeout(timer);
        if (r instanceof Error) reject(r);
        else resolve(r);
      });
      send({ rs: 'scrape', id });
    });

  broker = await startBroker({ ...config, roles: plan.roles }, log, { listen: plan.listen, scrape });
  send({ rs: 'started', slot, grpcPort: broker.grpcPort, httpPort: broker.httpPort });
  return {
    slot,
    broker,
    onShutdownRequest: (fn) => {
      shutdownHandlers.push(fn);
      if (shutdownRequested) fn();
    },
  };
}
