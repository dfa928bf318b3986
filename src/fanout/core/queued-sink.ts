/**
 * The sink every transport gives its subscriptions: a {@link Renderer} that says what each
 * subscription callback looks like on its wire, writing into the core's {@link SendQueue},
 * and a hook for the transport to close what it must when a subscription is over.
 * A transport is a parser (its own), a renderer and a byte writer; nothing else.
 */
import type { RunStatusName } from '../../domain/run-lifecycle.js';
import type { RunstreamError } from '../../errors.js';
import type { ChatFrame } from './chat-view.js';
import type { SendQueue } from './send-queue.js';
import type { DeliveredEvent, Subscription, SubscriptionSink } from './subscription.js';

/** A transport's framing of subscription callbacks; undefined sends nothing. */
export interface Renderer<F> {
  event(sub: Subscription, e: DeliveredEvent): F | undefined;
  live(sub: Subscription, seq: number): F | undefined;
  end(sub: Subscription, runId: string, seq: number, status: RunStatusName): F | undefined;
  deleted(sub: Subscription, runId: string | undefined): F | undefined;
  /** The subscription failed; `sub.resumeCursor` is where to resume. */
  error(sub: Subscription, err: RunstreamError): F | undefined;
  /** A chat view frame (`"view": "chat"`); absent: the transport offers no chat view. */
  chat?(sub: Subscription, frame: ChatFrame): F | undefined;
}

/** How a subscription ended, for the transport (its final frame has been queued). */
export type Ending =
  | { readonly kind: 'end' }
  | { readonly kind: 'deleted' }
  | { readonly kind: 'error'; readonly error: RunstreamError };

export class QueuedSink<F> implements SubscriptionSink {
  constructor(
    readonly queue: SendQueue<F>,
    readonly render: Renderer<F>,
    /** Called once a subscription is over through end, deletion or error. */
    readonly ended: (sub: Subscription, how: Ending) => void = () => undefined,
  ) {}

  event(sub: Subscription, e: DeliveredEvent): void {
    const f = this.render.event(sub, e);
    if (f !== undefined) this.queue.send(f);
  }

  live(sub: Subscription, seq: number): void {
    const f = this.render.live(sub, seq);
    if (f !== undefined) this.queue.send(f);
  }

  end(sub: Subscription, runId: string, seq: number, status: RunStatusName): void {
    const f = this.render.end(sub, runId, seq, status);
    if (f !== undefined) this.queue.sendFinal(f);
    this.ended(sub, { kind: 'end' });
  }

  deleted(sub: Subscription, runId: string | undefined): void {
    const f = this.render.deleted(sub, runId);
    if (f !== undefined) this.queue.sendFinal(f);
    this.ended(sub, { kind: 'deleted' });
  }

  error(sub: Subscription, err: RunstreamError): void {
    const f = this.render.error(sub, err);
    if (f !== undefined) this.queue.sendFinal(f);
    this.ended(sub, { kind: 'error', error: err });
  }

  sendTogether(send: () => void): void {
    this.queue.together(send);
  }

  drained(): Promise<void> {
    return this.queue.drained();
  }

  get backlogged(): boolean {
    return this.queue.backlogged;
  }

  get closed(): boolean {
    return this.queue.closed;
  }
}
