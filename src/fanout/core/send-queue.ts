/**
 * The one send queue of every subscriber transport, and its one slow-consumer rule.
 *
 * A transport hands frames to its socket (a WebSocket, an HTTP response, a gRPC call) through
 * a {@link FrameWriter}; the queue counts each frame's bytes from the moment it is handed over
 * until the writer says it has been written out. The rule, everywhere:
 *
 * - **A frame is taken while the queue holds less than its limit**, however large the frame:
 *   one big event can never wedge or cut off a subscriber that keeps up, even right behind
 *   other frames. A queue holds at most its limit plus one frame.
 * - A frame that comes while the queue holds its limit or more cuts the consumer off as
 *   too slow (the transport tells the client where to resume and closes).
 * - The node's queues together hold about {@link QueueBudget.maxBytes} at most (a frame
 *   shared by many queues counting once): a frame that
 *   comes while they hold that or more cuts off its consumer, unless that consumer's queue
 *   is empty (a consumer that keeps up is never the one cut).
 * - A queue that holds frames of which none has been written out for
 *   {@link SendQueueOptions.stallMs} cuts its consumer off, however little it holds: a
 *   client that never reads does not keep its subscription, and what it holds, forever.
 * - Catch-up waits while more than the low watermark (min(1 MiB, limit / 4)) is queued, so a
 *   replay follows the client's reading speed; live frames cannot wait and just queue.
 */

import type { TransportLabel } from '../../metrics.js';

/** How a transport puts frames on its wire. */
export interface FrameWriter<F> {
  /**
   * Hands a frame to the socket; calls `done` once it has been written out, or the socket is
   * gone. `bytes` is what {@link size} said of it.
   */
  write(frame: F, done: () => void, bytes: number): void;
  /** The frame's size in bytes, as it counts against the queue. */
  size(frame: F): number;
  /** Runs `send`, which writes several frames, so that they leave in one write. Optional. */
  cork?(send: () => void): void;
}

/**
 * Bytes queued on every send queue of the node together, and their limit. A frame that is
 * one object queued on many queues (a live event's frame shared by its subscribers) is one
 * copy in memory, and counts once, while any queue holds it.
 */
export class QueueBudget {
  #queued = 0;
  /** Queues holding each shared frame. */
  readonly #holders = new WeakMap<object, number>();
  constructor(readonly maxBytes: number) {}
  get queued(): number {
    return this.#queued;
  }
  /** The node's queues hold the budget or more. */
  get full(): boolean {
    return this.#queued >= this.maxBytes;
  }
  add(bytes: number): void {
    this.#queued += bytes;
  }
  release(bytes: number): void {
    this.#queued -= bytes;
  }
  /** A queue took `frame`: counted unless it is an object another queue already holds. */
  hold(frame: unknown, bytes: number): void {
    if (typeof frame !== 'object' || frame === null) {
      this.add(bytes);
      return;
    }
    const n = this.#holders.get(frame) ?? 0;
    this.#holders.set(frame, n + 1);
    if (n === 0) this.add(bytes);
  }
  /** A queue is done with `frame` (written out, or never will be). */
  drop(frame: unknown, bytes: number): void {
    if (typeof frame !== 'object' || frame === null) {
      this.release(bytes);
      return;
    }
    const n = this.#holders.get(frame) ?? 0;
    if (n > 1) {
      this.#holders.set(frame, n - 1);
      return;
    }
    this.#holders.delete(frame);
    this.release(bytes);
  }
}

/** Bytes held somewhere on the node (live events subscriptions hold while catching up). */
export class ByteCount {
  bytes = 0;
}

export interface SendQueueOptions {
  /** Bytes queued at which a further frame cuts the consumer off (the frame that crosses it is taken). */
  readonly maxBytes: number;
  /** The node's budget, shared by every queue. */
  readonly budget: QueueBudget;
  /**
   * The consumer is too slow (called once): tell it where to resume ({@link SendQueue.sendFinal}
   * still writes) and close. The queue takes no other frame after it.
   */
  readonly onSlow: (queuedBytes: number) => void;
  /** Frames queued and none written out for this long: the consumer is too slow. Unset: never. */
  readonly stallMs?: number | undefined;
  /** Which transport writes this queue's frames (for the metrics). */
  readonly transport?: TransportLabel | undefined;
}

export class SendQueue<F> {
  readonly #writer: FrameWriter<F>;
  readonly #o: SendQueueOptions;
  #queued = 0;
  #drainWaiters: (() => void)[] = [];
  /** Releases of the frames handed over and not yet written out. */
  readonly #pending = new Set<() => void>();
  #closed = false;
  #cutOff = false;
  /** Armed while frames are queued; pushed back each time one is written out. */
  #stall: NodeJS.Timeout | undefined;

  constructor(writer: FrameWriter<F>, o: SendQueueOptions) {
    this.#writer = writer;
    this.#o = o;
  }

  get transport(): TransportLabel | undefined {
    return this.#o.transport;
  }

  /** Takes no more frames: closed, or the consumer was cut off as too slow. */
  get closed(): boolean {
    return this.#closed || this.#cutOff;
  }

  /** Bytes handed to the writer and not yet written out. */
  get queuedBytes(): number {
    return this.#queued;
  }

  /** Catch-up pauses above this. */
  get #lowWatermark(): number {
    return Math.min(1024 * 1024, this.#o.maxBytes / 4);
  }

  get backlogged(): boolean {
    return this.#queued > this.#lowWatermark;
  }

  /** Queues a frame; false when the queue is closed or this frame cut the consumer off. */
  send(frame: F): boolean {
    if (this.closed) return false;
    const bytes = this.#writer.size(frame);
    if (this.#queued > 0 && (this.#queued >= this.#o.maxBytes || this.#o.budget.full)) {
      this.#cutOffSlow();
      return false;
    }
    this.#write(frame, bytes);
    return true;
  }

  /**
   * A last frame before the transport ends (an `end`, an error telling where to resume):
   * queued past the limit if need be, also after a cut-off; they are small and nothing
   * follows them. False only once the queue is closed.
   */
  sendFinal(frame: F): boolean {
    if (this.#closed) return false;
    this.#write(frame, this.#writer.size(frame));
    return true;
  }

  #cutOffSlow(): void {
    this.#cutOff = true;
    this.#stopStallTimer();
    this.#wake();
    this.#o.onSlow(this.#queued);
  }

  #write(frame: F, bytes: number): void {
    this.#queued += bytes;
    this.#o.budget.hold(frame, bytes);
    if (this.#stall === undefined && this.#o.stallMs !== undefined && !this.closed) {
      this.#stall = setTimeout(() => {
        this.#stall = undefined;
        if (!this.closed && this.#pending.size > 0) this.#cutOffSlow();
      }, this.#o.stallMs);
      this.#stall.unref();
    }
    const release = (): void => {
      if (!this.#pending.delete(release)) return;
      this.#queued -= bytes;
      this.#o.budget.drop(frame, bytes);
      if (this.#pending.size === 0) this.#stopStallTimer();
      else this.#stall?.refresh();
      if (!this.backlogged) this.#wake();
    };
    this.#pending.add(release);
    this.#writer.write(frame, release, bytes);
  }

  /** Runs `send` corked when the writer can: its frames leave in one write. */
  together(send: () => void): void {
    if (this.#writer.cork && !this.#closed) this.#writer.cork(send);
    else send();
  }

  /** Resolves when the queue is at or below the low watermark, or closed. */
  drained(): Promise<void> {
    if (this.closed || !this.backlogged) return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  /** Takes no more frames (what was handed over is still written out and released). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#stopStallTimer();
    this.#wake();
  }

  #stopStallTimer(): void {
    clearTimeout(this.#stall);
    this.#stall = undefined;
  }

  /** The socket is gone: whatever was handed over will never be written; release it all. */
  dispose(): void {
    this.close();
    for (const release of [...this.#pending]) release();
  }

  #wake(): void {
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const w of waiters) w();
  }
}
