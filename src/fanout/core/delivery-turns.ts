/**
 * Spreads live fan-out over event-loop turns.
 *
 * One announcement on a busy thread goes to every subscriber of it: delivered in one
 * synchronous loop, 100 events to 1,000 sockets held the event loop for seconds, and
 * ingest, the persister and every other thread's subscribers waited. Here each
 * subscription's share of the work is a task; tasks run in the order they were queued,
 * and after a few milliseconds of them the rest waits for the next turn (setImmediate),
 * so I/O and timers run in between. A subscription queues itself at most once at a time
 * and delivers everything it has pending when its task runs, so its own order holds.
 */

/** Work done in one turn before the loop is let go: short enough not to be felt as a stall. */
export const TURN_BUDGET_MS = 2;

export class DeliveryTurns {
  #tasks: (() => void)[] = [];
  /** Index of the next task to run in {@link #tasks}. */
  #next = 0;
  #scheduled = false;

  /** Runs `task` in a later turn, after every task queued before it. */
  queue(task: () => void): void {
    this.#tasks.push(task);
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(this.#runTurn);
  }

  readonly #runTurn = (): void => {
    const deadline = performance.now() + TURN_BUDGET_MS;
    try {
      do {
        const task = this.#tasks[this.#next] as () => void;
        this.#tasks[this.#next++] = noop;
        task();
      } while (this.#next < this.#tasks.length && performance.now() < deadline);
    } finally {
      this.#endTurn();
    }
  };

  #endTurn(): void {
    if (this.#next === this.#tasks.length) {
      this.#tasks = [];
      this.#next = 0;
      this.#scheduled = false;
      return;
    }
    // Under steady load the queue may never empty: drop what has run once it is most of it.
    if (this.#next > 1024 && this.#next * 2 > this.#tasks.length) {
      this.#tasks = this.#tasks.slice(this.#next);
      this.#next = 0;
    }
    setImmediate(this.#runTurn);
  }
}

function noop(): void {}

/** The node's one queue: every subscription shares it, so the budget holds per turn. */
export const liveDelivery = new DeliveryTurns();
