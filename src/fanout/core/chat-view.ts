/**
 * The live chat view of a subscription (`"view": "chat"`): the chat projection of
 * domain/chat.ts as it grows, one frame per chat event, each carrying the seq it reflects.
 *
 * A frame names its message (`message`: the fields the message has from its first event)
 * and says what the event changed: `append` (text added), `content` (the whole text,
 * replacing), `tool_calls` (calls added), `named` (tool messages that now know their
 * tool). A client applies it so: take the message with that id, or add it (with empty
 * `content` and `tool_calls`, at the end of the list); set its `last_seq` to the frame's
 * seq and add 1 to its `event_count`; then apply the change. A client that holds History's
 * chat view at seq N (or nothing at N = 0), subscribes after N and applies every frame
 * holds exactly History's chat view at the last frame's seq.
 *
 * To start after N > 0, the view needs what of the projection's state lies before N: which
 * runs end in an anonymous assistant message, and from which seq (so that chunks after N
 * join it), looked up once at the start; and the names of tools whose calls are before N,
 * looked up when a result needs one. So the view processes its events in order, in a queue
 * of its own, awaiting those lookups; the queue is bounded like a send queue.
 */
import type pg from 'pg';
import {
  ASSISTANT_TYPES,
  CHAT_EVENT_TYPES,
  ChatBuilder,
  type ChatChange,
  type ChatInput,
  ChatKeys,
  type ChatMessage,
  TOOL_CALL_TYPES,
  toolCallsOf,
} from '../../domain/chat.js';
import type { RunStatusName } from '../../domain/run-lifecycle.js';
import { ErrorCode, RunstreamError } from '../../errors.js';
import { toolCallsById } from '../../history/queries.js';
import { eventJsonParts } from '../event-json-parts.js';
import type { QueuedSink } from './queued-sink.js';
import type {
  DeliveredEvent,
  Subscription,
  SubscriptionResources,
  SubscriptionSink,
} from './subscription.js';

/** Events a chat view holds unprocessed at most; past it, its subscriber is too slow. */
export const CHAT_VIEW_MAX_PENDING = 10_000;

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
  readonly #keys = new ChatKeys();
  readonly #builder = new ChatBuilder();
  #sub: Subscription | undefined;
  #tasks: Task[] = [];
  #running = false;
  #drainWaiters: (() => void)[] = [];
  /** The last seq whose change went out: where a client of this view resumes. */
  #cursor = 0;
  #over = false;

  constructor(inner: QueuedSink<F>, resources: SubscriptionResources, threadId: string) {
    this.#inner = inner;
    this.#pool = resources.pool;
    this.#threadId = threadId;
  }

  attach(sub: Subscription): void {
    this.#sub = sub;
  }

  resumeCursor(): number {
    return this.#cursor;
  }

  started(sub: Subscription, cursor: number): void {
    this.#cursor = cursor;
    if (cursor > 0) this.#push(() => this.#seed(sub, cursor));
  }

  event(sub: Subscription, e: DeliveredEvent): void {
    if (this.#tasks.length >= CHAT_VIEW_MAX_PENDING) {
      this.#fail(
        sub,
        new RunstreamError(
          ErrorCode.SlowConsumer,
          `the chat view holds ${CHAT_VIEW_MAX_PENDING} events not yet sent; resubscribe after_seq ${this.#cursor}`,
        ),
      );
      return;
    }
    const input = chatInput(e);
    this.#push(() => this.#project(sub, input));
  }

  live(sub: Subscription, seq: number): void {
    this.#push(() => {
      if (seq > this.#cursor) this.#cursor = seq;
      this.#inner.live(sub, seq);
    });
  }

  end(sub: Subscription, runId: string, seq: number, status: RunStatusName): void {
    this.#push(() => {
      if (seq > this.#cursor) this.#cursor = seq;
      this.#inner.end(sub, runId, seq, status);
    });
  }

  deleted(sub: Subscription, runId: string | undefined): void {
    this.#push(() => this.#inner.deleted(sub, runId));
  }

  error(sub: Subscription, err: RunstreamError): void {
    this.#push(() => this.#inner.error(sub, err));
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

  #fail(sub: Subscription, err: unknown): void {
    if (this.#over) return;
    this.#over = true;
    this.#tasks = [];
    const e =
      err instanceof RunstreamError
        ? err
        : new RunstreamError(ErrorCode.Internal, 'chat view failed', { cause: err });
    this.#inner.error(sub, e);
    sub.close();
  }

  async #project(sub: Subscription, e: ChatInput): Promise<void> {
    const change = this.#builder.apply(e, this.#keys.keyOf(e));
    const m = change.message;
    if (change.created && m.role === 'tool' && !m.name && m.tool_call_id) {
      await this.#nameFromStore(m);
    }
    this.#cursor = e.seq;
    const json = chatFrameJson(e.seq, change);
    const frame = this.#inner.render.chat?.(sub, { seq: e.seq, json });
    if (frame !== undefined) this.#inner.queue.send(frame);
  }

  /** A tool result whose call this view has not seen: the call is before where the view began. */
  async #nameFromStore(m: ChatMessage): Promise<void> {
    const found = await toolCallsById(this.#pool, {
      threadId: this.#threadId,
      runIds: [m.run_id],
      callIds: [m.tool_call_id as string],
      beforeSeq: m.first_seq,
      eventTypes: TOOL_CALL_TYPES,
    });
    for (const json of found) {
      const call = toolCallsOf(JSON.parse(json) as unknown, 0).find((c) => c.id === m.tool_call_id);
      if (call) {
        this.#builder.knowCall(call);
        return;
      }
    }
  }

  /**
   * The projection's state at `cursor`: each run whose last chat event up to it is an
   * anonymous assistant event continues that message, from the seq where it began.
   */
  async #seed(sub: Subscription, cursor: number): Promise<void> {
    const { runId, userId } = sub.filter;
    const { rows } = await this.#pool.query<{ run_id: string; first_seq: string }>({
      name: `rs_chat_seed${runId === undefined ? '' : '_run'}${userId === undefined ? '' : '_user'}`,
      text: seedSql(runId !== undefined, userId !== undefined),
      values: [
        this.#threadId,
        cursor,
        [...CHAT_EVENT_TYPES],
        ASSISTANT_TYPES,
        ...(runId === undefined ? [] : [runId]),
        ...(userId === undefined ? [] : [userId]),
      ],
    });
    for (const r of rows) this.#keys.seedAnonymous(r.run_id, Number(r.first_seq));
  }
}

/** `(metadata->'id')` is a non-empty string: the event names its message. */
const NAMED = `(json_typeof(e.metadata->'id') = 'string' AND e.metadata->>'id' <> '')`;

/**
 * Per run of the thread (begun by the cursor), its last chat event up to the cursor; of the
 * runs where that is an anonymous assistant event, the seq where that message began: the
 * first chat event after the run's last chat event that is not one.
 */
function seedSql(byRun: boolean, byUser: boolean): string {
  const user = byUser ? ` AND e.user_id = $${byRun ? 6 : 5}` : '';
  const chat = `e.thread_id = $1 AND e.run_id = r.run_id AND e.seq <= $2 AND e.event_type = ANY($3::text[])${user}`;
  const anon = `(e.event_type = ANY($4::text[]) AND NOT ${NAMED})`;
  return `
    SELECT r.run_id,
           (SELECT min(e.seq) FROM run_events e
             WHERE ${chat} AND e.seq > COALESCE((
               SELECT e.seq FROM run_events e WHERE ${chat} AND NOT ${anon} ORDER BY e.seq DESC LIMIT 1), 0)
           ) AS first_seq
      FROM runs r
      CROSS JOIN LATERAL (SELECT ${anon} AS anon FROM run_events e WHERE ${chat} ORDER BY e.seq DESC LIMIT 1) l
     WHERE r.thread_id = $1 AND r.first_seq <= $2 AND l.anon${byRun ? ' AND r.run_id = $5' : ''}`;
}

/** The frame text of a change: its seq, its message's first-event fields, what changed. */
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
  const message = `${head.slice(0, -1)},"metadata":${m.metadata_json}}`;
  const change = JSON.stringify({
    ...(c.append !== undefined ? { append: c.append } : {}),
    ...(c.content !== undefined ? { content: c.content } : {}),
    ...(c.toolCalls !== undefined ? { tool_calls: c.toolCalls } : {}),
    ...(c.named !== undefined ? { named: c.named.map((t) => ({ id: t.id, name: t.name })) } : {}),
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
