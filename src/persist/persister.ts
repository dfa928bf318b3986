/**
 * The persister: consumes the JetStream log in order, stores each thread's events with
 * gap-free seqs (see seq-assigner.ts), announces what it committed, and only then acks.
 *
 * Messages are gathered while the previous batch is being stored, so batches grow with
 * load; within a batch threads are stored in parallel, each thread in its own
 * transaction. A batch is finished (every thread committed) before the next starts, so
 * a thread's events are stored in log order. A failure (Postgres away, a lost
 * connection) retries the same thread-batch with backoff, keeping the messages unacked
 * and alive, so the persister pauses and resumes by itself.
 */
import type { ConsumerMessages, JetStreamClient, JetStreamManager, JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';
import type { LogRecord } from '../event.js';
import { encodeEvents, encodeReceipts } from '../log/announcements.js';
import { ensurePersisterConsumer, PERSISTER_DURABLE } from '../log/streams.js';
import type { Subjects } from '../log/subjects.js';
import type { Logger } from '../logger.js';
import { type PendingEvent, storeThreadBatch, type ThreadBatchResult } from './seq-assigner.js';

export const RETRY_BASE_MS = 100;
export const RETRY_MAX_MS = 5_000;

export interface PersisterOptions {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly pool: pg.Pool;
  readonly subjects: Subjects;
  readonly streamName: string;
  /** Most log messages stored in one batch. */
  readonly batchMax: number;
  readonly ackWaitMs: number;
  readonly log: Logger;
}

interface ThreadGroup {
  readonly msgs: JsMsg[];
  readonly events: PendingEvent[];
}

export class Persister implements AsyncDisposable {
  readonly #o: PersisterOptions;
  #messages: ConsumerMessages | undefined;
  #queue: JsMsg[] = [];
  #draining: Promise<void> | undefined;
  #closed = false;
  /** Events stored since start (not counting duplicates). */
  storedCount = 0;
  duplicateCount = 0;

  constructor(options: PersisterOptions) {
    this.#o = options;
  }

  async start(): Promise<void> {
    const { jsm, js, streamName, batchMax, ackWaitMs } = this.#o;
    await ensurePersisterConsumer(jsm, { streamName, ackWaitMs, maxAckPending: batchMax * 4 });
    const consumer = await js.consumers.get(streamName, PERSISTER_DURABLE);
    this.#messages = await consumer.consume({
      max_messages: batchMax,
      callback: (m) => this.#enqueue(m),
    });
  }

  #enqueue(m: JsMsg): void {
    this.#queue.push(m);
    // setImmediate lets everything that already arrived join the batch.
    this.#draining ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.#drain());
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0 && !this.#closed) {
        const batch = this.#queue.splice(0, this.#o.batchMax);
        await this.#storeBatch(batch);
      }
    } finally {
      this.#draining = undefined;
      if (this.#queue.length > 0 && !this.#closed) {
        this.#draining = this.#drain();
      }
    }
  }

  async #storeBatch(batch: readonly JsMsg[]): Promise<void> {
    const groups = new Map<string, ThreadGroup>();
    for (const m of batch) {
      let record: LogRecord;
      try {
        record = JSON.parse(m.string()) as LogRecord;
        if (typeof record.thread_id !== 'string' || typeof record.event_id !== 'string')
          throw new Error('bad shape');
      } catch (err) {
        // Not something ingest wrote: nothing to store, and it must not block the log.
        this.#o.log.error({ err, subject: m.subject, offset: m.seq }, 'dropping undecodable log message');
        m.term();
        continue;
      }
      let g = groups.get(record.thread_id);
      if (!g) {
        g = { msgs: [], events: [] };
        groups.set(record.thread_id, g);
      }
      g.msgs.push(m);
      g.events.push({ record, offset: m.seq });
    }
    await Promise.all([...groups].map(([threadId, g]) => this.#storeGroup(threadId, g)));
  }

  async #storeGroup(threadId: string, g: ThreadGroup): Promise<void> {
    const result = await this.#withRetry(threadId, g, async () => {
      const client = await this.#o.pool.connect();
      try {
        const r = await storeThreadBatch(client, threadId, g.events);
        client.release();
        return r;
      } catch (err) {
        client.release(err as Error); // a broken connection must not go back to the pool
        throw err;
      }
    });
    if (result === undefined) return; // closing: leave unacked, JetStream redelivers
    this.storedCount += result.inserted.length;
    this.duplicateCount += g.events.length - result.inserted.length;
    this.#announce(threadId, result);
    for (const m of g.msgs) m.ack();
  }

  async #withRetry(
    threadId: string,
    g: ThreadGroup,
    attempt: () => Promise<ThreadBatchResult>,
  ): Promise<ThreadBatchResult | undefined> {
    for (let n = 0; ; n++) {
      try {
        return await attempt();
      } catch (err) {
        if (this.#closed) return undefined;
        const delay = Math.min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** Math.min(n, 10));
        this.#o.log.warn(
          { err: (err as Error).message, threadId, events: g.events.length, retryInMs: delay },
          'storing a thread batch failed; retrying',
        );
        for (const m of g.msgs) m.working(); // keep JetStream from redelivering meanwhile
        await new Promise((r) => setTimeout(r, delay));
        if (this.#closed) return undefined;
      }
    }
  }

  #announce(threadId: string, r: ThreadBatchResult): void {
    const { nc, subjects, log } = this.#o;
    try {
      if (r.inserted.length > 0) nc.publish(subjects.events(threadId), encodeEvents(r.inserted));
      nc.publish(subjects.receipts(threadId), encodeReceipts(r.receipts));
    } catch (err) {
      // Subscribers repair the hole from Postgres; PERSISTED waiters time out and retry.
      log.warn({ err, threadId }, 'could not announce committed events');
    }
  }

  /** Stops taking messages and waits for the batch in hand to be stored and acked. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#messages?.close().catch(() => undefined);
    await this.#draining;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
