/**
 * The subscription service: `(principal, request) →` a validated, scoped, admitted
 * subscription writing into a transport's sink. Every subscriber transport (WebSocket,
 * SSE, the LangGraph join, gRPC Subscribe, long-poll) opens its subscriptions here, so the
 * steps are one: the thread read right, the principal's user scope on the filter, the
 * view, the catch-up and the seam (subscription.ts), the send queue's one slow-consumer
 * rule (send-queue.ts).
 */

import type { Principal } from '../../auth/principal.js';
import { scopedFilter } from '../../auth/scope.js';
import { CHAT_EVENT_TYPES } from '../../domain/chat.js';
import { PermissionDeniedError } from '../../errors.js';
import type { Admission, AdmissionKind } from './admission.js';
import { ChatViewSink } from './chat-view.js';
import type { QueuedSink } from './queued-sink.js';
import type { SubscribeRequest } from './request.js';
import { type FrameWriter, type QueueBudget, SendQueue } from './send-queue.js';
import { Subscription, type SubscriptionResources } from './subscription.js';

export interface SubscriptionServiceOptions {
  readonly resources: SubscriptionResources;
  readonly admission: Admission;
  /** The node's budget of bytes queued to subscribers, all transports together. */
  readonly budget: QueueBudget;
  /** A queue with frames of which none is written out for this long cuts its consumer off. */
  readonly stallMs?: number | undefined;
}

export interface OpenOptions {
  /** The subscription's id on its connection (WebSocket); generated otherwise. */
  readonly id?: string;
  /** Called once when the subscription ends, whatever the reason. */
  readonly onClose?: (sub: Subscription) => void;
}

export class SubscriptionService {
  readonly #o: SubscriptionServiceOptions;
  #nextId = 0;

  constructor(o: SubscriptionServiceOptions) {
    this.#o = o;
  }

  get resources(): SubscriptionResources {
    return this.#o.resources;
  }

  /** Takes a place of `kind` on this node (see {@link Admission}); throws RESOURCE_EXHAUSTED past its cap. */
  admit(kind: AdmissionKind): () => void {
    return this.#o.admission.admit(kind);
  }

  /** Throws PermissionDeniedError unless `principal` may read the request's thread. */
  authorize(principal: Principal, req: Pick<SubscribeRequest, 'threadId'>): void {
    if (!principal.canRead(req.threadId)) {
      throw new PermissionDeniedError(`this token may not read thread ${req.threadId}`);
    }
  }

  /** A send queue for a transport's connection, counted against the node's budget. */
  queue<F>(writer: FrameWriter<F>, maxBytes: number, onSlow: (queuedBytes: number) => void): SendQueue<F> {
    return new SendQueue(writer, { maxBytes, budget: this.#o.budget, onSlow, stallMs: this.#o.stallMs });
  }

  /**
   * Checks that `principal` may read the thread, scopes the filter to its user, and starts
   * the subscription (catch-up, then live) writing into `sink`.
   * @throws PermissionDeniedError before anything starts.
   */
  open<F>(
    principal: Principal,
    req: SubscribeRequest,
    sink: QueuedSink<F>,
    o: OpenOptions = {},
  ): Subscription {
    this.authorize(principal, req);
    // A user-scoped token sees only its user's events, whatever the client asked.
    let filter = scopedFilter(req.filter, principal);
    const view = req.view === 'chat' ? new ChatViewSink(sink, this.#o.resources, req.threadId) : undefined;
    if (view) filter = { ...filter, eventTypes: CHAT_EVENT_TYPES };
    const sub = new Subscription({
      ...this.#o.resources,
      id: o.id ?? `s${++this.#nextId}`,
      threadId: req.threadId,
      start: req.start,
      filter,
      sink: view ?? sink,
      onClose: (s) => o.onClose?.(s),
    });
    view?.attach(sub);
    void sub.start();
    return sub;
  }
}
