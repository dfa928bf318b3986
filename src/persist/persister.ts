/**
 * The persister: reads the JetStream log strictly in order, stores each thread's events
 * with gap-free seqs (see seq-assigner.ts), announces what it committed, and then moves
 * its checkpoint (see checkpoint.ts).
 *
 * It reads with an ordered consumer from checkpoint + 1, so a crash at any point replays
 * from a position, in log order: events already committed come back as duplicates and
 * take no seq. Messages are gathered while the previous batch is being stored, so
 * batches grow with load; a batch's threads are all stored in one transaction with a
 * constant number of statements (batch-assigner.ts), and a batch is finished before the
 * next starts, so every thread's events are stored in log order. A failure (Postgres away,
 * a lost connection) retries the whole batch with backoff: the persister pauses and
 * resumes by itself. Reading pauses too (the consumer is only pulled as batches are taken), so memory stays bounded.
 */
import { randomBytes } from 'node:crypto';
import { type ConsumerMessages, DeliverPolicy, type JetStreamClient, type JsMsg } from '@nats-io/jetstream';
import { headers, type NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';
import type { LogBounds } from '../domain/cursor.js';
import type { LogRecord } from '../domain/event.js';
import { COMMITTED_AT_HEADER, chunkEvents, encodeReceipts } from '../log/announcements.js';
import { maxBodyBytes } from '../log/connection.js';
import { decodeLogMessage } from '../log/log-batch.js';
import type { Subjects } from '../log/subjects.js';
import type { Logger } from '../logger.js';
import { type Metrics, secondsSince } from '../metrics.js';
import { endWith, startSpan, traceLinks } from '../tracing.js';
import { storeBatch } from './batch-assigner.js';
import { readCheckpoint, saveCheckpoint } from './checkpoint.js';
import { REJECTED_EVENT_TYPE, rejectionOf } from './poison.js';
import { withClient } from './pool-client.js';
import type { PendingEvent, Rejection, ThreadBatchResult } from './seq-assigner.js';

export const RETRY_BASE_MS = 100;
export const RETRY_MAX_MS = 5_000;
export const PULL_EXPIRES_MS = 2_000;

export interface PersisterOptions {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly pool: pg.Pool;
  readonly subjects: Subjects;
  readonly streamName: string;
  /** Most events stored in one batch (a batch takes whole log messages, at least one). */
  readonly batchMax: number;
  /** The log's current extent, to check the checkpoint against at start. */
  readonly logBounds: () => Promise<LogBounds>;
  readonly log: Logger;
  /** Batch sizes and commit latencies. */
  readonly metrics?: Metrics | undefined;
}

/** A log message taken from the log: its offset and its events (none if undecodable). */
interface Taken {
  readonly offset: number;
  readonly records: readonly LogRecord[];
}

export class Persister implements AsyncDisposable {
  readonly #o: PersisterOptions;
  #messages: ConsumerMessages | undefined;
  #reading: Promise<void> | undefined;
  #queue: Taken[] = [];
  /** Events in the queue. */
  #queuedEvents = 0;
  #draining: Promise<void> | undefined;
  /** Resolves the reader when the queue has room again. */
  #room: (() => void) | undefined;
  #closed = false;
  /** Log offset of the last message taken into the queue. */
  #lastQueued = 0;
  /** Events stored since start (not counting duplicates). */
  storedCount = 0;
  /** Events that turned out to be stored already (replays, retries). */
  duplicateCount = 0;
  /** Events the store refused: dead-lettered, a notice stored in their place (poison.ts). */
  rejectedCount = 0;
  /** Refused events whose notice was refused too: only logged. */
  droppedCount = 0;
  /** Highest log offset stored. */
  position = 0;

  constructor(options: PersisterOptions) {
    this.#o = options;
  }

  async start(): Promise<void> {
    this.position = await readCheckpoint(this.#o.pool, this.#o.streamName);
    const bounds = await this.#o.logBounds();
    if (this.position > bounds.last) {
      // The stream was recreated under the same name: its sequences start again at 1.
      // Replaying it whole is safe (whatever is stored comes back as a duplicate).
      this.#o.log.warn(
        { checkpoint: this.position, logLast: bounds.last },
        'checkpoint is past the log; replaying it whole',
      );
      this.position = 0;
    } else if (this.position + 1 < bounds.first) {
      this.#o.log.error(
        { checkpoint: this.position, logFirst: bounds.first, lost: bounds.first - this.position - 1 },
        'log messages expired (stream max age / limits) before they were persisted',
      );
    }
    this.#lastQueued = this.position;
    const first = await this.#openConsumer();
    this.#reading = this.#readForever(first);
    this.#o.log.info({ from: this.position + 1 }, 'persister reading the log');
  }

  /** An ordered consumer from the message after the last one taken. */
  async #openConsumer(): Promise<ConsumerMessages> {
    const consumer = await this.#o.js.consumers.get(this.#o.streamName, {
      // Unique per start: a dead process's consumer lingers until its inactivity threshold.
      name_prefix: `rs-persister-${randomBytes(6).toString('hex')}`,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: this.#lastQueued + 1,
    });
    // Short pulls: after a NATS restart the server has forgotten the open pull request,
    // and the client notices only by missed heartbeats (half the pull's expiry).
    this.#messages = await consumer.consume({ max_messages: this.#o.batchMax, expires: PULL_EXPIRES_MS });
    return this.#messages;
  }

  /** Reads until closed; if the consumer ever ends on its own, opens a new one where it stopped. */
  async #readForever(first: ConsumerMessages): Promise<void> {
    let messages: ConsumerMessages | undefined = first;
    while (!this.#closed) {
      try {
        messages ??= await this.#openConsumer();
        await this.#read(messages);
      } catch (err) {
        this.#o.log.warn({ err: (err as Error).message }, 'reading the log failed');
      }
      messages = undefined;
      if (this.#closed) return;
      this.#o.log.warn({ from: this.#lastQueued + 1 }, 'log reader stopped; reopening');
      await new Promise((r) => setTimeout(r, RETRY_MAX_MS / 5));
    }
  }

  async #read(messages: ConsumerMessages): Promise<void> {
    for await (const m of messages) {
      if (this.#closed) break;
      if (m.seq <= this.#lastQueued) continue; // already taken before a reopen
      this.#lastQueued = m.seq;
      const taken = this.#decode(m);
      this.#queue.push(taken);
      this.#queuedEvents += taken.records.length;
      this.#draining ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.#drain());
      if (this.#queuedEvents >= this.#o.batchMax * 2) {
        await new Promise<void>((resolve) => {
          this.#room = resolve;
        });
      }
    }
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0 && !this.#closed) {
        let n = 0;
        let events = 0;
        while (
          n < this.#queue.length &&
          (n === 0 || events + (this.#queue[n] as Taken).records.length <= this.#o.batchMax)
        ) {
          events += (this.#queue[n] as Taken).records.length;
          n++;
        }
        const batch = this.#queue.splice(0, n);
        this.#queuedEvents -= events;
        this.#room?.();
        this.#room = undefined;
        await this.#storeBatch(batch);
      }
    } finally {
      this.#draining = undefined;
    }
  }

  #decode(m: JsMsg): Taken {
    try {
      return { offset: m.seq, records: decodeLogMessage(m.string()) };
    } catch (err) {
      // Not something ingest wrote: nothing to store, and it must not block the log.
      this.#o.log.error({ err, subject: m.subject, offset: m.seq }, 'skipping undecodable log message');
      return { offset: m.seq, records: [] };
    }
  }

  async #storeBatch(batch: readonly Taken[]): Promise<void> {
    const events: PendingEvent[] = [];
    for (const m of batch) for (const record of m.records) events.push({ record, offset: m.offset });
    if (!(await this.#store(events))) return; // closing: replayed from the checkpoint next time
    const last = (batch[batch.length - 1] as Taken).offset;
    this.position = last;
    // Losing this write only means replaying a little more after a crash.
    await saveCheckpoint(this.#o.pool, this.#o.streamName, last).catch((err: unknown) =>
      this.#o.log.warn({ err: (err as Error).message }, 'could not save the persister checkpoint'),
    );
  }

  /**
   * Stores events (in log order) in one transaction and announces them per thread; false
   * if given up because the persister is closing. A failure that is Postgres refusing the
   * data splits the events in two halves stored one after the other (so each thread keeps
   * its log order), down to the one refused event, which is dead-lettered (poison.ts);
   * any other failure (Postgres away, a lost connection) is retried with backoff.
   */
  async #store(events: readonly PendingEvent[]): Promise<boolean> {
    if (events.length === 0) return true;
    for (let n = 0; ; n++) {
      try {
        const groups = byThread(events);
        const startMs = performance.now();
        // In the traces of the producers whose events it stores (linked: a batch has many).
        const span = startSpan('runstream.persist.batch', {
          attributes: { 'runstream.events': events.length, 'runstream.threads': groups.size },
          links: traceLinks(events.map((e) => e.record.metadata_json)),
        });
        const results = await endWith(
          span,
          withClient(this.#o.pool, (client) => storeBatch(client, groups)),
        );
        this.#o.metrics?.persistCommitSeconds.observe(secondsSince(startMs));
        this.#o.metrics?.persistBatchEvents.observe(events.length);
        const committedAt = String(Date.now());
        for (const [threadId, batch] of groups) {
          const result = results.get(threadId) as ThreadBatchResult;
          this.#count(batch, result);
          this.#announce(threadId, result, committedAt);
        }
        return true;
      } catch (err) {
        if (this.#closed) return false;
        const rejection = rejectionOf(err);
        if (rejection) return this.#isolate(events, rejection);
        const delay = Math.min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** Math.min(n, 10));
        this.#o.log.warn(
          { err: (err as Error).message, events: events.length, retryInMs: delay },
          'storing a batch failed; retrying',
        );
        await new Promise((r) => setTimeout(r, delay));
        if (this.#closed) return false;
      }
    }
  }

  /** Postgres refused something in `events`: store the halves apart, or reject the one event. */
  async #isolate(events: readonly PendingEvent[], rejection: Rejection): Promise<boolean> {
    if (events.length > 1) {
      const half = Math.ceil(events.length / 2);
      return (await this.#store(events.slice(0, half))) && (await this.#store(events.slice(half)));
    }
    const p = events[0] as PendingEvent;
    if (p.rejection) {
      // The notice and the dead letter were refused too: nothing more can be done with it.
      this.droppedCount++;
      this.#o.log.error(
        { threadId: p.record.thread_id, eventId: p.record.event_id, offset: p.offset, ...rejection },
        'event and its rejection notice refused by the store; event dropped',
      );
      return true;
    }
    this.rejectedCount++;
    this.#o.log.error(
      { threadId: p.record.thread_id, eventId: p.record.event_id, offset: p.offset, ...rejection },
      'event refused by the store: dead-lettered, a notice stored in its place',
    );
    return this.#store([{ ...p, rejection }]);
  }

  #count(batch: readonly PendingEvent[], result: ThreadBatchResult): void {
    const rejected = result.receipts.filter((r) => r.rejected !== undefined).length;
    const notices =
      rejected === 0 ? 0 : result.inserted.filter((e) => e.event_type === REJECTED_EVENT_TYPE).length;
    this.storedCount += result.inserted.length - notices;
    this.duplicateCount += batch.length - rejected - (result.inserted.length - notices);
  }

  #announce(threadId: string, r: ThreadBatchResult, committedAt: string): void {
    const { nc, subjects, log } = this.#o;
    // Keep under the server's max_payload: a big batch goes out in several messages.
    const limit = maxBodyBytes(nc);
    try {
      const h = headers();
      h.set(COMMITTED_AT_HEADER, committedAt);
      for (const chunk of chunkEvents(r.inserted, limit)) {
        nc.publish(subjects.events(threadId), chunk, { headers: h });
      }
    } catch (err) {
      // Subscribers see the hole at the next event and fill it from Postgres.
      log.warn({ err: (err as Error).message, threadId }, 'could not announce committed events');
    }
    try {
      nc.publish(subjects.receipts(threadId), encodeReceipts(r.receipts));
    } catch (err) {
      // PERSISTED waiters time out; a retry with the same event_ids learns the seqs.
      log.warn({ err: (err as Error).message, threadId }, 'could not publish commit receipts');
    }
  }

  /** Stops reading and waits for the batch in hand to be stored. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#room?.();
    await this.#messages?.close().catch(() => undefined);
    await this.#draining;
    await this.#reading?.catch(() => undefined);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Events by thread, each thread's in log order. */
function byThread(events: readonly PendingEvent[]): Map<string, PendingEvent[]> {
  const groups = new Map<string, PendingEvent[]>();
  for (const p of events) {
    const g = groups.get(p.record.thread_id);
    if (g) g.push(p);
    else groups.set(p.record.thread_id, [p]);
  }
  return groups;
}
