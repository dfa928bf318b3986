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
 *
 * A socket written a second time in a turn stays corked until the turn is over
 * ({@link DeliveryTurns.corked}): the frames of a connection's other subscriptions delivered in
 * that turn leave in one write with them. Uncorked after each subscription, one event per
 * announcement over 100 threads and 4 connections cost a write syscall per event. The first
 * write of a turn goes out at once, so a socket with one subscription (1,000 subscribers of
 * one thread) is written while the turn goes on, as before, not held to its end.
 */

/** Work done in one turn before the loop is let go: short enough not to be felt as a stall. */
export const TURN_BUDGET_MS = 2;

/** What a transport writes to: a Node socket or any Writable. */
export interface Corkable {
  cork(): void;
  uncork(): void;
}

export class DeliveryTurns {
  /** `budgetMs`: a turn's work before the loop is let go (a test of one turn's writes sets it long). */
  constructor(readonly budgetMs = TURN_BUDGET_MS) {}
  #tasks: (() => void)[] = [];
  /** Index of the next task to run in {@link #tasks}. */
  #next = 0;
  #scheduled = false;
  #inTurn = false;
  /** Streams written in the turn running now. */
  readonly #writtenStreams = new Set<Corkable>();
  /** Streams corked until the end of the turn running now. */
  readonly #corkedStreams = new Set<Corkable>();

  /** Runs `task` in a later turn, after every task queued before it. */
  queue(task: () => void): void {
    this.#tasks.push(task);
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(this.#runTurn);
  }

  /**
   * Runs `send` with `stream` corked, so what it writes leaves in one write. Inside a turn,
   * from the second task on that writes to the stream it stays corked until the turn's last
   * task has run, so those tasks share one write; the first task's write, and any outside a
   * turn, leave when `send` returns.
   */
  corked(stream: Corkable, send: () => void): void {
    if (this.#corkedStreams.has(stream)) {
      send();
      return;
    }
    stream.cork();
    if (this.#inTurn && this.#writtenStreams.has(stream)) {
      this.#corkedStreams.add(stream);
      send();
      return;
    }
    if (this.#inTurn) this.#writtenStreams.add(stream);
    try {
      send();
    } finally {
      stream.uncork();
    }
  }

  readonly #runTurn = (): void => {
    const deadline = performance.now() + this.budgetMs;
    this.#inTurn = true;
    try {
      do {
        const task = this.#tasks[this.#next] as () => void;
        this.#tasks[this.#next++] = noop;
        task();
      } while (this.#next < this.#tasks.length && performance.now() < deadline);
    } finally {
      this.#inTurn = false;
      this.#uncorkAll();
      this.#endTurn();
    }
  };

  #uncorkAll(): void {
    for (const stream of this.#corkedStreams) {
      try {
        stream.uncork();
      } catch {
        // a socket that fails here has failed for its own connection, which handles it
      }
    }
    this.#corkedStreams.clear();
    this.#writtenStreams.clear();
  }

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
