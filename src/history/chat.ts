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
import type { ChatMessage } from '../domain/chat.js';
import { assemble, CHAT_EVENT_TYPES, ChatKeys, nameTools, unnamedTools } from '../domain/chat.js';
import type { StoredEvent } from '../domain/event.js';
import type { EventFilter } from '../domain/filter.js';
import { anonymousTails, readEventsPage, toolCallsBefore } from '../persist/queries.js';
import { pageCursors } from './page-cursors.js';

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
  if (descending) events.reverse();
  const messages = assemble(events, await ascendingKeys(db, q, events));
  await nameToolResults(db, q, messages);
  if (descending) messages.reverse();
  // Events are ascending here: a descending page continues before its first.
  const edge = descending ? events[0] : events[events.length - 1];
  return { messages, ...pageCursors(q, edge?.seq), hasMore };
}

/**
 * The events' message keys in ascending order, from the state before the first of them:
 * an anonymous assistant message begun before the page goes on in it under its id.
 */
async function ascendingKeys(db: pg.Pool, q: ChatQuery, events: readonly StoredEvent[]): Promise<string[]> {
  const keys = new ChatKeys();
  const before = (events[0]?.seq ?? 1) - 1;
  if (before > 0) {
    const tails = await anonymousTails(db, {
      threadId: q.threadId,
      uptoSeq: before,
      runId: q.runId,
      userId: q.userId,
    });
    for (const t of tails) keys.seedAnonymous(t.runId, t.firstSeq);
  }
  return events.map((e) => keys.keyOf(e));
}

/** Tool results whose call is on an earlier page get the tool's name from the store. */
async function nameToolResults(db: pg.Pool, q: ChatQuery, messages: readonly ChatMessage[]): Promise<void> {
  const unnamed = unnamedTools(messages);
  if (unnamed.length === 0) return;
  nameTools(
    unnamed,
    await toolCallsBefore(db, { threadId: q.threadId, messages: unnamed, userId: q.userId }),
  );
}
