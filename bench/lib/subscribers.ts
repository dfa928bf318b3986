/**
 * The subscriber side of a producer measurement, run inside its load generator
 * (bench/loadgen/subscribers.ts): one WebSocket subscription per thread, spread over a few
 * connections, counting deliveries and checking that each thread's seqs
 * arrive as 1, 2, 3, ... (a gap or a duplicate is counted, not thrown: a benchmark
 * reports what it saw).
 */
import { type ServerFrame, type WireEvent, WsConnection } from '../../src/client/ws-subscriber.js';

export const LIVE_TIMEOUT_MS = 30_000;

export type EventListener = (event: WireEvent, receivedAtMs: number) => void;

export class Subscribers implements AsyncDisposable {
  readonly #conns: WsConnection[];
  readonly #lastSeq: number[];
  readonly #onEvent: EventListener | undefined;
  #live = 0;
  #liveWaiter: (() => void) | undefined;
  #target = Number.POSITIVE_INFINITY;
  #targetWaiter: (() => void) | undefined;
  delivered = 0;
  /** Events whose seq was not the previous one + 1 on their subscription. */
  outOfOrder = 0;
  firstDeliveryAtMs = Number.NaN;
  lastDeliveryAtMs = Number.NaN;
  readonly errors: string[] = [];

  private constructor(conns: WsConnection[], threads: number, onEvent: EventListener | undefined) {
    this.#conns = conns;
    this.#lastSeq = new Array<number>(threads).fill(0);
    this.#onEvent = onEvent;
  }

  /** Opens `connections` sockets and subscribes to every thread; resolves once all are live. */
  static async open(
    wsUrl: string,
    threadIds: readonly string[],
    connections: number,
    onEvent?: EventListener,
  ): Promise<Subscribers> {
    const conns = await Promise.all(Array.from({ length: connections }, () => WsConnection.open(wsUrl)));
    const subs = new Subscribers(conns, threadIds.length, onEvent);
    try {
      for (const c of conns) {
        c.onFrame((f) => {
          subs.#onFrame(f);
          // The bench keeps no frame history: WsConnection's list would grow by one per event.
          c.frames.length = 0;
        });
      }
      const allLive = new Promise<void>((resolve) => {
        subs.#liveWaiter = resolve;
      });
      threadIds.forEach((threadId, i) => {
        (conns[i % connections] as WsConnection).subscribe(`s${i}`, threadId);
      });
      await withTimeout(
        allLive,
        LIVE_TIMEOUT_MS,
        () => `only ${subs.#live} of ${threadIds.length} subscriptions went live`,
      );
      if (subs.errors.length > 0) throw new Error(`subscribe failed: ${subs.errors[0]}`);
    } catch (err) {
      await subs.close();
      throw err;
    }
    return subs;
  }

  #onFrame(f: ServerFrame): void {
    switch (f.type) {
      case 'event': {
        const now = performance.now();
        const i = Number(f.id.slice(1));
        if (f.event.seq !== (this.#lastSeq[i] as number) + 1) this.outOfOrder++;
        this.#lastSeq[i] = f.event.seq;
        if (this.delivered++ === 0) this.firstDeliveryAtMs = now;
        this.lastDeliveryAtMs = now;
        this.#onEvent?.(f.event, now);
        if (this.delivered >= this.#target) this.#targetWaiter?.();
        return;
      }
      case 'live':
        if (++this.#live === this.#lastSeq.length) this.#liveWaiter?.();
        return;
      case 'error':
        this.errors.push(`${f.code}: ${f.message}`);
        if (f.id === null) this.#liveWaiter?.(); // a connection-level error: stop waiting
        return;
      case 'unsubscribed':
        return;
    }
  }

  /** Resolves true once `count` events in all have been delivered, false after `timeoutMs`. */
  async waitDelivered(count: number, timeoutMs: number): Promise<boolean> {
    if (this.delivered >= count) return true;
    this.#target = count;
    const reached = new Promise<boolean>((resolve) => {
      this.#targetWaiter = () => resolve(true);
    });
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
    });
    try {
      return await Promise.race([reached, timedOut]);
    } finally {
      clearTimeout(timer);
      this.#target = Number.POSITIVE_INFINITY;
      this.#targetWaiter = undefined;
    }
  }

  async close(): Promise<void> {
    await Promise.all(this.#conns.map((c) => c.close().catch(() => undefined)));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** `promise`, or an error naming what did not happen within `ms`. */
export async function withTimeout<T>(promise: Promise<T>, ms: number, what: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what()} within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
