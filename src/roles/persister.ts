/** The persister role: stores its share of the log's partitions in Postgres (persist/persister.ts). */
import { DATABASE_RETRY_MAX_MS } from '../persist/migrate.js';
import { Persister } from '../persist/persister.js';
import type { Base, Closers } from './base.js';

export async function startPersisterRole(b: Base, closers: Closers): Promise<Persister> {
  const persister = new Persister({
    nc: b.nc,
    js: b.js,
    pool: b.pool,
    subjects: b.subjects,
    streamName: b.config.streamName,
    batchMax: b.config.persistBatchMax,
    leaseMs: b.config.persisterLeaseMs,
    logBounds: b.logBounds,
    log: b.log.child({ stage: 'persister' }),
    metrics: b.metrics,
  });
  b.metrics.gauge(
    'runstream_persister_lag_messages',
    "Log messages of this persister's partitions not stored yet",
    [],
    (g) => g.set(persister.lag),
  );
  b.metrics.gauge('runstream_persister_position', 'Highest log offset this persister stored', [], (g) =>
    g.set(persister.position),
  );
  b.metrics.gauge('runstream_persister_partitions', 'Partitions of the log this persister holds', [], (g) =>
    g.set(persister.partitions.length),
  );
  if (b.databaseReady()) {
    await persister.start();
    closers.push(() => persister.close());
    return persister;
  }
  // Postgres was down at start: the persister starts once it is reachable and migrated.
  let closed = false;
  closers.push(async () => {
    closed = true;
    await persister.close();
  });
  void (async () => {
    await b.database;
    while (!closed) {
      try {
        await persister.start();
        return;
      } catch (err) {
        b.log.warn({ err: (err as Error).message }, 'persister could not start; retrying');
        await new Promise((r) => setTimeout(r, DATABASE_RETRY_MAX_MS / 5));
      }
    }
  })().catch(() => undefined); // the database never came (node closed, or a bad migration: logged)
  return persister;
}
