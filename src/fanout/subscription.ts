/**
 * One subscription: `(thread, cursor)` on a connection.
 *
 * It listens to the thread's committed-event feed first, then catches up from Postgres,
 * then goes live. The seam is closed by seq: the cursor is the last seq delivered, an
 * event at or below it is a duplicate and skipped, one above cursor+1 reveals a hole,
 * which is filled from Postgres before anything after it is sent. So the client gets
 * after_seq+1, after_seq+2, ... with no gap and no duplicate, whatever the timing.
 */
import type pg from 'pg';
import { ErrorCode, RunstreamError, toRunstreamError } from '../errors.js';
import { eventJson } from '../event.js';
import type { CommittedEvent } from '../log/announcements.js';
import type { ThreadFeeds } from '../log/thread-feed.js';
import type { Logger } from '../logger.js';
import { headSeq, listEventsAfter } from '../persist/queries.js';
import { errorFrame, eventFrame, liveFrame } from './frames.js';

/** Where a subscription writes its frames; the connection's send queue. */
export interface FrameSink {
  /** Queues a frame; false when the connection is gone. */
  send(frame: string): boolean;
  /** Resolves when the queued bytes fall below the catch-up watermark (or the sink closes). */
  drained(): Promise<void>;
  readonly closed: boolean;
}

export interface SubscriptionOptions {
  readonly id: string;
  readonly threadId: string;
  readonly afterSeq: number;
  readonly sink: FrameSink;
  readonly pool: pg.Pool;
  readonly feeds: ThreadFeeds<CommittedEvent[]>;
  readonly pageSize: number;
  readonly log: Logger;
  /** Called once when the subscription ends, whatever the reason. */
  readonly onClose: (sub: Subscription) => void;
}

/** How many times a hole is looked for in Postgres before the subscription gives up. */
export const GAP_REPAIR_ATTEMPTS = 20;
export const GAP_REPAIR_DELAY_MS = 50;

export class Subscription {
  readonly id: string;
  readonly threadId: string;
  /** Last seq delivered (or skipped): where a client resumes. */
  cursor: number;
  #o: SubscriptionOptions;
  #live = false;
  #repairing = false;
  #closed = false;
  #buffer: CommittedEvent[] = [];
  #unlisten: (() => void) | undefined;

  constructor(o: SubscriptionOptions) {
    this.#o = o;
    this.id = o.id;
    this.threadId = o.threadId;
    this.cursor = o.afterSeq;
  }

  /** Runs catch-up and switches to live; reports failures to the client as an error frame. */
  async start(): Promise<void> {
    try {
      this.#unlisten = await this.#o.feeds.listen(this.threadId, (events) => this.#onLive(events));
      if (this.#closed) return this.close();
      if (this.cursor > 0) {
        const head = await headSeq(this.#o.pool, this.threadId);
        if (this.cursor > head) {
          throw new RunstreamError(
            ErrorCode.CursorAhead,
            `after_seq ${this.cursor} is past the head of thread ${this.threadId} (seq ${head})`,
          );
        }
      }
      this.#repairing = true;
      await this.#catchUp();
      if (this.#closed) return;
      this.#o.sink.send(liveFrame(this.id, this.cursor));
      this.#live = true;
      await this.#drainBuffer();
    } catch (err) {
      this.#fail(err);
    }
  }

  /** Reads Postgres from the cursor until it has nothing more, pacing by the socket. */
  async #catchUp(): Promise<void> {
    const { pool, pageSize, sink } = this.#o;
    for (;;) {
      await sink.drained();
      if (this.#closed || sink.closed) return;
      const page = await listEventsAfter(pool, this.threadId, this.cursor, pageSize);
      for (const e of page) {
        if (e.seq !== this.cursor + 1) {
          throw new RunstreamError(
            ErrorCode.Internal,
            `seq ${this.cursor + 1} of ${this.threadId} is missing`,
          );
        }
        sink.send(eventFrame(this.id, eventJson(e)));
        this.cursor = e.seq;
      }
      if (page.length < pageSize) return;
    }
  }

  #onLive(events: CommittedEvent[]): void {
    if (this.#closed) return;
    if (!this.#live || this.#repairing) {
      for (const e of events) this.#buffer.push(e);
      return;
    }
    for (let i = 0; i < events.length; i++) {
      const e = events[i] as CommittedEvent;
      if (e.seq <= this.cursor) continue;
      if (e.seq !== this.cursor + 1) {
        // A hole: an announcement was lost. Buffer the rest and fill it from Postgres.
        for (let j = i; j < events.length; j++) this.#buffer.push(events[j] as CommittedEvent);
        this.#repairing = true;
        void this.#drainBuffer().catch((err: unknown) => this.#fail(err));
        return;
      }
      if (!this.#o.sink.send(eventFrame(this.id, e.json))) return;
      this.cursor = e.seq;
    }
  }

  /** Sends what arrived during catch-up or a repair, filling holes from Postgres. */
  async #drainBuffer(): Promise<void> {
    this.#repairing = true;
    let attempts = 0;
    while (this.#buffer.length > 0 && !this.#closed) {
      const e = this.#buffer[0] as CommittedEvent;
      if (e.seq <= this.cursor) {
        this.#buffer.shift();
        continue;
      }
      if (e.seq === this.cursor + 1) {
        this.#buffer.shift();
        this.#o.sink.send(eventFrame(this.id, e.json));
        this.cursor = e.seq;
        continue;
      }
      const before = this.cursor;
      await this.#catchUp();
      if (this.cursor === before) {
        if (++attempts > GAP_REPAIR_ATTEMPTS) {
          throw new RunstreamError(
            ErrorCode.Internal,
            `seq ${this.cursor + 1} of thread ${this.threadId} is not in the store; resubscribe after_seq ${this.cursor}`,
          );
        }
        await new Promise((r) => setTimeout(r, GAP_REPAIR_DELAY_MS));
      }
    }
    this.#repairing = false;
  }

  #fail(err: unknown): void {
    if (this.#closed) return;
    const e = toRunstreamError(err);
    if (e.code === ErrorCode.Internal) {
      this.#o.log.error({ err, sub: this.id, threadId: this.threadId }, 'subscription failed');
    }
    this.#o.sink.send(errorFrame(this.id, e.wsCode, e.message, { seq: this.cursor }));
    this.close();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#o.onClose(this);
    this.#buffer = [];
    this.#unlisten?.();
    this.#unlisten = undefined;
  }
}
