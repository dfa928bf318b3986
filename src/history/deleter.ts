/**
 * Deletion that reaches every tier: Postgres rows (events and runs), the JetStream log,
 * and live subscribers.
 *
 * Order, and why:
 *  1. read the log's last offset: the *horizon* (persist/deletions.ts);
 *  2. one Postgres transaction under the thread's advisory lock: delete the rows and
 *     record the horizon, so the persister drops any message at or below it that a
 *     replay or an in-flight batch brings back. Postgres is the system of record, so
 *     this is the step that makes the delete true, and it alone must not fail halfway;
 *  3. publish a deletion notice: fan-out ends every subscription on the thread (run)
 *     with a `deleted` frame;
 *  4. remove the thread's (run's) messages from JetStream up to the horizon, so the hot
 *     tier forgets them too. Messages above the horizon are later events and stay. One
 *     message at a time, never a filtered purge: see log/remove-messages.ts.
 * If step 4 fails the rows are already gone and can never come back (the horizon is
 * recorded); the call reports UNAVAILABLE, and repeating it (deletes are idempotent)
 * finishes the removal.
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';
import { partitionOf } from '../domain/partition.js';
import { UnavailableError } from '../errors.js';
import { encodeDeletion } from '../log/deletion-notices.js';
import { removeMessages } from '../log/remove-messages.js';
import { isNotFound, partitionStream } from '../log/streams.js';
import type { Subjects } from '../log/subjects.js';
import type { Logger } from '../logger.js';
import { deleteRows } from '../persist/deletions.js';

export interface DeleterOptions {
  readonly pool: pg.Pool;
  readonly nc: NatsConnection;
  readonly jsm: JetStreamManager;
  readonly subjects: Subjects;
  readonly streamName: string;
  readonly log: Logger;
}

export interface DeleteResult {
  readonly deleted_events: number;
  readonly deleted_runs: number;
  readonly purged_messages: number;
  readonly head_seq: number;
}

export class Deleter {
  readonly #o: DeleterOptions;

  constructor(o: DeleterOptions) {
    this.#o = o;
  }

  /** Deletes a thread (every run); with `userId`, only if every event of it is that user's. */
  deleteThread(threadId: string, userId?: string): Promise<DeleteResult> {
    return this.#delete(threadId, undefined, userId);
  }

  /** Deletes one run of a thread; with `userId`, only if every event of it is that user's. */
  deleteRun(threadId: string, runId: string, userId?: string): Promise<DeleteResult> {
    return this.#delete(threadId, runId, userId);
  }

  async #delete(
    threadId: string,
    runId: string | undefined,
    userId: string | undefined,
  ): Promise<DeleteResult> {
    const { pool, nc, jsm, subjects, streamName, log } = this.#o;
    const partition = partitionOf(threadId, subjects.partitions);
    let logHorizon: number;
    let logCreated: string;
    try {
      const info = await jsm.streams.info(partitionStream(streamName, partition));
      logHorizon = info.state.last_seq;
      logCreated = info.created;
    } catch (err) {
      throw new UnavailableError(
        `the event log is unavailable, nothing was deleted: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }
    const rows = await deleteRows(pool, {
      threadId,
      runId,
      userId,
      logHorizon,
      partition: { stream: streamName, index: partition, logCreated },
    });
    try {
      nc.publish(
        subjects.deletions(threadId),
        encodeDeletion({
          thread_id: threadId,
          ...(runId === undefined ? {} : { run_id: runId }),
          deleted_events: rows.events,
          head_seq: rows.head,
        }),
      );
    } catch (err) {
      // Subscribers read Postgres, where the rows are gone: they see no deleted event either way.
      log.warn({ err: (err as Error).message, threadId, runId }, 'could not publish a deletion notice');
    }
    let purged: number;
    try {
      // The thread's partition stream, and the stream from before partitions.
      const stream = partitionStream(streamName, partition);
      const filter = runId === undefined ? subjects.logOfThread(threadId) : subjects.log(threadId, runId);
      // From the thread's lowest row, or what the persister has still to store of the
      // partition, on (deletions.ts); nothing when the log was empty.
      purged = await removeMessages(jsm, stream, filter, { from: rows.from, upTo: rows.horizon });
      const legacy =
        runId === undefined ? subjects.legacyLogOfThread(threadId) : subjects.legacyLog(threadId, runId);
      // The stream from before partitions counts its offsets apart: all of it is looked in.
      purged += await removeMessages(jsm, streamName, legacy, { from: 1, upTo: rows.horizon }).catch(
        (err: unknown) => {
          if (isNotFound(err)) return 0;
          throw err;
        },
      );
    } catch (err) {
      log.warn({ err: (err as Error).message, threadId, runId }, 'deleted rows but could not purge the log');
      throw new UnavailableError(
        `deleted ${rows.events} events from the store, but the event log could not be purged ` +
          `(${(err as Error).message}); repeat the delete to finish it`,
        { cause: err },
      );
    }
    log.info({ threadId, runId, events: rows.events, purged, horizon: rows.horizon }, 'deleted');
    return {
      deleted_events: rows.events,
      deleted_runs: rows.runs,
      purged_messages: purged,
      head_seq: rows.head,
    };
  }
}
