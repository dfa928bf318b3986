/** The persister role: reads the log in order and stores it in Postgres (persist/persister.ts). */
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
    logBounds: b.logBounds,
    log: b.log.child({ stage: 'persister' }),
    metrics: b.metrics,
  });
  await persister.start();
  b.metrics.gauge(
    'runstream_persister_lag_messages',
    "Log messages not yet stored: the log's last offset less the persister's position",
    [],
    async (g) => g.set(Math.max(0, (await b.logBounds()).last - persister.position)),
  );
  b.metrics.gauge('runstream_persister_position', 'Last log offset stored (the checkpoint)', [], (g) =>
    g.set(persister.position),
  );
  closers.push(() => persister.close());
  return persister;
}
