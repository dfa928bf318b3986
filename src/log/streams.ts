/**
 * The JetStream streams that are the ingest log: one per partition (domain/partition.ts),
 * `<RS_STREAM>-<p>`, holding the subjects `<prefix>.log.<p>.*.*`.
 *
 * A stream per partition, not one stream read through a filter per partition: measured on
 * nats-server 2.9.10 (docs/scaling.md), a filtered consumer scans the whole stream to find its
 * partition (catch-up cost 3.7× the server CPU of reading everything once), and filtered pulls
 * at the tail missed heartbeats, delaying messages by seconds; a stream per partition reads
 * only its own messages. A thread's offsets are its partition stream's sequence, so they
 * still only grow through a thread's life.
 *
 * The log from before partitions is the stream named RS_STREAM itself, with the subjects
 * `<prefix>.log.*.*`: kept (narrowed from `<prefix>.log.>`, so the partition streams' subjects
 * are theirs), read once by the persister at the upgrade (persister.ts), and each partition
 * stream made to start after its last sequence, so a thread's offsets keep growing across
 * the upgrade.
 */
import { DiscardPolicy, type JetStreamManager, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';
import type { LogBounds } from '../domain/cursor.js';
import type { Subjects } from './subjects.js';

export interface LogStreamOptions {
  readonly streamName: string;
  readonly subjects: Subjects;
  readonly maxAgeMs: number;
  readonly duplicateWindowMs: number;
  readonly replicas: number;
}

/** The stream of partition `p`. */
export function partitionStream(streamName: string, p: number): string {
  return `${streamName}-${p}`;
}

/** What a partition stream's description says: `runstream log partition 3 of 32`. */
export function partitionDescription(p: number, partitions: number): string {
  return `runstream log partition ${p} of ${partitions}`;
}

/** The partition count a partition stream's description names; undefined if none. */
export function partitionsOfLog(description: string | undefined): number | undefined {
  const m = /\bpartition \d+ of (\d+)\b/.exec(description ?? '');
  return m ? Number(m[1]) : undefined;
}

/** A stream's extent, or undefined when there is no such stream. */
export async function streamBounds(jsm: JetStreamManager, name: string): Promise<LogBounds | undefined> {
  try {
    const { state, created } = await jsm.streams.info(name);
    return { first: state.first_seq, last: state.last_seq, created };
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

/**
 * Creates the partition streams, or updates their limits when they exist. Safe to run from
 * many processes at once. The partition count is fixed when the log is created (partition
 * 0's description says it): a process with another count is refused, naming both.
 */
export async function ensureLogStream(jsm: JetStreamManager, o: LogStreamOptions): Promise<void> {
  const partitions = o.subjects.partitions;
  const first = await jsm.streams.info(partitionStream(o.streamName, 0)).catch((err: unknown) => {
    if (isNotFound(err)) return undefined;
    throw err;
  });
  const theirs = partitionsOfLog(first?.config.description);
  if (theirs !== undefined && theirs !== partitions) {
    throw new Error(
      `RS_PARTITIONS=${partitions}, but the log ${o.streamName} was created with ${theirs} partitions: ` +
        `a thread's partition follows from the count, so every process must use ${theirs} ` +
        '(a different count needs a new log: another RS_STREAM and RS_SUBJECT_PREFIX)',
    );
  }
  const before = await narrowLegacyStream(jsm, o);
  await Promise.all(Array.from({ length: partitions }, (_, p) => ensurePartitionStream(jsm, o, p, before)));
}

/**
 * The stream from before partitions, if there is one: narrowed to the subjects of that
 * layout; returns its last sequence (0 without one), which the partition streams start after.
 */
async function narrowLegacyStream(jsm: JetStreamManager, o: LogStreamOptions): Promise<number> {
  try {
    const info = await jsm.streams.info(o.streamName);
    if (info.config.subjects?.includes(o.subjects.logAll)) {
      await jsm.streams.update(o.streamName, { subjects: [o.subjects.legacyLogAll] });
    }
    return info.state.last_seq;
  } catch (err) {
    if (isNotFound(err)) return 0;
    throw err;
  }
}

async function ensurePartitionStream(
  jsm: JetStreamManager,
  o: LogStreamOptions,
  p: number,
  after: number,
): Promise<void> {
  const name = partitionStream(o.streamName, p);
  const subject = o.subjects.logOfPartition(p);
  const limits = { max_age: nanos(o.maxAgeMs), duplicate_window: nanos(o.duplicateWindowMs) };
  let raced: unknown;
  for (let attempt = 0; ; attempt++) {
    try {
      const info = await jsm.streams.info(name);
      if (!info.config.subjects?.includes(subject)) {
        // Created by a start that did not finish (or is finishing now): move it past the
        // older log, then give it its subject (no message could have been published to it).
        if (info.state.last_seq < after) {
          // Asked again just before: only a stream no producer can have reached is purged.
          const now = await jsm.streams.info(name);
          if (!now.config.subjects?.includes(subject) && now.state.messages === 0) {
            await jsm.streams.purge(name, { seq: after + 1 });
          }
        }
        await jsm.streams.update(name, { subjects: [subject] });
      } else if (
        info.config.max_age !== limits.max_age ||
        info.config.duplicate_window !== limits.duplicate_window
      ) {
        await jsm.streams.update(name, limits);
      }
      return;
    } catch (err) {
      if (!isNotFound(err)) throw err;
      if (attempt > 2) throw raced ?? err;
    }
    try {
      // With no subject a producer publishes to until it starts after the older log.
      await jsm.streams.add({
        name,
        description: partitionDescription(p, o.subjects.partitions),
        subjects: after > 0 ? [`${o.subjects.prefix}.starting.${p}`] : [subject],
        storage: StorageType.File,
        retention: RetentionPolicy.Limits,
        discard: DiscardPolicy.Old,
        num_replicas: o.replicas,
        ...limits,
      });
    } catch (err) {
      // Another process created it between our info and add (nats-server answers "already in
      // use" or, to a create racing another, "subjects overlap"): look again.
      if (!/already in use|subjects overlap/i.test(String(err))) throw err;
      raced = err;
    }
  }
}

export function isNotFound(err: unknown): boolean {
  const e = err as { code?: unknown; api_error?: { err_code?: number }; message?: string };
  return e?.api_error?.err_code === 10059 || /stream not found/i.test(String(e?.message ?? err));
}
