/**
 * Per-thread core-NATS subscriptions shared by many local listeners.
 *
 * A node subscribes to a thread's subject only while something local listens to it,
 * once however many listeners there are, and decodes each message once for all of them.
 */
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Logger } from '../logger.js';

export type FeedListener<T> = (value: T) => void;

interface Feed<T> {
  readonly sub: Subscription;
  readonly listeners: Set<FeedListener<T>>;
}

export class ThreadFeeds<T> {
  readonly #feeds = new Map<string, Feed<T>>();

  constructor(
    private readonly nc: NatsConnection,
    private readonly subjectOf: (threadId: string) => string,
    private readonly decode: (msg: Msg) => T,
    private readonly log: Logger,
  ) {}

  /**
   * Adds a listener; resolves once the server has registered interest, so everything
   * published on the thread after that is seen. Returns the function that removes it.
   */
  async listen(threadId: string, listener: FeedListener<T>): Promise<() => void> {
    const remove = this.#add(threadId, listener);
    await this.nc.flush();
    return remove;
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
    for (const t of threadIds) removers.push(this.#add(t, (v) => listener(t, v)));
    const removeAll = (): void => {
      for (const r of removers) r();
    };
    try {
      await this.nc.flush();
    } catch (err) {
      removeAll();
      throw err;
    }
    return removeAll;
  }

  #add(threadId: string, listener: FeedListener<T>): () => void {
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
            value = this.decode(msg);
          } catch (decodeErr) {
            this.log.error({ err: decodeErr, threadId }, 'undecodable message on thread feed');
            return;
          }
          for (const l of listeners) l(value);
        },
      });
      feed = { sub, listeners };
      this.#feeds.set(threadId, feed);
    }
    feed.listeners.add(listener);
    const current = feed;
    return () => {
      current.listeners.delete(listener);
      if (current.listeners.size === 0 && this.#feeds.get(threadId) === current) {
        this.#feeds.delete(threadId);
        current.sub.unsubscribe();
      }
    };
  }

  /** Number of threads with at least one listener. */
  get size(): number {
    return this.#feeds.size;
  }
}
