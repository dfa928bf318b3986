/**
 * One subscription: `(thread, cursor, filter)`, whatever the transport.
 *
 * It listens to the thread's committed-event feed first, then catches up from Postgres,
 * then goes live. The seam is closed by seq: the cursor is the last seq delivered, an
 * event at or below it is a duplicate and skipped, one above cursor+1 reveals a hole,
 * which is filled from Postgres before anything after it is sent. So the client gets
 * after_seq+1, after_seq+2, ... with no gap and no duplicate, whatever the timing. The
 * one exception is deletion (History): a deleted run's seqs are skipped, never reused.
 *
 * A run subscription ends at the run's end as the `runs` table says it
 * (domain/run-lifecycle.ts): when it passes a terminal event of its run it asks whether
 * that event is the run's end (no later start re-opened it) and only then ends; a run
 * that had ended at or before the cursor ends it at once.
 */
import type pg from 'pg';
import type { LogBounds, StartCursor } from '../../domain/cursor.js';
import { type EventFilter, type FilterableEvent, isFiltered, matches } from '../../domain/filter.js';
import { hasEnded, isTerminal, type RunStatusName } from '../../domain/run-lifecycle.js';
import { ErrorCode, RunstreamError, toRunstreamError } from '../../errors.js';
import type { CommittedEvent } from '../../log/announcements.js';
import type { DeletionNotice } from '../../log/deletion-notices.js';
import type { ThreadFeeds } from '../../log/thread-feed.js';
import type { Logger } from '../../logger.js';
import { type EventText, headSeq, readEventJsonPage, seqAtOffset } from '../../persist/queries.js';
import { getRun } from '../../persist/runs.js';
import { liveDelivery } from './delivery-turns.js';
import type { LiveSubscriptions } from './live-subscriptions.js';
import type { ByteCount } from './send-queue.js';

/**
 * Where a subscription delivers, whatever the transport. {@link QueuedSink} (queued-sink.ts)
 * is the one implementation transports use: a renderer of these into frames, and the
 * core's send queue.
 */
export interface SubscriptionSink {
  /** An event to deliver; `json()` is its client-facing JSON text, serialised once. */
  event(sub: Subscription, e: DeliveredEvent): void;
  /** Catch-up is over at `seq`; live events follow. Called once. */
  live(sub: Subscription, seq: number): void;
  /** A run subscription passed its run's end, at `seq`, with the run's status; the subscription is over. */
  end(sub: Subscription, runId: string, seq: number, status: RunStatusName): void;
  /** The thread (runId undefined) or a run the subscription covers was deleted; the subscription is over. */
  deleted(sub: Subscription, runId: string | undefined): void;
  /** The subscription failed; the cursor (last seq passed) is where a client resumes. */
  error(sub: Subscription, err: RunstreamError): void;
  /** Runs `send`, which delivers several events, so that they go out in one write. */
  sendTogether(send: () => void): void;
  /** Where the subscription starts, its cursor resolved: before any event. Optional. */
  started?(sub: Subscription, cursor: number): void;
  /** The subscription is over (closed, or after its end, deletion or error). Optional. */
  detached?(sub: Subscription): void;
  /** The seq a client of this sink resumes after, when it is not the subscription's cursor. */
  resumeCursor?(sub: Subscription): number;
  /** Resolves when the queued bytes fall below the catch-up watermark (or the sink closes). */
  drained(): Promise<void>;
  /** More is queued than the catch-up watermark: a replay should wait for {@link drained}. */
  readonly backlogged: boolean;
  readonly closed: boolean;
}

/** An event on its way to a client. */
export interface DeliveredEvent extends FilterableEvent {
  readonly seq: number;
  json(): string;
  /** {@link json}'s UTF-8, where the event came as bytes (a live event: log/announcements.ts). */
  readonly bytes?: Buffer;
  /** One object carries this event to all its live subscribers, so its frame can be shared. */
  readonly shared?: true;
  /**
   * A shared event's frame as a transport last built it, and the subscription id it names
   * (ws/frames.ts): kept on the event, not in a WeakMap, whose entries cost a lookup and an
   * insert per event and work for the collector.
   */
  frame?: { readonly subId: string; readonly bytes: Buffer } | undefined;
}

/** What every subscription on a fan-out node reads from, whatever its transport. */
export interface SubscriptionResources {
  /** The extent of a thread's log (its partition's stream). */
  readonly logBounds: (threadId: string) => Promise<LogBounds>;
  readonly pool: pg.Pool;
  readonly feeds: ThreadFeeds<CommittedEvent[]>;
  /**
   * Deletion notices (History): the subscription ends with {@link SubscriptionSink.deleted}
   * when its thread, or the run it covers, is deleted. Listened to before Postgres is
   * read, so a delete committed after the catch-up's reads is always noticed.
   */
  readonly deletions?: ThreadFeeds<DeletionNotice> | undefined;
  readonly pageSize: number;
  /** Bytes of content and metadata one catch-up read holds at most. */
  readonly maxPageBytes: number;
  /**
   * Bytes of live events one subscription holds while it catches up (or repairs a hole)
   * at most. Past them it drops what it holds and reads it from Postgres instead: a
   * subscriber that catches up slowly on a busy thread costs bounded memory.
   */
  readonly maxHeldBytes: number;
  /** What every subscription of the node holds together, as counted against maxHeldBytes. */
  readonly held?: ByteCount | undefined;
  /** Where live subscriptions are listed, to be told their thread's head after a NATS reconnect. */
  readonly live?: LiveSubscriptions | undefined;
  readonly log: Logger;
}

export interface SubscriptionOptions extends SubscriptionResources {
  readonly id: string;
  readonly threadId: string;
  readonly start: StartCursor;
  /** Already scoped to the principal. */
  readonly filter: EventFilter;
  readonly sink: SubscriptionSink;
  /** Called once when the subscription ends, whatever the reason. */
  readonly onClose: (sub: Subscription) => void;
}

/** What a held event counts for beyond its JSON: the object and its strings. */
const HELD_EVENT_OVERHEAD = 256;

/** Pages a catch-up has asked for ahead of the one it writes: the seq each starts after. */
interface PageAhead {
  readonly afterSeq: number;
  readonly page: ReturnType<typeof readEventJsonPage>;
}

/**
 * Pages read ahead of the one being written, unfiltered. One was not enough: catch-up waited
 * on the next page's read most of the time (a page's read takes ~4x its writing).
 */
const READ_AHEAD = 2;

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
  /** Live events are held in #buffer meanwhile: a catch-up, a hole's repair, a run-end check. */
  #repairing = false;
  /** A run-end check under way: catch-up and the buffer's drain wait for it before the next event. */
  #checkingEnd: Promise<void> | undefined;
  /** A catch-up from Postgres is running (it drains nothing; its caller does). */
  #catchingUp = false;
  /** {@link #drainBuffer} is running (another call is then a no-op: the running one takes what is added). */
  #draining = false;
  /** A resync came while catch-up or a repair ran: look again once it is over. */
  #resyncPending = false;
  #closed = false;
  #buffer: CommittedEvent[] = [];
  /** Bytes {@link #buffer} holds, as {@link SubscriptionResources.maxHeldBytes} counts them. */
  #heldBytes = 0;
  /** Live events were dropped past {@link SubscriptionResources.maxHeldBytes}: Postgres has them. */
  #overflowed = false;
  /** Live announcements waiting for this subscription's turn in {@link liveDelivery}. */
  #pending: CommittedEvent[][] = [];
  readonly #filtered: boolean;
  /**
   * `from_offset` K with no stored event at or after K yet: the subscription starts at the
   * head, and events stored later below K (the persister was behind) are passed, not
   * delivered, until the first at or after it (a thread's offsets grow with its seqs).
   */
  #minOffset: number | undefined;
  #unlisten: (() => void) | undefined;
  #unlistenDeletions: (() => void) | undefined;

  constructor(o: SubscriptionOptions) {
    this.#o = o;
    this.id = o.id;
    this.threadId = o.threadId;
    this.cursor = o.start.kind === 'after_seq' ? o.start.seq : 0;
    this.#filtered = isFiltered(o.filter);
  }

  get closed(): boolean {
    return this.#closed;
  }

  get filter(): EventFilter {
    return this.#o.filter;
  }

  /** Where a client resumes: the last seq it has been sent (or that a filter skipped). */
  get resumeCursor(): number {
    return this.#o.sink.resumeCursor?.(this) ?? this.cursor;
  }

  /** Sets the cursor from the start option; throws a client error for an impossible one. */
  async #resolveStart(): Promise<void> {
    const { pool, start } = this.#o;
    if (start.kind === 'live') {
      this.cursor = await headSeq(pool, this.threadId);
      return;
    }
    if (start.kind === 'from_offset') {
      const bounds = await this.#o.logBounds(this.threadId);
      if (start.offset < bounds.first) {
        throw new RunstreamError(
          ErrorCode.OffsetExpired,
          `offset ${start.offset} is no longer in the log (it now starts at ${bounds.first}); ` +
            'resubscribe with after_seq, which reaches all of history',
        );
      }
      if (start.offset > bounds.last + 1) {
        throw new RunstreamError(
          ErrorCode.CursorAhead,
          `offset ${start.offset} is past the end of the log (${bounds.last})`,
        );
      }
      // The head first: an event at or after K stored after it has a seq above it, so it is
      // either found below or read by catch-up. Read after, the head could include such an
      // event that the look for K did not see, and skip it.
      const head = await headSeq(pool, this.threadId);
      const seq = await seqAtOffset(pool, this.threadId, start.offset);
      if (seq === undefined) {
        this.cursor = head;
        this.#minOffset = start.offset;
      } else this.cursor = seq - 1;
      return;
    }
    if (this.cursor > 0) {
      const head = await headSeq(pool, this.threadId);
      if (this.cursor > head) {
        throw new RunstreamError(
          ErrorCode.CursorAhead,
          `after_seq ${this.cursor} is past the head of thread ${this.threadId} (seq ${head})`,
        );
      }
    }
  }

  /** Runs catch-up and switches to live; reports failures to the client as an error. Never rejects. */
  async start(): Promise<void> {
    try {
      const unlisten = await this.#o.feeds.listen(this.threadId, (events) => this.#onLive(events));
      // Closed while the feed was registering: close() found nothing to remove, so remove it here.
      if (this.#closed) return unlisten();
      this.#unlisten = unlisten;
      if (this.#o.deletions) {
        const unlistenDeletions = await this.#o.deletions.listen(this.threadId, (n) =>
          this.deleted(n.run_id),
        );
        if (this.#closed) return unlistenDeletions();
        this.#unlistenDeletions = unlistenDeletions;
      }
      // Resumed at or past the run's end: it has ended for this subscription, whatever
      // stragglers of the run came after its end (and even past the head: the run's end
      // is the answer, not a bad cursor).
      if (this.#o.start.kind === 'after_seq' && (await this.#endedByCursor())) return;
      await this.#resolveStart();
      if (this.#closed) return;
      this.#o.sink.started?.(this, this.cursor);
      if (this.#o.start.kind !== 'after_seq' && (await this.#endedByCursor())) return;
      this.#repairing = true;
      await this.#catchUp();
      // Live events came faster than catch-up took them: read on from the store until it keeps up.
      while (this.#overflowed && !this.#closed) {
        this.#overflowed = false;
        await this.#catchUp();
      }
      if (this.#closed) return;
      // The run may have ended during catch-up, at an event catch-up read before its end was stored.
      if (await this.#endedByCursor()) return;
      this.#o.sink.live(this, this.cursor);
      this.#live = true;
      this.#o.live?.add(this);
      await this.#drainBuffer();
    } catch (err) {
      this.#fail(err);
    }
  }

  /** A run subscription whose run has ended at or before the cursor ends there (true). */
  async #endedByCursor(): Promise<boolean> {
    const runId = this.#o.filter.runId;
    if (runId === undefined) return false;
    // A user-scoped subscription sees the run only if it is the user's, as History does.
    const run = await getRun(this.#o.pool, this.threadId, runId, this.#o.filter.userId);
    if (this.#closed) return true;
    if (!run || !hasEnded(run.status) || run.end_seq === null || run.end_seq > this.cursor) return false;
    this.#o.sink.end(this, runId, run.end_seq, run.status);
    this.close();
    return true;
  }

  /** Resolves once no run-end check is under way (one starts when the run's terminal event goes by). */
  async endChecked(): Promise<void> {
    while (this.#checkingEnd) await this.#checkingEnd;
  }

  /**
   * NATS may have lost announcements (a reconnect): the thread's head is `head`. Behind it,
   * the subscription catches up from Postgres as it does for a hole.
   */
  resync(head: number): void {
    if (this.#closed) return;
    if (!this.#live || this.#repairing) {
      this.#resyncPending = true;
      return;
    }
    if (head > this.cursor) this.#repair();
  }

  #repair(): void {
    this.#repairing = true;
    void (async () => {
      await this.#catchUp();
      await this.#drainBuffer();
    })().catch((err: unknown) => this.#fail(err));
  }

  /**
   * Reads Postgres from the cursor until it has nothing more, pacing by the socket, and
   * ends at the head read first: everything up to it has been passed, delivered or
   * skipped. A filtered read returns only matching rows, so it is also bounded by it.
   */
  async #catchUp(): Promise<void> {
    this.#catchingUp = true;
    try {
      await this.#readPages();
    } finally {
      this.#catchingUp = false;
    }
  }

  async #readPages(): Promise<void> {
    const { pool, pageSize, sink, filter } = this.#o;
    // Read first: every seq up to the head is committed, so what the reads below do not
    // return of it was filtered out or deleted, and the cursor passes it. (A hole a deleted
    // run left, even at the tail, so never stalls a catch-up or a gap repair.)
    const head = await headSeq(pool, this.threadId);
    const upto = this.#filtered ? head : undefined;
    const read = (afterSeq: number) =>
      readEventJsonPage(pool, {
        threadId: this.threadId,
        afterSeq,
        uptoSeq: upto,
        filter,
        withTerminal: true,
        limit: pageSize,
        maxBytes: this.#o.maxPageBytes,
      });
    const readAt = (afterSeq: number): PageAhead => {
      const page = read(afterSeq);
      page.catch(() => undefined); // awaited when its turn comes, or dropped
      return { afterSeq, page };
    };
    // The pages after this one are read while it is written (dropped if the subscription
    // ends). Unfiltered, a thread's seqs are gap-free but where a run was deleted, so the
    // page after next most likely spans as many seqs as this one did (`pageSize`, or fewer
    // where the byte budget cut it): it is read too, and kept only if the page before it did
    // end where it starts.
    const depth = this.#filtered ? 1 : READ_AHEAD;
    let ahead: PageAhead[] = [readAt(this.cursor)];
    for (;;) {
      await sink.drained();
      if (this.#closed || sink.closed) return;
      const current = ahead.shift() as PageAhead;
      const { events: page, truncated } = await current.page;
      if (this.#closed || sink.closed) return; // no more reads for a subscription that has gone
      // A page cut at its byte budget is not the end either.
      const full = page.length === pageSize || truncated;
      if (full) {
        const last = (page[page.length - 1] as EventText).seq;
        const stride = last - current.afterSeq;
        if (ahead[0]?.afterSeq !== last) ahead = [readAt(last)];
        while (ahead.length < depth) ahead.push(readAt((ahead.at(-1) as PageAhead).afterSeq + stride));
      }
      let i = 0;
      // Events go out in runs written together (one socket write per run), until the
      // client's buffer is full or a run-end check starts; then the run waits. A run sends
      // at least one event.
      const sendRun = (): void => {
        const first = i;
        while (
          i < page.length &&
          !this.#closed &&
          this.#checkingEnd === undefined &&
          (i === first || !sink.backlogged)
        ) {
          const e = page[i++] as EventText;
          // No contiguity check: deleting a run leaves a hole, and Postgres order is the truth.
          this.#pass(e);
        }
      };
      while (i < page.length) {
        if (this.#checkingEnd) await this.#checkingEnd;
        if (sink.backlogged) await sink.drained();
        if (this.#closed || sink.closed) return;
        sink.sendTogether(sendRun);
        if (this.#closed) return;
      }
      if (this.#checkingEnd) await this.#checkingEnd;
      if (this.#closed) return;
      if (!full) {
        if (head > this.cursor) this.cursor = head;
        return;
      }
    }
  }

  /** Moves the cursor over one event: delivers it if it matches; at its run's terminal event, checks for the end. */
  #pass(e: DeliveredEvent): void {
    const { filter, sink } = this.#o;
    if (this.#minOffset !== undefined && offsetOf(e) >= this.#minOffset) this.#minOffset = undefined;
    if (this.#minOffset === undefined && matches(filter, e)) sink.event(this, e);
    this.cursor = e.seq;
    if (filter.runId !== undefined && e.run_id === filter.runId && isTerminal(e.category, e.event_type)) {
      this.#checkEnd(filter.runId, e.seq);
    }
  }

  /**
   * A terminal event of the run went by: the run has ended there unless a later start
   * re-opened it, which the `runs` table knows. Live events are held meanwhile.
   */
  #checkEnd(runId: string, seq: number): void {
    this.#repairing = true;
    this.#checkingEnd = (async () => {
      try {
        const run = await getRun(this.#o.pool, this.threadId, runId, this.#o.filter.userId);
        if (this.#closed) return;
        if (run && hasEnded(run.status) && run.end_seq === seq) {
          this.#o.sink.end(this, runId, seq, run.status);
          this.close();
          return;
        }
      } catch (err) {
        this.#fail(err);
        return;
      } finally {
        this.#checkingEnd = undefined;
      }
      // Not the end: what arrived meanwhile goes out (a catch-up's caller does that itself).
      if (!this.#catchingUp) await this.#drainBuffer().catch((err: unknown) => this.#fail(err));
    })();
  }

  /**
   * An announcement: held while a catch-up, a repair or a run-end check runs, else queued
   * for delivery in a later turn ({@link liveDelivery}), so one announcement to many
   * subscribers never holds the event loop; announcements keep their order.
   */
  #onLive(events: CommittedEvent[]): void {
    if (this.#closed) return;
    if (!this.#live || this.#repairing) {
      for (const e of events) this.#hold(e);
      return;
    }
    this.#pending.push(events);
    if (this.#pending.length === 1) liveDelivery.queue(this.#deliverPending);
  }

  readonly #deliverPending = (): void => {
    const announcements = this.#pending;
    if (announcements.length === 0) return;
    this.#pending = [];
    try {
      this.#o.sink.sendTogether(() => this.#deliver(announcements));
    } catch (err) {
      this.#fail(err);
    }
  };

  #deliver(announcements: CommittedEvent[][]): void {
    for (let a = 0; a < announcements.length; a++) {
      const events = announcements[a] as CommittedEvent[];
      for (let i = 0; i < events.length; i++) {
        const e = events[i] as CommittedEvent;
        if (e.seq <= this.cursor) continue;
        if (e.seq !== this.cursor + 1 || this.#repairing) {
          // A hole (an announcement was lost), or a run-end check began: hold the rest.
          for (let j = i; j < events.length; j++) this.#hold(events[j] as CommittedEvent);
          for (const later of announcements.slice(a + 1)) for (const l of later) this.#hold(l);
          if (!this.#repairing) {
            this.#repairing = true;
            void this.#drainBuffer().catch((err: unknown) => this.#fail(err));
          }
          return;
        }
        if (this.#o.sink.closed) return;
        this.#pass(e);
        if (this.#closed) return;
      }
    }
  }

  /**
   * Sends what arrived during catch-up, a repair or a run-end check, filling holes from
   * Postgres; then live events flow again.
   */
  async #drainBuffer(): Promise<void> {
    if (this.#draining) return;
    this.#draining = true;
    this.#repairing = true;
    let attempts = 0;
    try {
      for (;;) {
        if (this.#closed) return;
        if (this.#checkingEnd) {
          await this.#checkingEnd;
          continue;
        }
        const e = this.#buffer[0];
        if (e === undefined) {
          if (!this.#overflowed) break;
          // What was dropped is read from the store, up to its head now.
          this.#overflowed = false;
          await this.#catchUp();
          continue;
        }
        if (e.seq <= this.cursor) {
          this.#unhold();
          continue;
        }
        if (e.seq === this.cursor + 1) {
          this.#unhold();
          this.#pass(e);
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
    } finally {
      this.#draining = false;
    }
    this.#repairing = false;
    if (this.#resyncPending) {
      this.#resyncPending = false;
      this.#repair(); // reads the head itself; nothing to send if there is nothing new
    }
  }

  /** Holds a live event until catch-up or a repair is over, within {@link SubscriptionResources.maxHeldBytes}. */
  #hold(e: CommittedEvent): void {
    if (this.#overflowed) return;
    const bytes = e.bytes.length + HELD_EVENT_OVERHEAD;
    if (this.#heldBytes + bytes > this.#o.maxHeldBytes) {
      this.#dropHeld();
      this.#overflowed = true;
      return;
    }
    this.#heldBytes += bytes;
    if (this.#o.held) this.#o.held.bytes += bytes;
    // Its own bytes: a view of its announcement would keep more alive than it counts.
    this.#buffer.push(e.owned());
  }

  #unhold(): void {
    const e = this.#buffer.shift();
    if (e === undefined) return;
    const bytes = e.bytes.length + HELD_EVENT_OVERHEAD;
    this.#heldBytes -= bytes;
    if (this.#o.held) this.#o.held.bytes -= bytes;
  }

  #dropHeld(): void {
    if (this.#o.held) this.#o.held.bytes -= this.#heldBytes;
    this.#buffer = [];
    this.#heldBytes = 0;
  }

  #fail(err: unknown): void {
    if (this.#closed) return;
    const e = toRunstreamError(err);
    if (e.code === ErrorCode.Internal) {
      this.#o.log.error({ err, sub: this.id, threadId: this.threadId }, 'subscription failed');
    }
    try {
      this.#o.sink.error(this, e);
    } catch (again) {
      this.#o.log.error({ err: again, sub: this.id }, 'could not report a subscription failure');
    }
    this.close();
  }

  /**
   * The thread, or one of its runs, was deleted. A subscription to the thread or to that
   * run is told and ends; one scoped to another run goes on.
   */
  deleted(runId: string | undefined): void {
    if (this.#closed) return;
    const scope = this.#o.filter.runId;
    if (runId !== undefined && scope !== undefined && scope !== runId) return;
    // What was announced before the deletion is still delivered before it.
    this.#deliverPending();
    if (this.#closed) return;
    this.#o.sink.deleted(this, runId);
    this.close();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#o.live?.delete(this);
    this.#o.onClose(this);
    this.#dropHeld();
    this.#pending = [];
    this.#unlisten?.();
    this.#unlisten = undefined;
    this.#unlistenDeletions?.();
    this.#unlistenDeletions = undefined;
    this.#o.sink.detached?.(this);
  }
}

/** Long enough for `{"seq":N,"offset":M,` with both numbers at their largest. */
const OFFSET_PREFIX_CHARS = 64;
const OFFSET_PREFIX = /^\{"seq":\d+,"offset":(\d+),/;

/**
 * An event's log offset, from the start of its JSON text: live (domain/event.ts eventJson) and
 * read from Postgres (persist/queries.ts) alike begin `{"seq":N,"offset":M,`. Read only while a
 * `from_offset` start waits for its first event; an event it cannot read is delivered.
 */
function offsetOf(e: DeliveredEvent): number {
  const head = e.bytes
    ? e.bytes.toString('latin1', 0, OFFSET_PREFIX_CHARS)
    : e.json().slice(0, OFFSET_PREFIX_CHARS);
  const m = OFFSET_PREFIX.exec(head);
  return m ? Number(m[1]) : Number.POSITIVE_INFINITY;
}
