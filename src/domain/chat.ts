/**
 * The chat projection's rules: a thread's events seen as the messages a chat UI (or a
 * model's context) needs. History's `?view=chat` pages (history/chat.ts) and the live chat
 * view of subscriptions (fanout/core/chat-view.ts) both build messages with
 * {@link ChatBuilder}, one event at a time, so they cannot disagree.
 *
 * | event_type                                   | becomes                                                  |
 * |----------------------------------------------|----------------------------------------------------------|
 * | `human_message`, `user_message`              | a `human` message                                        |
 * | `system_message`                             | a `system` message                                       |
 * | `ai_chunk`, `ai_message_chunk`               | text appended to the `assistant` message `metadata.id`   |
 * | `ai_message`, `assistant_message`            | the whole text of the `assistant` message `metadata.id`  |
 * | `tool_call`                                  | a tool call of the `assistant` message `metadata.id`     |
 * | `tool_result`, `tool_message`                | a `tool` message answering `content.call_id`             |
 * | anything else (trace, lifecycle, headers...) | nothing                                                  |
 *
 * The mapping is by event_type, whatever the category (agents file `tool_call` under
 * `trace`). Assistant events without `metadata.id` that follow each other in a run (no
 * other chat event of the run between them) form one message, `seq-<its first seq>`.
 */

export type ChatRoleName = 'human' | 'assistant' | 'tool' | 'system';

const HUMAN_TYPES = ['human_message', 'user_message'];
const SYSTEM_TYPES = ['system_message'];
const CHUNK_TYPES = ['ai_chunk', 'ai_message_chunk'];
const WHOLE_TYPES = ['ai_message', 'assistant_message'];
export const TOOL_CALL_TYPES: readonly string[] = ['tool_call'];
const TOOL_RESULT_TYPES = ['tool_result', 'tool_message'];
/** Event types of assistant messages (those without `metadata.id` group by adjacency). */
export const ASSISTANT_TYPES: readonly string[] = [...CHUNK_TYPES, ...WHOLE_TYPES, ...TOOL_CALL_TYPES];

/** Every event_type the projection reads. */
export const CHAT_EVENT_TYPES: ReadonlySet<string> = new Set([
  ...HUMAN_TYPES,
  ...SYSTEM_TYPES,
  ...CHUNK_TYPES,
  ...WHOLE_TYPES,
  ...TOOL_CALL_TYPES,
  ...TOOL_RESULT_TYPES,
]);

export interface ChatToolCall {
  readonly id: string;
  name: string;
  /** As the producer sent them: a string is kept, anything else is its JSON text. */
  readonly arguments: string;
  readonly seq: number;
}

export interface ChatMessage {
  readonly role: ChatRoleName;
  readonly id: string;
  readonly run_id: string;
  readonly user_id: string;
  content: string;
  readonly tool_calls: ChatToolCall[];
  /** Tool messages: the call answered, its tool's name, and whether it failed. */
  tool_call_id?: string;
  name?: string;
  is_error?: boolean;
  readonly first_seq: number;
  last_seq: number;
  event_count: number;
  readonly created_at: string;
  /** metadata of the first event, as JSON text (a live view forgets it once sent: ''). */
  metadata_json: string;
}

/** What the projection needs of an event. */
export interface ChatInput {
  readonly seq: number;
  readonly run_id: string;
  readonly user_id: string;
  readonly event_type: string;
  readonly created_at: string;
  readonly content_json: string;
  readonly metadata_json: string;
}

type Kind = 'human' | 'system' | 'chunk' | 'whole' | 'call' | 'result';

function kindOf(eventType: string): Kind | undefined {
  if (CHUNK_TYPES.includes(eventType)) return 'chunk';
  if (TOOL_CALL_TYPES.includes(eventType)) return 'call';
  if (TOOL_RESULT_TYPES.includes(eventType)) return 'result';
  if (HUMAN_TYPES.includes(eventType)) return 'human';
  if (WHOLE_TYPES.includes(eventType)) return 'whole';
  if (SYSTEM_TYPES.includes(eventType)) return 'system';
  return undefined;
}

function parse(json: string): unknown {
  try {
    return JSON.parse(json) as unknown;
  } catch {
    return undefined;
  }
}

function asObject(v: unknown): Record<string, unknown> | undefined {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
    ? (v as Record<string, unknown>)
    : undefined;
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

/** `metadata.id` of an event, when it has one. */
export function metadataId(metadataJson: string): string | undefined {
  return str(asObject(parse(metadataJson))?.id);
}

/**
 * The text of a content value: a string; `{content}`, `{text}`, `{output}`; a list of
 * content blocks (`"text"` or `{type: "text", text}`), concatenated. Other values are
 * rendered as JSON text.
 */
export function textOf(v: unknown): string {
  if (typeof v === 'string') return v;
  if (v === null || v === undefined) return '';
  if (Array.isArray(v)) {
    return v.map((b) => (typeof b === 'string' ? b : (str(asObject(b)?.text) ?? ''))).join('');
  }
  const o = asObject(v);
  if (o) {
    for (const k of ['content', 'text', 'output']) if (k in o) return textOf(o[k]);
  }
  return JSON.stringify(v);
}

/** The tool calls one `tool_call` event carries: itself, or a `tool_calls` list. */
export function toolCallsOf(content: unknown, seq: number): ChatToolCall[] {
  const o = asObject(content);
  if (!o) return [];
  const list = Array.isArray(o.tool_calls) ? o.tool_calls : [o];
  const calls: ChatToolCall[] = [];
  for (const item of list) {
    const c = asObject(item);
    if (!c) continue;
    const args = c.arguments ?? c.args ?? c.input;
    calls.push({
      id: str(c.call_id) ?? str(c.id) ?? str(c.tool_call_id) ?? '',
      name: str(c.name) ?? '',
      arguments: typeof args === 'string' ? args : args === undefined ? '' : JSON.stringify(args),
      seq,
    });
  }
  return calls;
}

/** Which message an event belongs to, in scan order (either direction gives the same groups). */
/** An assistant event with no `metadata.id`: it goes on its run's anonymous message, if the run's last chat event was one. */
export function isAnonymousAssistant(e: Pick<ChatInput, 'event_type' | 'metadata_json'>): boolean {
  const kind = kindOf(e.event_type);
  return (
    (kind === 'chunk' || kind === 'whole' || kind === 'call') && metadataId(e.metadata_json) === undefined
  );
}

export class ChatKeys {
  /** Per run: the key of the anonymous assistant message the previous chat event belonged to. */
  readonly #anon = new Map<string, string>();

  keyOf(e: Pick<ChatInput, 'seq' | 'run_id' | 'event_type' | 'metadata_json'>): string {
    const kind = kindOf(e.event_type) as Kind;
    const id = metadataId(e.metadata_json);
    const assistant = kind === 'chunk' || kind === 'whole' || kind === 'call';
    if (assistant && id === undefined) {
      const key = this.#anon.get(e.run_id) ?? anonKey(e.run_id, e.seq);
      this.#anon.set(e.run_id, key);
      return key;
    }
    this.#anon.delete(e.run_id);
    if (assistant) return `a:${e.run_id}:${id}`;
    return `${kind}:${e.seq}`;
  }

  /** The run's last chat event (before where the keys start) was an anonymous assistant one, of the message begun at `firstSeq`. */
  seedAnonymous(runId: string, firstSeq: number): string {
    const key = anonKey(runId, firstSeq);
    this.#anon.set(runId, key);
    return key;
  }

  /** Runs whose last chat event is an anonymous assistant one: the state these keys hold. */
  get size(): number {
    return this.#anon.size;
  }
}

/** The key of an assistant message named by `metadata.id`: the one kind that may continue at any later seq. */
export function isNamedAssistantKey(key: string): boolean {
  return key.startsWith('a:');
}

/** The seq an anonymous message's key says it began at; undefined for other keys. */
export function anonymousFirstSeq(key: string): number | undefined {
  return key.startsWith('anon:') ? Number(key.slice(key.lastIndexOf(':') + 1)) : undefined;
}

function anonKey(runId: string, firstSeq: number): string {
  return `anon:${runId}:${firstSeq}`;
}

/** What one event did to the projection: the message it went to, and how it changed. */
export interface ChatChange {
  readonly message: ChatMessage;
  /** True when the event began the message. */
  readonly created: boolean;
  /** Text appended (a chunk, a human or tool text)... */
  readonly append?: string;
  /** ...or the message's whole text, replacing what it had (`ai_message`). */
  readonly content?: string;
  readonly toolCalls?: readonly ChatToolCall[];
}

/**
 * Builds messages from events in ascending seq order, one event at a time. A tool message
 * is named by its result's `name`, or else by the latest call with its call id in its run
 * before it: what is known at its first event, so the name never changes later and a view
 * that starts anywhere agrees. Calls before where the builder started are looked up in
 * the store ({@link unnamedTools}, {@link nameTools}).
 */
export class ChatBuilder {
  readonly #byKey = new Map<string, ChatMessage>();
  readonly #out: ChatMessage[] = [];
  /** Calls seen, by run and call id: the latest wins. */
  readonly #calls = new Map<string, ChatToolCall>();
  readonly #keep: boolean;

  /**
   * `keep: false` (a live view): messages are not listed and their text and calls not
   * accumulated; only what later events need is held (assistant messages, which may go
   * on, and calls), which {@link size} counts.
   */
  constructor(o: { keep?: boolean } = {}) {
    this.#keep = o.keep ?? true;
  }

  /** The messages built so far, in order of their first event (with `keep`). */
  get messages(): ChatMessage[] {
    return this.#out;
  }

  /** Messages and calls held for later events. */
  get size(): number {
    return this.#byKey.size + this.#calls.size;
  }

  has(key: string): boolean {
    return this.#byKey.has(key);
  }

  /** A message begun before this builder started goes on under `key`: its first event's fields. */
  adopt(key: string, first: ChatInput): void {
    this.#byKey.set(key, this.#begin(first, key, 'whole', undefined));
  }

  #begin(e: ChatInput, key: string, kind: Kind, content: unknown): ChatMessage {
    const role: ChatRoleName =
      kind === 'human' ? 'human' : kind === 'system' ? 'system' : kind === 'result' ? 'tool' : 'assistant';
    const c = asObject(content);
    const metadata = asObject(parse(e.metadata_json));
    const callId =
      kind === 'result'
        ? (str(c?.call_id) ?? str(c?.tool_call_id) ?? str(metadata?.tool_call_id))
        : undefined;
    const m: ChatMessage = {
      role,
      id: (kind === 'result' ? callId : str(metadata?.id)) ?? `seq-${firstSeqOf(key, e.seq)}`,
      run_id: e.run_id,
      user_id: e.user_id,
      content: '',
      tool_calls: [],
      first_seq: e.seq,
      last_seq: e.seq,
      event_count: 0,
      created_at: e.created_at,
      metadata_json: e.metadata_json,
    };
    if (kind === 'result') {
      m.tool_call_id = callId ?? '';
      const call = m.tool_call_id ? this.#calls.get(callKey(e.run_id, m.tool_call_id)) : undefined;
      m.name = str(c?.name) ?? call?.name ?? '';
      m.is_error = c?.is_error === true || c?.status === 'error';
    }
    return m;
  }

  /** Applies one chat event (of a {@link CHAT_EVENT_TYPES} type) under its key. */
  apply(e: ChatInput, key: string): ChatChange {
    const kind = kindOf(e.event_type) as Kind;
    const content = parse(e.content_json);
    let m = this.#byKey.get(key);
    const created = m === undefined;
    if (!m) {
      m = this.#begin(e, key, kind, content);
      if (this.#keep) this.#out.push(m);
      if (this.#keep || m.role === 'assistant') this.#byKey.set(key, m);
    }
    m.last_seq = e.seq;
    m.event_count++;
    switch (kind) {
      case 'call': {
        const calls = toolCallsOf(content, e.seq);
        if (this.#keep) m.tool_calls.push(...calls);
        for (const call of calls) {
          // A live view needs a call's name, not its arguments.
          if (call.id)
            this.#calls.set(callKey(e.run_id, call.id), this.#keep ? call : { ...call, arguments: '' });
        }
        return { message: m, created, toolCalls: calls };
      }
      case 'whole': {
        const text = textOf(content); // the whole message replaces any chunks seen
        if (this.#keep) m.content = text;
        return { message: m, created, content: text };
      }
      default: {
        const text = textOf(content);
        if (this.#keep) m.content += text;
        return { message: m, created, append: text };
      }
    }
  }
}

function callKey(runId: string, callId: string): string {
  return `${runId}\u0000${callId}`;
}

/** Tool messages still without a name whose call may be in the store, before them. */
export function unnamedTools(messages: readonly ChatMessage[]): ChatMessage[] {
  return messages.filter((m) => m.role === 'tool' && !m.name && m.tool_call_id);
}

/** A stored tool-call event: the candidates {@link nameTools} picks from. */
export interface StoredToolCall {
  readonly run_id: string;
  readonly seq: number;
  readonly content_json: string;
}

/** Names each message from the latest call with its call id in its run before it, if any. */
export function nameTools(messages: readonly ChatMessage[], calls: readonly StoredToolCall[]): void {
  const latestFirst = [...calls].sort((a, b) => b.seq - a.seq);
  for (const m of messages) {
    for (const c of latestFirst) {
      if (c.run_id !== m.run_id || c.seq >= m.first_seq) continue;
      // The last with that id in its event, as the builder keeps it.
      const call = toolCallsOf(parse(c.content_json), c.seq).findLast((t) => t.id === m.tool_call_id);
      if (call) {
        m.name = call.name;
        break;
      }
    }
  }
}

/** An anonymous message's id is `seq-<the seq its key names>`; any other `seq-<this event's seq>`. */
function firstSeqOf(key: string, seq: number): number {
  return anonymousFirstSeq(key) ?? seq;
}

/** Builds messages from events in ascending seq order, grouped by the keys given. */
export function assemble(events: readonly ChatInput[], keys: readonly string[]): ChatMessage[] {
  const b = new ChatBuilder();
  events.forEach((e, i) => {
    b.apply(e, keys[i] as string);
  });
  return b.messages;
}
