/**
 * Core NATS loses what is published while a connection moves: a committed-event
 * announcement or a commit receipt sent around a NATS restart may never arrive. Postgres
 * has the truth, so after a reconnect a node looks there for what it may have missed: its
 * live subscriptions catch up to their thread's head, its PERSISTED requests look their
 * events up. {@link Resync} tells it when.
 *
 * It fires when this process's connection reconnects (once the server has confirmed the
 * resubscriptions, so nothing published after the look is missed either), and when
 * another process says it reconnected (`<prefix>.resync`): a persister whose own
 * connection dropped may have lost announcements that nodes connected all along were
 * waiting for.
 */
import { randomBytes } from 'node:crypto';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Logger } from '../logger.js';

export type ResyncListener = (why: 'reconnect' | 'peer') => void;

export class Resync {
  readonly #listeners = new Set<ResyncListener>();
  readonly #id = randomBytes(8).toString('hex');
  #sub: Subscription | undefined;
  #closed = false;

  constructor(
    private readonly nc: NatsConnection,
    private readonly subject: string,
    private readonly log: Logger,
  ) {}

  start(): void {
    this.#sub = this.nc.subscribe(this.subject, {
      callback: (err, msg) => {
        if (err || msg.string() === this.#id) return;
        this.#fire('peer');
      },
    });
    void (async () => {
      for await (const s of this.nc.status()) {
        if (this.#closed) return;
        if (s.type !== 'reconnect') continue;
        try {
          // The PONG says the server has the resubscriptions sent before it.
          await this.nc.flush();
          this.nc.publish(this.subject, this.#id);
        } catch (err) {
          this.log.warn({ err: (err as Error).message }, 'resync after reconnect: flush failed');
        }
        this.#fire('reconnect');
      }
    })();
  }

  /** Calls `listener` at each resync; returns the function that stops it. */
  onResync(listener: ResyncListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #fire(why: 'reconnect' | 'peer'): void {
    this.log.info({ why }, 'resync: looking for what NATS may have lost');
    for (const l of this.#listeners) {
      try {
        l(why);
      } catch (err) {
        this.log.error({ err }, 'resync listener failed');
      }
    }
  }

  close(): void {
    this.#closed = true;
    this.#sub?.unsubscribe();
    this.#listeners.clear();
  }
}
