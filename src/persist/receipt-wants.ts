/**
 * Which events' commit receipts someone waits for. Receipts answer PERSISTED acks only; a
 * log message of any other request is marked so (log/log-batch.ts), and publishing receipts
 * for it was one NATS message per event at one event per request that nobody read. The
 * persister notes the events of every message read that wants them, by thread and event_id,
 * and after a commit publishes a thread's receipts only if one of them is among its events.
 *
 * Matched by event_id, not by offset: a duplicate's receipt carries the stored row's offset,
 * not the message's. Counted, so that two messages of one event_id read before either is
 * committed get a receipt each: a deleted thread's original, which the persister drops, and
 * the same event published again after the delete, which it stores and whose waiter waits for
 * that second receipt. The notes of messages read but never committed here (a partition taken
 * over) are forgotten, the thread least recently read first, past {@link MAX_WANTED_EVENTS}:
 * such a waiter is answered by its own lookup in Postgres (ingest/persist-waiter.ts), a few
 * seconds later.
 */
import type { LogRecord } from '../domain/event.js';
import type { Receipt } from '../domain/receipt.js';

/** Noted events held at most; the threads least recently noted are forgotten first. */
export const MAX_WANTED_EVENTS = 100_000;

export class ReceiptWants {
  /** thread_id → event_id → messages read that want its receipt; in the order threads were last noted. */
  readonly #byThread = new Map<string, Map<string, number>>();
  #size = 0;

  constructor(private readonly maxEvents: number = MAX_WANTED_EVENTS) {}

  /** Notes held now: an event once per message read that wants its receipt. */
  get size(): number {
    return this.#size;
  }

  /** Notes that the receipts of `records` (read from one log message) are wanted. */
  add(records: readonly LogRecord[]): void {
    for (const r of records) {
      let ids = this.#byThread.get(r.thread_id);
      if (ids === undefined) ids = new Map();
      // To the back of the age order: a thread still read is never the one forgotten first.
      else this.#byThread.delete(r.thread_id);
      this.#byThread.set(r.thread_id, ids);
      ids.set(r.event_id, (ids.get(r.event_id) ?? 0) + 1);
      this.#size++;
    }
    for (const [threadId, ids] of this.#byThread) {
      if (this.#size <= this.maxEvents) break;
      this.#byThread.delete(threadId);
      for (const n of ids.values()) this.#size -= n;
    }
  }

  /**
   * Whether any of a thread's committed `receipts` was wanted; forgets one note of each (a
   * redelivered message is noted again when it is read again).
   */
  take(threadId: string, receipts: readonly Receipt[]): boolean {
    const ids = this.#byThread.get(threadId);
    if (ids === undefined) return false;
    let wanted = false;
    for (const r of receipts) {
      const n = ids.get(r.event_id);
      if (n === undefined) continue;
      if (n === 1) ids.delete(r.event_id);
      else ids.set(r.event_id, n - 1);
      wanted = true;
      this.#size--;
    }
    if (ids.size === 0) this.#byThread.delete(threadId);
    return wanted;
  }
}
