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
  });
  await persister.start();
  closers.push(() => persister.close());
  return persister;
}
