/**
 * The live chat view of a subscription (`"view": "chat"`): the chat projection of
 * domain/chat.ts as it grows, one frame per chat event, each carrying the seq it reflects.
 *
 * A frame names its message (`message`: the fields the message has from its first event,
 * `first_seq` among them, which identifies it) and says what the event changed: `append`
 * (text added), `content` (the whole text, replacing), `tool_calls` (calls added). A
 * client applies it so: take the message with that `first_seq`, or add it (with empty
 * `content`, and empty `tool_calls` for an assistant, at the end of the list); set its
 * `last_seq` to the frame's seq and add 1 to its `event_count`; then apply the change
 * (src/client/chat-view.ts does). A client that holds History's chat view at seq N (or
 * nothing at N = 0), subscribes after N and applies every frame holds exactly History's
 * chat view at the last frame's seq.
 *
 * To start after N > 0, the view needs what of the projection's state lies before N, and
 * looks it up when an event needs it: whether a run's last chat event before N was an
 * anonymous assistant one, and from which seq (so that its chunks after N join it), at the
 * run's first event after N; a named message begun before N; the name of a tool whose call
 * is before N. So the view processes its events in order, in a queue
 * of its own, awaiting those lookups; the queue is bounded like a send queue.
 */
import type pg from 'pg';
import {
  anonymousFirstSeq,
  ChatBuilder,
  type ChatChange,
  type ChatInput,
  ChatKeys,
  type ChatMessage,
  isAnonymousAssistant,
  isNamedAssistantKey,
  metadataId,
  nameTools,
} from '../../domain/chat.js';
import type { RunStatusName } from '../../domain/run-lifecycle.js';
import { ErrorCode, RunstreamError } from '../../errors.js';
import { anonymousTails, eventsAt, firstOfMessage, toolCallsBefore } from '../../persist/queries.js';
import { eventJsonParts } from './event-json-parts.js';
import type { QueuedSink } from './queued-sink.js';
import type {
  DeliveredEvent,
  Subscription,
  SubscriptionResources,
  SubscriptionSink,
} from './subscription.js';

/**
 * Events, and bytes of their content and metadata, a chat view holds unprocessed at most
 * (events wait while the view looks something up in the store; a batch delivered in one
 * turn waits for its turn). Past either, the subscription ends with `slow_consumer` and
 * the seq to resume after.
 */
export const CHAT_VIEW_MAX_PENDING = 10_000;
export const CHAT_VIEW_MAX_PENDING_BYTES = 16 * 1024 * 1024;

/**
 * Messages, calls and runs a view's projection state holds beyond what it took from the
 * store when it last did. Past it, the view drops its state and takes it from the store
 * again at its cursor, as a view that starts there does: memory stays bounded however
 * long the thread, and the frames are the same.
 */
export const CHAT_VIEW_MAX_STATE = 2_000;

/** One chat frame's content, before a transport frames it; `json` is rendered once. */
export interface ChatFrame {
  readonly seq: number;
  /** `{"seq":N,"message":{…},…change}`: the same text on every transport. */
  readonly json: string;
}

type Task = () => Promise<void> | void;

export class ChatViewSink<F> implements SubscriptionSink {
  readonly #inner: QueuedSink<F>;
  readonly #pool: pg.Pool;
  readonly #threadId: string;
  #keys = new ChatKeys();
  #builder = new ChatBuilder({ keep: false });
  /**
   * The seq up to which this view's state came from the store (0: the view has seen every
   * event of its thread itself). A message or call from up to it is looked up there.
   */
  #horizon = 0;
  /**
   * Runs with a chat event since the horizon. The first of a run, if it is an anonymous
   * assistant event, asks the store whether the run's last chat event up to the horizon was
   * one too (then it goes on that message).
   */
  #runsSeen = new Set<string>();
  #sub: Subscription | undefined;
  #tasks: Task[] = [];
  /** Bytes of content and metadata of the events waiting in {@link #tasks}. */
  #pendingBytes = 0;
  #running = false;
  #drainWaiters: (() => void)[] = [];
  /** Where the subscription started; until then, its own cursor is the resume point. */
  #started = false;
  /** The last seq whose change went out: where a client of this view resumes. */
  #cursor = 0;
  /** An end, deletion or error is queued: what is before it still goes out. */
  #final = false;
  #over = false;

  constructor(inner: QueuedSink<F>, resources: SubscriptionResources, threadId: string) {
    this.#inner = inner;
    this.#pool = resources.pool;
    this.#threadId = threadId;
  }

  attach(sub: Subscription): void {
    this.#sub = sub;
  }

  resumeCursor(sub: Subscription): number {
    return this.#started ? this.#cursor : sub.cursor;
  }

  started(sub: Subscription, cursor: number): void {
    this.#started = true;
    this.#cursor = cursor;
    if (cursor > 0) this.#seed(cursor);
  }

  event(sub: Subscription, e: DeliveredEvent): void {
    if (this.#over) return;
    const input = chatInput(e);
    const bytes = input.content_json.length + input.metadata_json.length;
    if (
      this.#tasks.length >= CHAT_VIEW_MAX_PENDING ||
      (this.#tasks.length > 0 && this.#pendingBytes + bytes > CHAT_VIEW_MAX_PENDING_BYTES)
    ) {
      this.#fail(
        sub,
        new RunstreamError(
          ErrorCode.SlowConsumer,
          `the chat view holds ${this.#tasks.length} events not yet sent; resubscribe after_seq ${this.#cursor}`,
        ),
      );
      return;
    }
    this.#pendingBytes += bytes;
    this.#push(() => {
      this.#pendingBytes -= bytes;
      return this.#project(sub, input);
    });
  }

  live(sub: Subscription, seq: number): void {
    this.#push(() => {
      if (seq > this.#cursor) this.#cursor = seq;
      this.#inner.live(sub, seq);
    });
  }

  end(sub: Subscription, runId: string, seq: number, status: RunStatusName): void {
    this.#final = true;
    this.#push(() => {
      if (seq > this.#cursor) this.#cursor = seq;
      this.#inner.end(sub, runId, seq, status);
    });
  }

  deleted(sub: Subscription, runId: string | undefined): void {
    this.#final = true;
    this.#push(() => this.#inner.deleted(sub, runId));
  }

  error(sub: Subscription, err: RunstreamError): void {
    this.#final = true;
    this.#push(() => this.#inner.error(sub, err));
  }

  /** The subscription is over. Unless a final frame waits its turn, nothing more goes out. */
  detached(): void {
    if (this.#final) return;
    this.#stop();
  }

  sendTogether(send: () => void): void {
    send(); // events only queue here; their frames go out as the view processes them
  }

  get backlogged(): boolean {
    return this.#tasks.length > 0 || this.#inner.backlogged;
  }

  drained(): Promise<void> {
    if (this.closed || !this.backlogged) return Promise.resolve();
    if (this.#tasks.length === 0) return this.#inner.drained();
    return new Promise<void>((resolve) => this.#drainWaiters.push(resolve)).then(() => this.drained());
  }

  get closed(): boolean {
    return this.#over || this.#inner.closed;
  }

  #push(task: Task): void {
    if (this.#over) return;
    this.#tasks.push(task);
    if (!this.#running) void this.#run();
  }

  async #run(): Promise<void> {
    this.#running = true;
    try {
      while (this.#tasks.length > 0 && !this.#over) {
        // The connection is gone or was cut off: nothing it would send can arrive.
        if (this.#inner.closed && !this.#final) {
          this.#stop();
          break;
        }
        const task = this.#tasks.shift() as Task;
        await task();
      }
    } catch (err) {
      if (this.#sub) this.#fail(this.#sub, err);
    } finally {
      this.#running = false;
      const waiters = this.#drainWaiters;
      this.#drainWaiters = [];
      for (const w of waiters) w();
    }
  }

  #stop(): void {
    this.#over = true;
    this.#tasks = [];
    this.#pendingBytes = 0;
  }

  #fail(sub: Subscription, err: unknown): void {
    if (this.#over) return;
    this.#stop();
    const e =
      err instanceof RunstreamError
        ? err
        : new RunstreamError(ErrorCode.Internal, 'chat view failed', { cause: err });
    this.#inner.error(sub, e);
    sub.close();
  }

  async #project(sub: Subscription, e: ChatInput): Promise<void> {
    if (this.#horizon > 0 && !this.#runsSeen.has(e.run_id)) {
      this.#runsSeen.add(e.run_id);
      if (isAnonymousAssistant(e)) await this.#tailFromStore(sub, e.run_id);
    }
    const key = this.#keys.keyOf(e);
    if (this.#horizon > 0 && !this.#builder.has(key)) await this.#adoptFromStore(sub, e, key);
    const change = this.#builder.apply(e, key);
    const m = change.message;
    if (this.#horizon > 0 && change.created && m.role === 'tool' && !m.name && m.tool_call_id) {
      await this.#nameFromStore(sub, m);
    }
    if (this.#over) return;
    const json = chatFrameJson(e.seq, change);
    // The view keeps no metadata once the message's first frame carried it.
    if (change.created) m.metadata_json = '';
    const frame = this.#inner.render.chat?.(sub, { seq: e.seq, json });
    // Cut off by this frame: the client resumes before it (the cut-off reads the cursor).
    if (frame !== undefined && !this.#inner.queue.send(frame)) return;
    this.#cursor = e.seq;
    if (this.#builder.size + this.#keys.size + this.#runsSeen.size > CHAT_VIEW_MAX_STATE) this.#seed(e.seq);
  }

  /**
   * A message this view has not seen may have begun before its horizon: an anonymous one
   * its seed said goes on (its key names its first seq), or a named one.
   */
  async #adoptFromStore(sub: Subscription, e: ChatInput, key: string): Promise<void> {
    const { userId } = sub.filter;
    const anonFirst = anonymousFirstSeq(key);
    if (anonFirst !== undefined) {
      if (anonFirst >= e.seq) return;
      const [first] = await shared(this.#pool, `at\u0000${this.#threadId}\u0000${anonFirst}`, () =>
        eventsAt(this.#pool, this.#threadId, [anonFirst]),
      );
      if (first !== undefined) this.#builder.adopt(key, first);
      return;
    }
    if (!isNamedAssistantKey(key)) return;
    const messageId = metadataId(e.metadata_json) as string;
    // Asked up to this event, not the horizon, so that every view meeting it shares the query.
    const first = await shared(
      this.#pool,
      `first\u0000${this.#threadId}\u0000${e.run_id}\u0000${messageId}\u0000${userId ?? ''}\u0000${e.seq}`,
      () =>
        firstOfMessage(this.#pool, {
          threadId: this.#threadId,
          runId: e.run_id,
          messageId,
          uptoSeq: e.seq - 1,
          userId,
        }),
    );
    if (first !== undefined && first.seq <= this.#horizon) this.#builder.adopt(key, first);
  }

  /** A tool result whose call this view has not seen: the call may be before its horizon. */
  async #nameFromStore(sub: Subscription, m: ChatMessage): Promise<void> {
    const { userId } = sub.filter;
    const calls = await shared(
      this.#pool,
      `calls\u0000${this.#threadId}\u0000${m.run_id}\u0000${m.tool_call_id}\u0000${userId ?? ''}\u0000${m.first_seq}`,
      () => toolCallsBefore(this.#pool, { threadId: this.#threadId, messages: [m], userId }),
    );
    nameTools([m], calls);
  }

  /**
   * Drops the projection's state: from here on, what of it lies before `cursor` is looked
   * up in the store when an event needs it (a run's anonymous message going on, a message
   * begun before it, a tool's name), as for a view that starts at `cursor`.
   */
  #seed(cursor: number): void {
    this.#keys = new ChatKeys();
    this.#builder = new ChatBuilder({ keep: false });
    this.#runsSeen = new Set();
    this.#horizon = cursor;
  }

  /** Whether `runId`'s last chat event up to the horizon was an anonymous assistant one, and of which message. */
  async #tailFromStore(sub: Subscription, runId: string): Promise<void> {
    const { userId } = sub.filter;
    const horizon = this.#horizon;
    const tails = await shared(
      this.#pool,
      `tail\u0000${this.#threadId}\u0000${runId}\u0000${userId ?? ''}\u0000${horizon}`,
      () => anonymousTails(this.#pool, { threadId: this.#threadId, uptoSeq: horizon, runId, userId }),
    );
    for (const t of tails) this.#keys.seedAnonymous(t.runId, t.firstSeq);
  }
}

/**
 * Store lookups in flight, by what they ask: subscribers that meet the same event at
 * once (a live event reaches them all in one turn) share one query.
 */
const inFlight = new WeakMap<pg.Pool, Map<string, Promise<unknown>>>();

function shared<T>(pool: pg.Pool, key: string, query: () => Promise<T>): Promise<T> {
  let byKey = inFlight.get(pool);
  if (byKey === undefined) {
    byKey = new Map();
    inFlight.set(pool, byKey);
  }
  const pending = byKey.get(key);
  if (pending !== undefined) return pending as Promise<T>;
  const p = query().finally(() => byKey.delete(key));
  byKey.set(key, p);
  return p;
}

/** The frame text of a change: its seq, its message's first-event fields (metadata on its first frame), what changed. */
export function chatFrameJson(seq: number, c: ChatChange): string {
  const m = c.message;
  const head = JSON.stringify({
    role: m.role,
    id: m.id,
    run_id: m.run_id,
    user_id: m.user_id,
    ...(m.role === 'tool' ? { tool_call_id: m.tool_call_id, name: m.name, is_error: m.is_error } : {}),
    first_seq: m.first_seq,
    created_at: m.created_at,
  });
  // The metadata goes with the message's first frame only: a client keeps it from there.
  const message = c.created ? `${head.slice(0, -1)},"metadata":${m.metadata_json}}` : head;
  const change = JSON.stringify({
    ...(c.append !== undefined ? { append: c.append } : {}),
    ...(c.content !== undefined ? { content: c.content } : {}),
    ...(c.toolCalls !== undefined ? { tool_calls: c.toolCalls } : {}),
  });
  return `{"seq":${seq},"message":${message}${change === '{}' ? '' : `,${change.slice(1, -1)}`}}`;
}

/** What the projection needs of a delivered event, read from its JSON once per event. */
const inputs = new WeakMap<DeliveredEvent, ChatInput>();

function chatInput(e: DeliveredEvent): ChatInput {
  let input = inputs.get(e);
  if (input === undefined) {
    const json = e.json();
    const parts = eventJsonParts(json);
    const created = /"created_at":"([^"]*)"/.exec(json)?.[1] ?? '';
    input = {
      seq: e.seq,
      run_id: e.run_id,
      user_id: e.user_id ?? '',
      event_type: e.event_type,
      created_at: created,
      content_json: parts.content,
      metadata_json: parts.metadata,
    };
    inputs.set(e, input);
  }
  return input;
}
