/**
 * Per-thread core-NATS subscriptions shared by many local listeners.
 *
 * A node subscribes to a thread's subject only while something local listens to it, once
 * however many listeners there are, and decodes each message once for all of them. A
 * listener is added once the server has confirmed the subscription: one round trip for a
 * new subscription, none for a thread already subscribed. (A user that wants a thread's
 * subscription to outlive its listeners keeps a listener itself: ingest's PERSISTED waiter
 * does, for 30 s after a thread's last request.)
 */
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Logger } from '../logger.js';

export type FeedListener<T> = (value: T) => void;

interface Feed<T> {
  readonly sub: Subscription;
  readonly listeners: Set<FeedListener<T>>;
  /** Resolves once the server has registered the subscription. */
  readonly ready: Promise<void>;
}

export class ThreadFeeds<T> {
  readonly #feeds = new Map<string, Feed<T>>();

  constructor(
    private readonly nc: NatsConnection,
    private readonly subjectOf: (threadId: string) => string,
    private readonly decode: (msg: Msg, threadId: string) => T,
    private readonly log: Logger,
  ) {}

  /**
   * Adds a listener; resolves once the server has registered interest, so everything
   * published on the thread after that is seen. Returns the function that removes it.
   */
  async listen(threadId: string, listener: FeedListener<T>): Promise<() => void> {
    return this.listenMany([threadId], (_, v) => listener(v));
  }

  /**
   * Adds one listener per thread with a single round trip to the server; the listener is
   * told which thread each value came from. Returns the function that removes them all.
   */
  async listenMany(
    threadIds: Iterable<string>,
    listener: (threadId: string, value: T) => void,
  ): Promise<() => void> {
    const removers: (() => void)[] = [];
    const ready: Promise<void>[] = [];
    for (const t of threadIds) {
      const [remove, feed] = this.#add(t, (v) => listener(t, v));
      removers.push(remove);
      ready.push(feed.ready);
    }
    const removeAll = (): void => {
      for (const r of removers) r();
    };
    try {
      await Promise.all(ready);
    } catch (err) {
      removeAll();
      throw err;
    }
    return removeAll;
  }

  #add(threadId: string, listener: FeedListener<T>): [() => void, Feed<T>] {
    let feed = this.#feeds.get(threadId);
    if (!feed) {
      const listeners = new Set<FeedListener<T>>();
      const sub = this.nc.subscribe(this.subjectOf(threadId), {
        callback: (err, msg) => {
          if (err) {
            this.log.warn({ err, threadId }, 'thread feed error');
            return;
          }
          let value: T;
          try {
            value = this.decode(msg, threadId);
          } catch (decodeErr) {
            this.log.error({ err: decodeErr, threadId }, 'undecodable message on thread feed');
            return;
          }
          for (const l of listeners) l(value);
        },
      });
      // The flush's PING follows the SUB on the connection: its PONG confirms the SUB.
      const ready = this.nc.flush();
      const created: Feed<T> = { sub, listeners, ready };
      this.#feeds.set(threadId, created);
      // A failed flush fails every listener of the feed; the next listener subscribes anew.
      ready.catch(() => {
        if (this.#feeds.get(threadId) === created) this.#feeds.delete(threadId);
        created.sub.unsubscribe();
      });
      feed = created;
    }
    feed.listeners.add(listener);
    const current = feed;
    const remove = (): void => {
      current.listeners.delete(listener);
      if (current.listeners.size > 0 || this.#feeds.get(threadId) !== current) return;
      this.#feeds.delete(threadId);
      current.sub.unsubscribe();
    };
    return [remove, feed];
  }

  /** Number of threads with at least one listener. */
  get size(): number {
    return this.#feeds.size;
  }
}
