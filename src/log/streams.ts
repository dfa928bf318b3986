/**
 * The JetStream stream that is the ingest log.
 */
import { DiscardPolicy, type JetStreamManager, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';
import type { Subjects } from './subjects.js';

export interface LogStreamOptions {
  readonly streamName: string;
  readonly subjects: Subjects;
  readonly maxAgeMs: number;
  readonly duplicateWindowMs: number;
  readonly replicas: number;
}

/** Creates the log stream, or updates its limits when it exists. Safe to run from many processes. */
export async function ensureLogStream(jsm: JetStreamManager, o: LogStreamOptions): Promise<void> {
  const config = {
    name: o.streamName,
    subjects: [o.subjects.logAll],
    storage: StorageType.File,
    retention: RetentionPolicy.Limits,
    discard: DiscardPolicy.Old,
    max_age: nanos(o.maxAgeMs),
    duplicate_window: nanos(o.duplicateWindowMs),
    num_replicas: o.replicas,
  };
  try {
    const info = await jsm.streams.info(o.streamName);
    if (info.config.max_age !== config.max_age || info.config.duplicate_window !== config.duplicate_window) {
      await jsm.streams.update(o.streamName, {
        max_age: config.max_age,
        duplicate_window: config.duplicate_window,
      });
    }
  } catch (err) {
    if (!isNotFound(err)) throw err;
    try {
      await jsm.streams.add(config);
    } catch (addErr) {
      // Another process created it between our info and add.
      if (!String(addErr).includes('already in use')) throw addErr;
    }
  }
}

function isNotFound(err: unknown): boolean {
  const e = err as { code?: unknown; api_error?: { err_code?: number }; message?: string };
  return e?.api_error?.err_code === 10059 || /stream not found/i.test(String(e?.message ?? err));
}
