/**
 * The chat projection: a thread's log seen as the messages a chat UI (or a model's
 * context) needs. Derived from the stored events on every read, never stored.
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
 * other chat event of the run between them) form one message.
 *
 * Paging is by seq: a page is the seq range its messages came from, chosen so that it
 * holds at most `limit` messages, and ends just before the event that would start one
 * more. Every event is in exactly one page, so messages whose events are contiguous (the
 * usual case) are whole on one page; a message whose events interleave with a later
 * message's across a page boundary comes in parts with the same id, to be merged by id.
 */
import type pg from 'pg';
import type { StoredEvent } from '../event.js';
import type { EventFilter } from '../fanout/filter.js';
import { readEventsPage } from '../persist/queries.js';
import { pageCursors } from './page-cursors.js';
import { toolCallsById } from './queries.js';

export type ChatRoleName = 'human' | 'assistant' | 'tool' | 'system';

const HUMAN_TYPES = ['human_message', 'user_message'];
const SYSTEM_TYPES = ['system_message'];
const CHUNK_TYPES = ['ai_chunk', 'ai_message_chunk'];
const WHOLE_TYPES = ['ai_message', 'assistant_message'];
export const TOOL_CALL_TYPES: readonly string[] = ['tool_call'];
const TOOL_RESULT_TYPES = ['tool_result', 'tool_message'];

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
  /** metadata of the first event, as JSON text. */
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
function toolCallsOf(content: unknown, seq: number): ChatToolCall[] {
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
class Keys {
  /** Per run: the key of the anonymous assistant message the previous chat event belonged to. */
  readonly #anon = new Map<string, string>();

  keyOf(e: StoredEvent): string {
    const kind = kindOf(e.event_type) as Kind;
    const id = str(asObject(parse(e.metadata_json))?.id);
    const assistant = kind === 'chunk' || kind === 'whole' || kind === 'call';
    if (assistant && id === undefined) {
      const key = this.#anon.get(e.run_id) ?? `anon:${e.run_id}:${e.seq}`;
      this.#anon.set(e.run_id, key);
      return key;
    }
    this.#anon.delete(e.run_id);
    if (assistant) return `a:${e.run_id}:${id}`;
    return `${kind}:${e.seq}`;
  }
}

/** Builds messages from events in ascending seq order, grouped by the keys given. */
export function assemble(events: readonly StoredEvent[], keys: readonly string[]): ChatMessage[] {
  const byKey = new Map<string, ChatMessage>();
  const out: ChatMessage[] = [];
  events.forEach((e, i) => {
    const key = keys[i] as string;
    const kind = kindOf(e.event_type) as Kind;
    const content = parse(e.content_json);
    const metadata = asObject(parse(e.metadata_json));
    let m = byKey.get(key);
    if (!m) {
      const role: ChatRoleName =
        kind === 'human' ? 'human' : kind === 'system' ? 'system' : kind === 'result' ? 'tool' : 'assistant';
      const c = asObject(content);
      const callId =
        kind === 'result'
          ? (str(c?.call_id) ?? str(c?.tool_call_id) ?? str(metadata?.tool_call_id))
          : undefined;
      m = {
        role,
        id: (kind === 'result' ? callId : str(metadata?.id)) ?? `seq-${e.seq}`,
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
        m.name = str(c?.name) ?? '';
        m.is_error = c?.is_error === true || c?.status === 'error';
      }
      byKey.set(key, m);
      out.push(m);
    }
    m.last_seq = e.seq;
    m.event_count++;
    switch (kind) {
      case 'call':
        m.tool_calls.push(...toolCallsOf(content, e.seq));
        break;
      case 'whole':
        m.content = textOf(content); // the whole message replaces any chunks seen
        break;
      default:
        m.content += textOf(content);
    }
  });
  // Tool results name the tool of the call they answer.
  const calls = new Map<string, ChatToolCall>();
  for (const m of out) for (const c of m.tool_calls) calls.set(c.id, c);
  for (const m of out) {
    if (m.role === 'tool' && !m.name && m.tool_call_id) m.name = calls.get(m.tool_call_id)?.name ?? '';
  }
  return out;
}

export interface ChatQuery {
  readonly threadId: string;
  readonly runId?: string | undefined;
  readonly userId?: string | undefined;
  readonly afterSeq: number;
  /** Set: the page before it, newest message first. */
  readonly beforeSeq?: number | undefined;
  /** Most messages in the page. */
  readonly limit: number;
  /**
   * Bytes of event content and metadata the page is made of, at most: past them the page
   * ends, even inside a message, which the next page continues under the same id.
   */
  readonly maxBytes?: number | undefined;
}

export interface ChatPage {
  /** Ascending by first_seq, or descending with `beforeSeq`. */
  readonly messages: ChatMessage[];
  readonly nextAfterSeq: number | undefined;
  readonly nextBeforeSeq: number | undefined;
  readonly hasMore: boolean;
}

/** Events read per query while a page is assembled. */
export const CHAT_SCAN_BATCH = 500;

/** One page of the chat projection. */
export async function chatPage(db: pg.Pool, q: ChatQuery): Promise<ChatPage> {
  const descending = q.beforeSeq !== undefined;
  const filter: EventFilter = {
    runId: q.runId,
    categories: undefined,
    eventTypes: CHAT_EVENT_TYPES,
    userId: q.userId,
  };
  const keys = new Keys();
  const seen = new Set<string>();
  const events: StoredEvent[] = [];
  const eventKeys: string[] = [];
  let after = q.afterSeq;
  let before = q.beforeSeq;
  let hasMore = false;
  let bytesLeft = q.maxBytes;
  scan: for (;;) {
    const {
      events: batch,
      truncated,
      bytes,
    } = await readEventsPage(db, {
      threadId: q.threadId,
      afterSeq: after,
      beforeSeq: before,
      descending,
      filter,
      limit: CHAT_SCAN_BATCH,
      maxBytes: bytesLeft,
    });
    for (const e of batch) {
      const key = keys.keyOf(e);
      if (!seen.has(key)) {
        if (seen.size === q.limit) {
          hasMore = true;
          break scan;
        }
        seen.add(key);
      }
      events.push(e);
      eventKeys.push(key);
    }
    if (bytesLeft !== undefined) {
      bytesLeft -= bytes;
      if (truncated || bytesLeft <= 0) {
        hasMore = true;
        break;
      }
    }
    if (batch.length < CHAT_SCAN_BATCH) break;
    const last = batch[batch.length - 1] as StoredEvent;
    if (descending) before = last.seq;
    else after = last.seq;
  }
  if (descending) {
    events.reverse();
    eventKeys.reverse();
  }
  const messages = assemble(events, eventKeys);
  await nameToolResults(db, q, messages);
  if (descending) messages.reverse();
  // Events are ascending here: a descending page continues before its first.
  const edge = descending ? events[0] : events[events.length - 1];
  return { messages, ...pageCursors(q, edge?.seq), hasMore };
}

/** Tool results whose call is on an earlier page get the tool's name from the store. */
async function nameToolResults(db: pg.Pool, q: ChatQuery, messages: readonly ChatMessage[]): Promise<void> {
  const unnamed = messages.filter((m) => m.role === 'tool' && !m.name && m.tool_call_id);
  if (unnamed.length === 0) return;
  const found = await toolCallsById(db, {
    threadId: q.threadId,
    runIds: [...new Set(unnamed.map((m) => m.run_id))],
    callIds: unnamed.map((m) => m.tool_call_id as string),
    beforeSeq: Math.max(...unnamed.map((m) => m.first_seq)),
    eventTypes: TOOL_CALL_TYPES,
  });
  for (const m of unnamed) {
    for (const json of found) {
      const call = toolCallsOf(parse(json), 0).find((c) => c.id === m.tool_call_id);
      if (call) {
        m.name = call.name;
        break;
      }
    }
  }
}
