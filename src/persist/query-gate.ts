/**
 * Bounds how many reads run at once on a shared pool, and queues the rest in-process
 * (FIFO, without a deadline).
 *
 * pg-pool's own queue fails a query that waits longer than `connectionTimeoutMillis` for a
 * client, and cannot tell "Postgres is unreachable" from "a thousand subscribers asked at
 * the same moment". Behind the gate, a resubscribe storm waits its turn instead of failing
 * with UNAVAILABLE, the pool's timeout keeps meaning "cannot connect", and the connections
 * left over stay free for the persister and ingest.
 */
import type pg from 'pg';

/** A counting semaphore with a FIFO queue. */
export class QueryGate {
  #free: number;
  readonly #waiting: (() => void)[] = [];

  constructor(readonly concurrency: number) {
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new RangeError(`concurrency must be a positive integer (got ${concurrency})`);
    }
    this.#free = concurrency;
  }

  /** Runs `fn` once a slot is free; the slot is released however `fn` ends. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    try {
      return await fn();
    } finally {
      const next = this.#waiting.shift();
      // The slot passes straight to the next waiter, so a newcomer cannot overtake the queue.
      if (next) next();
      else this.#free++;
    }
  }

  /** Queries waiting for a slot. */
  get queued(): number {
    return this.#waiting.length;
  }
}

/**
 * The pool, with its `query` passed through a {@link QueryGate} of `concurrency` slots;
 * everything else (`connect`, `end`, events) is the pool's own.
 */
export function gatedPool(pool: pg.Pool, concurrency: number): pg.Pool {
  const gate = new QueryGate(concurrency);
  const query = (...args: unknown[]): Promise<unknown> =>
    gate.run(() => Reflect.apply(pool.query, pool, args) as Promise<unknown>);
  return new Proxy(pool, {
    get(target, prop, receiver) {
      return prop === 'query' ? query : Reflect.get(target, prop, receiver);
    },
  });
}
