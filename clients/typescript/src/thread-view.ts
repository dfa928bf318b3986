/**
 * A thread kept in memory for a UI: the events (or, with `view: "chat"`, the chat messages) a
 * subscription delivers, its cursor, whether it is live, and how it ended. Feed it a
 * subscription's items, or let {@link ThreadView.follow} do so.
 */
import { ChatView } from './chat-view.js';
import { type SubscribeOptions, type Subscription, type SubscriptionItem, subscribe } from './subscriber.js';
import type { ChatMessage, RunStatus, WireEvent } from './types.js';

export type ThreadViewListener = (view: ThreadView, item: SubscriptionItem) => void;

export class ThreadView {
  /** Events in seq order (events view). */
  readonly events: WireEvent[] = [];
  readonly chat: ChatView;
  /** The last seq applied or skipped. */
  cursor: number;
  live = false;
  /** Set once a run subscription ended. */
  ended: { runId: string; seq: number; status: RunStatus } | undefined;
  deleted = false;
  /** Set when the subscription failed for good. */
  error: Error | undefined;
  readonly #listeners = new Set<ThreadViewListener>();
  /** Keeps at most this many events (oldest dropped first). */
  readonly maxEvents: number;

  constructor(
    opts: {
      events?: readonly WireEvent[];
      messages?: readonly ChatMessage[];
      cursor?: number;
      maxEvents?: number;
    } = {},
  ) {
    this.events.push(...(opts.events ?? []));
    this.cursor = opts.cursor ?? this.events.at(-1)?.seq ?? 0;
    this.chat = new ChatView(opts.messages ?? [], this.cursor);
    this.maxEvents = opts.maxEvents ?? Number.POSITIVE_INFINITY;
  }

  /** The chat view's messages (chat view subscriptions). */
  get messages(): readonly ChatMessage[] {
    return this.chat.messages;
  }

  /** Calls `listener` after every item applied; returns the function that removes it. */
  onChange(listener: ThreadViewListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  apply(item: SubscriptionItem): void {
    switch (item.type) {
      case 'event':
        if (item.event.seq <= this.cursor) return;
        this.events.push(item.event);
        if (this.events.length > this.maxEvents) this.events.splice(0, this.events.length - this.maxEvents);
        this.cursor = item.event.seq;
        break;
      case 'chat':
        this.chat.apply(item.frame);
        this.cursor = Math.max(this.cursor, item.frame.seq);
        break;
      case 'live':
        this.live = true;
        this.chat.advance(item.seq);
        this.cursor = Math.max(this.cursor, item.seq);
        break;
      case 'reconnecting':
        this.live = false;
        break;
      case 'end':
        this.ended = { runId: item.runId, seq: item.seq, status: item.status };
        this.cursor = Math.max(this.cursor, item.seq);
        break;
      case 'deleted':
        this.deleted = true;
        break;
      case 'error':
        if (!item.retrying) this.error = item.error;
        break;
    }
    for (const l of this.#listeners) l(this, item);
  }

  /**
   * Subscribes after this view's cursor with `opts` and applies every item. Close the returned
   * subscription to stop.
   */
  follow(
    opts: Omit<SubscribeOptions, 'afterSeq' | 'liveOnly' | 'fromOffset' | 'onItem' | 'onEvent'>,
  ): Subscription {
    return subscribe({ ...opts, afterSeq: this.cursor, onItem: (item) => this.apply(item) });
  }
}
