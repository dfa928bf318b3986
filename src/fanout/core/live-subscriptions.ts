/**
 * The node's live subscriptions by thread, so that after NATS may have lost announcements
 * (log/resync.ts) each is told its thread's head, looked up in Postgres a thousand threads
 * per statement, and catches up by itself if it is behind.
 */
import type pg from 'pg';
import type { Logger } from '../../logger.js';
import { headSeqs } from '../../persist/queries.js';

/** Threads whose heads one statement looks up. */
export const RESYNC_THREADS_PER_QUERY = 1000;
/** After a failed look (Postgres away too), when to try again, and how often at most. */
const RESYNC_RETRY_MS = 1000;
const RESYNC_ATTEMPTS = 60;

/** What a subscription offers the registry. */
export interface Resyncable {
  readonly threadId: string;
  /** The thread's head is `head`: catch up if the subscription is behind it. */
  resync(head: number): void;
}

export class LiveSubscriptions {
  readonly #byThread = new Map<string, Set<Resyncable>>();
  #running = false;
  #again = false;
  #attempts = 0;

  constructor(
    private readonly pool: pg.Pool,
    private readonly log: Logger,
  ) {}

  add(sub: Resyncable): void {
    const set = this.#byThread.get(sub.threadId);
    if (set) set.add(sub);
    else this.#byThread.set(sub.threadId, new Set([sub]));
  }

  delete(sub: Resyncable): void {
    const set = this.#byThread.get(sub.threadId);
    if (!set?.delete(sub) || set.size > 0) return;
    this.#byThread.delete(sub.threadId);
  }

  /** Live subscriptions held. */
  get size(): number {
    let n = 0;
    for (const set of this.#byThread.values()) n += set.size;
    return n;
  }

  /** Tells every live subscription its thread's head; a call during a pass runs one more after it. */
  resync(): void {
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = true;
    this.#attempts = 0;
    void this.#pass();
  }

  async #pass(): Promise<void> {
    const threads = [...this.#byThread.keys()];
    try {
      for (let i = 0; i < threads.length; i += RESYNC_THREADS_PER_QUERY) {
        const heads = await headSeqs(this.pool, threads.slice(i, i + RESYNC_THREADS_PER_QUERY));
        for (const [threadId, head] of heads) {
          for (const sub of this.#byThread.get(threadId) ?? []) sub.resync(head);
        }
      }
    } catch (err) {
      if (++this.#attempts < RESYNC_ATTEMPTS) {
        this.log.warn({ err: (err as Error).message }, 'resync: could not read thread heads; retrying');
        setTimeout(() => void this.#pass(), RESYNC_RETRY_MS).unref();
        return;
      }
      this.log.error({ err }, 'resync: gave up reading thread heads; subscribers repair at their next event');
    }
    this.#running = false;
    if (this.#again) {
      this.#again = false;
      this.resync();
    }
  }
}
