/**
 * PERSISTED acks: waits until Postgres has committed each event of a request.
 *
 * Interest in the threads' commit receipts is registered *before* the events are
 * published, so no receipt can be missed. An event JetStream reports as a duplicate may
 * have been committed long ago (no receipt will come), so those are looked up in
 * Postgres, again after the listener is in place: each is found there or announced later.
 *
 * Receipts are core NATS messages and can be lost while a connection moves to another
 * server: the persister's (it publishes into a dead socket) or this node's (in a cluster
 * the server it moved to tells the others of its subscriptions a moment later, so a
 * receipt published on another server meanwhile reaches nobody; and a peer's resync sent
 * while this node is between servers is lost too). So besides the lookup at each resync,
 * every request still waiting {@link DEFAULT_RECHECK_AFTER_MS} after it began looks its
 * events up in Postgres, then again at growing intervals: a lost receipt costs a few
 * seconds, never the whole ack timeout.
 *
 * A duplicate not in Postgres yet may have no receipt coming at all: the persister publishes
 * receipts only for log messages of PERSISTED requests (log/log-batch.ts), and the original
 * of a PERSISTED retry may have been an ACCEPTED attempt. Such a request is looked up from
 * the next sweep ({@link RECHECK_SWEEP_MS}) on, at growing intervals, instead of after
 * {@link DEFAULT_RECHECK_AFTER_MS}.
 */

import type pg from 'pg';
import type { LogRecord } from '../domain/event.js';
import { ErrorCode, RunstreamError } from '../errors.js';
import type { EventAck } from '../gen/runstream/v1/EventAck.js';
import type { LogAck } from '../log/publisher.js';
import type { ThreadFeeds } from '../log/thread-feed.js';
import type { Logger } from '../logger.js';
import { deletionHorizons, type RunKey } from '../persist/deletions.js';
import { type EventKey, findEvents } from '../persist/queries.js';
import type { Receipt } from '../persist/seq-assigner.js';

/**
 * The requests waiting on one event_id: the request itself, or a set of them when the same
 * event is in flight in several (a retry while the first attempt waits). One request is the
 * rule, and a set per event was an allocation and two hash operations per event.
 */
type Waiting = PendingPersist | Set<PendingPersist>;

/** Calls `f` for each request of `waiting`. */
function eachWaiting(waiting: Waiting | undefined, f: (p: PendingPersist) => void): void {
  if (waiting === undefined) return;
  if (waiting instanceof PendingPersist) f(waiting);
  else for (const p of waiting) f(p);
}

/** The requests waiting on one thread's receipts, by event_id; one feed listener for all. */
interface ThreadWaiters {
  readonly byEvent: Map<string, Waiting>;
  readonly listening: Promise<() => void>;
  /** Whether `listening` has resolved: a request then has nothing to wait for before publishing. */
  ready: boolean;
  refs: number;
  /** Since when (performance.now()) no request has waited on the thread, while it lingers. */
  idleSince: number | undefined;
}

/** A request waiting this long for its receipts looks its events up in Postgres. */
export const DEFAULT_RECHECK_AFTER_MS = 2_000;
/** The longest pause between two lookups of one waiting request. */
const MAX_RECHECK_PAUSE_MS = 5_000;
/** How often the waiting requests are looked over for one due a lookup. */
const RECHECK_SWEEP_MS = 500;

export interface PersistWaiterOptions {
  /** See {@link DEFAULT_RECHECK_AFTER_MS}. */
  readonly recheckAfterMs?: number;
  /**
   * How long a thread's receipt listener outlives the last request waiting on it (default 0:
   * it is let go at once). A thread publishing request after request then finds its listener
   * in place: one event per request at token rates otherwise added a listener, its promises
   * and its removal for nearly every request. Let go by the next sweep past it.
   */
  readonly lingerMs?: number;
  readonly log?: Logger;
  /**
   * Of `threadIds`, those whose deletion horizons count in the log as it is now (leases.ts:
   * logsTakenUp). A stream made again numbers from 1 and its persister clears the old horizons
   * when it takes the partition; until then an event's new offset says nothing against them.
   * Without it, every horizon is taken as current.
   */
  readonly horizonsCurrent?: (threadIds: readonly string[]) => Promise<ReadonlySet<string>>;
}

/** A request's time limit in a {@link Deadlines} queue; `fire` is cleared once it is settled. */
interface Deadline {
  readonly atMs: number;
  fire: (() => void) | undefined;
}

/**
 * The time limits of the waiting requests, all of one length, on one timer. A timer per
 * request (5,000 a second at one event per request) cost an allocation, a timer-list
 * insert and a clear each; limits of one length expire in the order they were set, so a
 * FIFO with a timer for its oldest live entry fires each at the same moment.
 */
class Deadlines {
  #entries: Deadline[] = [];
  #head = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(private readonly ms: number) {}

  /** `fire` runs `ms` from now unless {@link cancel} is called first. */
  add(fire: () => void): Deadline {
    const d: Deadline = { atMs: performance.now() + this.ms, fire };
    this.#entries.push(d);
    if (this.#timer === undefined) this.#arm(this.ms);
    return d;
  }

  cancel(d: Deadline): void {
    d.fire = undefined;
    // Requests mostly finish in the order they came: drop the settled ones at the front.
    while (this.#head < this.#entries.length && (this.#entries[this.#head] as Deadline).fire === undefined) {
      this.#head++;
    }
    this.#compact();
    if (this.#head === this.#entries.length) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
  }

  #arm(delayMs: number): void {
    // The request itself keeps the process alive; its limit need not.
    this.#timer = setTimeout(this.#expire, Math.max(0, delayMs));
    this.#timer.unref();
  }

  readonly #expire = (): void => {
    this.#timer = undefined;
    const now = performance.now();
    while (this.#head < this.#entries.length) {
      const d = this.#entries[this.#head] as Deadline;
      if (d.fire !== undefined && d.atMs > now) break;
      this.#head++;
      const fire = d.fire;
      d.fire = undefined;
      fire?.();
    }
    this.#compact();
    const next = this.#entries[this.#head];
    if (next !== undefined && this.#timer === undefined) this.#arm(next.atMs - now);
  };

  #compact(): void {
    if (this.#head === this.#entries.length) {
      this.#entries = [];
      this.#head = 0;
    } else if (this.#head > 1024 && this.#head * 2 > this.#entries.length) {
      this.#entries = this.#entries.slice(this.#head);
      this.#head = 0;
    }
  }
}

export class PersistWaiter {
  readonly #threads = new Map<string, ThreadWaiters>();
  readonly #recheckAfterMs: number;
  #sweeper: NodeJS.Timeout | undefined;
  #sweeping = false;
  readonly #deadlines: Deadlines;

  constructor(
    private readonly feeds: ThreadFeeds<Receipt[]>,
    private readonly pool: pg.Pool,
    private readonly timeoutMs: number,
    private readonly options: PersistWaiterOptions = {},
  ) {
    this.#recheckAfterMs = options.recheckAfterMs ?? DEFAULT_RECHECK_AFTER_MS;
    this.#deadlines = new Deadlines(timeoutMs);
  }

  /**
   * Starts listening for the records' receipts; call before publishing them. A thread's
   * receipts are matched to its waiting requests by event_id, once per receipt however
   * many requests wait (a listener per request cost requests × receipts under backlog).
   */
  async prepare(records: readonly LogRecord[]): Promise<PendingPersist> {
    const pending = new PendingPersist(records, this.pool, this.timeoutMs, this.#deadlines);
    this.#sweeper ??= setInterval(() => void this.#sweep(), RECHECK_SWEEP_MS).unref();
    let unready: Promise<unknown>[] | undefined;
    for (const [threadId, eventIds] of pending.eventIds) {
      const w = this.#threads.get(threadId) ?? this.#listen(threadId);
      w.refs++;
      w.idleSince = undefined;
      for (const id of eventIds) {
        const waiting = w.byEvent.get(id);
        if (waiting === undefined) w.byEvent.set(id, pending);
        else if (waiting instanceof PendingPersist) w.byEvent.set(id, new Set([waiting, pending]));
        else waiting.add(pending);
      }
      if (!w.ready) {
        unready ??= [];
        unready.push(w.listening);
      }
      pending.unlisteners.push(() => this.#release(threadId, w, eventIds, pending));
    }
    // A thread listened to already (the rule: its subscription lingers) costs no wait.
    if (unready !== undefined) {
      try {
        await Promise.all(unready);
      } catch (err) {
        pending.dispose();
        throw err;
      }
    }
    return pending;
  }

  #listen(threadId: string): ThreadWaiters {
    const byEvent = new Map<string, Waiting>();
    const listening = this.feeds.listen(threadId, (receipts) => {
      for (const r of receipts) {
        const waiting = byEvent.get(r.event_id);
        if (waiting === undefined) continue;
        if (waiting instanceof PendingPersist) waiting.onReceipt(threadId, r);
        else for (const p of waiting) p.onReceipt(threadId, r);
      }
    });
    const w: ThreadWaiters = { byEvent, listening, ready: false, refs: 0, idleSince: undefined };
    this.#threads.set(threadId, w);
    listening.then(
      () => {
        w.ready = true;
      },
      () => {
        if (this.#threads.get(threadId) === w) this.#threads.delete(threadId);
      },
    );
    return w;
  }

  #release(threadId: string, w: ThreadWaiters, eventIds: readonly string[], pending: PendingPersist): void {
    for (const id of eventIds) {
      const waiting = w.byEvent.get(id);
      if (waiting === undefined) continue;
      if (waiting === pending) w.byEvent.delete(id);
      else if (waiting instanceof Set) {
        waiting.delete(pending);
        if (waiting.size === 0) w.byEvent.delete(id);
      }
    }
    if (--w.refs > 0) return;
    if ((this.options.lingerMs ?? 0) > 0) w.idleSince = performance.now();
    else this.#drop(threadId, w);
  }

  #drop(threadId: string, w: ThreadWaiters): void {
    if (this.#threads.get(threadId) === w) this.#threads.delete(threadId);
    void w.listening.then(
      (unlisten) => unlisten(),
      () => undefined,
    );
  }

  /** Threads with requests waiting on their receipts (not those only lingering); a pass over all. */
  get size(): number {
    let n = 0;
    for (const w of this.#threads.values()) if (w.refs > 0) n++;
    return n;
  }

  /**
   * Receipts may have been lost (NATS reconnected): looks every waiting event up in
   * Postgres, and answers those committed meanwhile as their receipt would have.
   */
  async recheck(): Promise<void> {
    await this.#lookUp(() => true);
  }

  /** Looks up the events of the requests that have waited long enough (see the file comment). */
  async #sweep(): Promise<void> {
    const idleBefore = performance.now() - (this.options.lingerMs ?? 0);
    for (const [threadId, w] of this.#threads) {
      if (w.refs === 0 && w.idleSince !== undefined && w.idleSince <= idleBefore) this.#drop(threadId, w);
    }
    if (this.#threads.size === 0) {
      clearInterval(this.#sweeper);
      this.#sweeper = undefined;
      return;
    }
    if (this.#sweeping) return;
    this.#sweeping = true;
    const now = Date.now();
    const due = new Set<PendingPersist>();
    try {
      await this.#lookUp((p) => due.has(p) || (p.takeRecheck(now, this.#recheckAfterMs) && !!due.add(p)));
    } catch (err) {
      this.options.log?.warn(
        { err: (err as Error).message },
        'could not look up PERSISTED events that waited long for their receipts',
      );
    } finally {
      this.#sweeping = false;
    }
  }

  /**
   * Looks up in Postgres the waiting events of the requests `wanted` picks, of all threads at
   * once (findEvents: a statement per thousand); answers those found.
   */
  async #lookUp(wanted: (p: PendingPersist) => boolean): Promise<void> {
    const keys: EventKey[] = [];
    for (const [thread_id, w] of this.#threads) {
      if (w.refs === 0) continue; // lingering: nothing waits
      for (const [event_id, waiting] of w.byEvent) {
        if (waiting instanceof PendingPersist ? wanted(waiting) : [...waiting].some(wanted)) {
          keys.push({ thread_id, event_id });
        }
      }
    }
    if (keys.length === 0) return;
    const found = await findEvents(this.pool, keys);
    for (const f of found) {
      // Whoever waits on the event now: it is committed, whether or not they were picked.
      eachWaiting(this.#threads.get(f.thread_id)?.byEvent.get(f.event_id), (p) =>
        p.onReceipt(f.thread_id, f),
      );
    }
    if (found.length < keys.length) await this.#lookUpDropped(keys);
  }

  /**
   * Answers seq 0 to the events still waiting among `keys` whose message is at or below its
   * thread's (run's) deletion horizon: the persister drops such a message, or a delete removed
   * it from the log before the persister read it, and then no receipt ever comes for it.
   */
  async #lookUpDropped(keys: readonly EventKey[]): Promise<void> {
    const places: { thread_id: string; event_id: string; p: PendingPersist; offset: number }[] = [];
    const runs: RunKey[] = [];
    for (const { thread_id, event_id } of keys) {
      eachWaiting(this.#threads.get(thread_id)?.byEvent.get(event_id), (p) => {
        const place = p.logPlace(thread_id, event_id);
        if (place === undefined) return;
        places.push({ thread_id, event_id, p, offset: place.offset });
        runs.push({ thread_id, run_id: place.run_id });
      });
    }
    if (runs.length === 0) return;
    const [horizons, current] = await Promise.all([
      deletionHorizons(this.pool, runs),
      this.options.horizonsCurrent?.([...new Set(runs.map((r) => r.thread_id))]),
    ]);
    places.forEach(({ thread_id, event_id, p, offset }, i) => {
      if (current && !current.has(thread_id)) return;
      if (offset <= (horizons[i] as number)) p.onReceipt(thread_id, { event_id, seq: 0, offset });
    });
  }
}

export class PendingPersist implements Disposable {
  readonly unlisteners: (() => void)[] = [];
  /**
   * thread \0 event_id → indexes of the request's events with that id; none for a request of
   * one event (one event per request is the rule at token rates), which its receipt matches
   * by comparison, without a key string per event and per receipt.
   */
  readonly #waiting: Map<string, number[]> | undefined;
  readonly #receipts: (Receipt | undefined)[];
  /** The request's distinct event_ids, by thread. */
  readonly eventIds: Map<string, string[]>;
  /** Indexes of events whose event_id came earlier in the request; made at the first. */
  #repeats: Set<number> | undefined;
  #missing: number;
  #done: (() => void) | undefined;
  readonly #since = Date.now();
  #checkAt = 0;
  /**
   * A duplicate was not in Postgres yet: its original may be a message no one asked receipts
   * for (an ACCEPTED first attempt, log-batch.ts), so no receipt may ever come for it.
   */
  #unannounced = false;
  /** The log's acks, once known: a receipt of no stored event must be of this request's message. */
  #acks: readonly LogAck[] | undefined;
  /** Receipts of no stored event that came before the acks, by the index of their event. */
  #unmatched: Map<number, [threadId: string, receipt: Receipt]> | undefined;

  constructor(
    private readonly records: readonly LogRecord[],
    private readonly pool: pg.Pool,
    private readonly timeoutMs: number,
    private readonly deadlines: Deadlines,
  ) {
    this.#receipts = new Array(records.length);
    this.#missing = records.length;
    if (records.length === 1) {
      const r = records[0] as LogRecord;
      this.eventIds = new Map([[r.thread_id, [r.event_id]]]);
      this.#waiting = undefined;
      return;
    }
    const waiting = new Map<string, number[]>();
    const eventIds = new Map<string, string[]>();
    records.forEach((r, i) => {
      const key = `${r.thread_id}\0${r.event_id}`;
      const list = waiting.get(key);
      if (list) {
        list.push(i);
        this.#repeats ??= new Set();
        this.#repeats.add(i);
        return;
      }
      waiting.set(key, [i]);
      const ids = eventIds.get(r.thread_id);
      if (ids) ids.push(r.event_id);
      else eventIds.set(r.thread_id, [r.event_id]);
    });
    this.#waiting = waiting;
    this.eventIds = eventIds;
  }

  /**
   * Whether the request has waited long enough for a lookup in Postgres (and then not
   * again until a pause as long as it has waited, up to a cap); if so, counts it as done.
   */
  takeRecheck(now: number, afterMs: number): boolean {
    const waited = now - this.#since;
    if (this.#missing === 0 || now < this.#checkAt) return false;
    // A duplicate that may get no receipt is looked up from the next sweep on, not after afterMs.
    if (waited < afterMs && !this.#unannounced) return false;
    this.#checkAt = now + Math.min(waited, MAX_RECHECK_PAUSE_MS);
    return true;
  }

  /**
   * Where the request's event `eventId` of `threadId` went in the log, if it still waits and
   * the log's acks are known: its run's subject and the offset.
   */
  logPlace(threadId: string, eventId: string): { run_id: string; offset: number } | undefined {
    const acks = this.#acks;
    if (acks === undefined || this.#missing === 0) return undefined;
    let index: number | undefined;
    if (this.#waiting === undefined) {
      const only = this.records[0] as LogRecord;
      if (only.thread_id === threadId && only.event_id === eventId) index = 0;
    } else {
      index = this.#waiting.get(`${threadId}\0${eventId}`)?.[0];
    }
    if (index === undefined) return undefined;
    return { run_id: (this.records[index] as LogRecord).run_id, offset: (acks[index] as LogAck).seq };
  }

  onReceipt(threadId: string, r: Receipt): void {
    this.#resolve(threadId, r);
  }

  /**
   * Whether a receipt answers the event at `index`. One of an event dropped as deleted (seq 0,
   * not rejected) does only if it is of the message the request wrote or found (its offset):
   * an event_id can be published again once its thread is deleted, and a persister still
   * behind then drops the deleted original, whose receipt is not this request's answer; the
   * new message's comes after it. Before the acks are known, such a receipt waits for them.
   * A refusal answers whatever its offset: the store refuses the event's content, and a
   * lookup finds its dead letter at the offset of the first message refused.
   */
  #answers(index: number, threadId: string, r: Receipt): boolean {
    if (r.seq !== 0 || r.rejected !== undefined) return true;
    if (this.#acks !== undefined) return (this.#acks[index] as LogAck).seq === r.offset;
    this.#unmatched ??= new Map();
    this.#unmatched.set(index, [threadId, r]);
    return false;
  }

  /** The acks are known: the receipts of no stored event held back answer now, if they are this request's. */
  #setAcks(acks: readonly LogAck[]): void {
    this.#acks = acks;
    const unmatched = this.#unmatched;
    if (unmatched === undefined) return;
    this.#unmatched = undefined;
    for (const [threadId, r] of unmatched.values()) this.#resolve(threadId, r);
  }

  #resolve(threadId: string, r: Receipt): void {
    if (this.#waiting === undefined) {
      // One event: the first receipt of it settles the request, as a key's first does below.
      const only = this.records[0] as LogRecord;
      if (this.#missing === 0 || r.event_id !== only.event_id || threadId !== only.thread_id) return;
      if (!this.#answers(0, threadId, r)) return;
      this.#receipts[0] = r;
      this.#missing = 0;
      this.#done?.();
      return;
    }
    const key = `${threadId}\0${r.event_id}`;
    const indexes = this.#waiting.get(key);
    if (!indexes || !this.#answers(indexes[0] as number, threadId, r)) return;
    this.#waiting.delete(key);
    for (const i of indexes) this.#receipts[i] = r;
    this.#missing -= indexes.length;
    if (this.#missing === 0) this.#done?.();
  }

  /**
   * Resolves with one ack per record once all are committed, or fails after the timeout,
   * which counts from here: `logAcks` may still be settling (duplicates of deleted events
   * published again), and looking the duplicates up in Postgres is inside the limit too, so
   * a retry of thousands of stored events, or a Postgres that does not answer, cannot hold
   * a request past it.
   */
  async wait(logAcks: readonly LogAck[] | Promise<readonly LogAck[]>): Promise<EventAck[]> {
    if (Array.isArray(logAcks)) this.#setAcks(logAcks);
    if (this.#acks === undefined || this.#missing > 0) {
      let deadline: Deadline | undefined;
      try {
        await new Promise<void>((resolve, reject) => {
          deadline = this.deadlines.add(() => reject(this.#timedOut()));
          const atHand = this.#acks;
          if (atHand !== undefined) {
            // Acks at hand (the rule): the last receipt, or lookup, settles the request.
            this.#done = resolve;
            this.#lookUpDuplicates(atHand)?.catch(reject);
            return;
          }
          // Acks still settling: the receipts may all come before them.
          const settle = (): void => {
            if (this.#acks !== undefined && this.#missing === 0) resolve();
          };
          this.#done = settle;
          (logAcks as Promise<readonly LogAck[]>)
            .then((acks) => {
              this.#setAcks(acks);
              return this.#lookUpDuplicates(acks);
            })
            .then(settle, reject);
        });
      } finally {
        this.#done = undefined;
        if (deadline) this.deadlines.cancel(deadline);
      }
    }
    const acks = this.#acks as readonly LogAck[];
    // A repeat of an event_id within the request shares its log message with the first
    // one, so only the first can have been stored from it.
    return acks.map((a, i) => {
      const r = this.#receipts[i] as Receipt;
      const repeat = this.#repeats?.has(i) === true;
      return {
        event_id: r.event_id,
        duplicate: a.duplicate || r.offset !== a.seq || repeat,
        seq: r.seq,
        offset: r.offset,
        rejected: r.rejected ?? '',
      };
    });
  }

  /**
   * Looks up in Postgres the distinct events JetStream reported as duplicates (maybe committed
   * long ago, with no receipt coming) and answers those found; undefined when there are none.
   */
  #lookUpDuplicates(pubAcks: readonly LogAck[]): Promise<void> | undefined {
    let keys: EventKey[] | undefined;
    pubAcks.forEach((a, i) => {
      if (!a.duplicate || this.#repeats?.has(i) === true) return;
      const r = this.records[i] as LogRecord;
      keys ??= [];
      keys.push({ thread_id: r.thread_id, event_id: r.event_id });
    });
    if (keys === undefined) return undefined;
    const asked = keys.length;
    return findEvents(this.pool, keys).then((found) => {
      for (const f of found) this.#resolve(f.thread_id, f);
      // Any not there yet may have no receipt coming.
      if (found.length < asked) this.#unannounced = true;
    });
  }

  #timedOut(): RunstreamError {
    if (this.#acks === undefined) {
      // The duplicates of deleted events were still being looked up and written again: those
      // may never be stored, so "they will be" would not be true.
      return new RunstreamError(
        ErrorCode.PersistTimeout,
        `${this.#missing} of ${this.records.length} events were accepted into the log, but the ` +
          `check for deletions since (which writes deleted events again) did not finish in ` +
          `${this.timeoutMs} ms, so some may not be stored. Publish them again with the same ` +
          'event_ids: stored ones are answered as duplicates with their seqs, the rest are stored.',
      );
    }
    return new RunstreamError(
      ErrorCode.PersistTimeout,
      `${this.#missing} of ${this.records.length} events were accepted into the log but not yet ` +
        `committed after ${this.timeoutMs} ms; they will be. Publish them again with the same ` +
        'event_ids to learn their seqs.',
    );
  }

  dispose(): void {
    for (const u of this.unlisteners.splice(0)) u();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
