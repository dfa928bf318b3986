/**
 * History's chat view (`?view=chat`, ListChatMessages): pages of the chat projection
 * (domain/chat.ts), derived from the stored events on every read, never stored.
 *
 * Paging is by seq: a page is the seq range its messages came from, chosen so that it
 * holds at most `limit` messages, and ends just before the event that would start one
 * more. Every event is in exactly one page, so messages whose events are contiguous (the
 * usual case) are whole on one page; a message whose events interleave with a later
 * message's across a page boundary comes in parts with the same id, to be merged by id.
 */
import type pg from 'pg';
import {
  assemble,
  CHAT_EVENT_TYPES,
  ChatKeys,
  type ChatMessage,
  TOOL_CALL_TYPES,
  toolCallsOf,
} from '../domain/chat.js';
import type { StoredEvent } from '../domain/event.js';
import type { EventFilter } from '../domain/filter.js';
import { readEventsPage } from '../persist/queries.js';
import { pageCursors } from './page-cursors.js';
import { toolCallsById } from './queries.js';

export type { ChatMessage, ChatRoleName, ChatToolCall } from '../domain/chat.js';

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
  const keys = new ChatKeys();
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
      const call = toolCallsOf(JSON.parse(json) as unknown, 0).find((c) => c.id === m.tool_call_id);
      if (call) {
        m.name = call.name;
        break;
      }
    }
  }
}
