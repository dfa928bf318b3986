/**
 * The History operations, independent of transport: gRPC (grpc-service.ts) and HTTP
 * (http-routes.ts) parse their requests into these queries and render the results.
 *
 * Every operation takes the caller's {@link Principal}: reads need `canRead(thread)`,
 * deletes `canRead` and `canPublish`. A principal scoped to a user forces the user scope
 * (`user_id`): asking for another user is PERMISSION_DENIED, asking for none gets theirs.
 */
import type pg from 'pg';
import type { Principal } from '../auth/principal.js';
import { readScope, userScope, writeScope } from '../auth/scope.js';
import type { StoredEvent } from '../domain/event.js';
import type { RunStatusName } from '../domain/run-lifecycle.js';
import { ErrorCode, RunstreamError } from '../errors.js';
import { readEventsPage } from '../persist/queries.js';
import { countMessages, getRun, listRuns, type RunRecord } from '../persist/runs.js';
import { listThreads, type ThreadRecord } from '../persist/threads.js';
import { type ChatPage, chatPage } from './chat.js';
import type { DeleteResult, Deleter } from './deleter.js';
import { pageCursors } from './page-cursors.js';

export interface EventsQuery {
  readonly threadId: string;
  readonly runId?: string | undefined;
  readonly categories?: ReadonlySet<string> | undefined;
  readonly eventTypes?: ReadonlySet<string> | undefined;
  readonly afterSeq: number;
  /** Set (>= 1): the page below it, newest first. */
  readonly beforeSeq?: number | undefined;
  readonly limit: number;
  readonly userId?: string | undefined;
  /** Only events whose `metadata.task_id` is this string (DeerFlow's subagent tasks). */
  readonly taskId?: string | undefined;
}

export interface EventsPage {
  /** Ascending, or descending when the query had `beforeSeq`. */
  readonly events: StoredEvent[];
  /** Ascending pages: the next page's after_seq. */
  readonly nextAfterSeq: number | undefined;
  /** Descending pages: the next (earlier) page's before_seq. */
  readonly nextBeforeSeq: number | undefined;
  readonly hasMore: boolean;
}

export interface ChatQueryIn {
  readonly threadId: string;
  readonly runId?: string | undefined;
  readonly afterSeq: number;
  readonly beforeSeq?: number | undefined;
  readonly limit: number;
  readonly userId?: string | undefined;
}

export interface RunsQueryIn {
  readonly threadId: string;
  readonly beforeSeq?: number | undefined;
  readonly statuses?: readonly RunStatusName[] | undefined;
  readonly limit: number;
  readonly userId?: string | undefined;
}

export interface RunsPage {
  /** Newest first. */
  readonly runs: RunRecord[];
  readonly nextBeforeSeq: number | undefined;
  readonly hasMore: boolean;
}

export interface ThreadsQueryIn {
  /** Only threads whose id sorts after this one (the previous page's `next_after`). */
  readonly after?: string | undefined;
  readonly limit: number;
  readonly userId?: string | undefined;
}

export interface ThreadsPage {
  /** In thread id order. */
  readonly threads: ThreadRecord[];
  readonly nextAfter: string | undefined;
  readonly hasMore: boolean;
}

export interface HistoryOptions {
  readonly pool: pg.Pool;
  readonly deleter: Deleter;
  /** Bytes of event content and metadata one page holds at most (RS_MAX_PAGE_BYTES). */
  readonly maxPageBytes: number;
}

export class History {
  readonly #o: HistoryOptions;

  constructor(o: HistoryOptions) {
    this.#o = o;
  }

  async listEvents(p: Principal, q: EventsQuery): Promise<EventsPage> {
    const userId = readScope(p, q.threadId, q.userId);
    const descending = q.beforeSeq !== undefined;
    const { events: rows, truncated } = await readEventsPage(this.#o.pool, {
      threadId: q.threadId,
      afterSeq: q.afterSeq,
      beforeSeq: q.beforeSeq,
      descending,
      filter: { runId: q.runId, categories: q.categories, eventTypes: q.eventTypes, userId },
      taskId: q.taskId,
      limit: q.limit + 1, // one more than asked: whether there is a next page
      maxBytes: this.#o.maxPageBytes,
    });
    // A page cut at its byte budget may hold fewer events than asked; more follow.
    const hasMore = rows.length > q.limit || truncated;
    const events = rows.length > q.limit ? rows.slice(0, q.limit) : rows;
    return { events, ...pageCursors(q, events[events.length - 1]?.seq), hasMore };
  }

  async countMessages(p: Principal, threadId: string, runId?: string, userId?: string): Promise<number> {
    return countMessages(this.#o.pool, threadId, runId, readScope(p, threadId, userId));
  }

  async chat(p: Principal, q: ChatQueryIn): Promise<ChatPage> {
    return chatPage(this.#o.pool, {
      ...q,
      userId: readScope(p, q.threadId, q.userId),
      maxBytes: this.#o.maxPageBytes,
    });
  }

  async getRun(p: Principal, threadId: string, runId: string, userId?: string): Promise<RunRecord> {
    const run = await getRun(this.#o.pool, threadId, runId, readScope(p, threadId, userId));
    if (!run) throw new RunstreamError(ErrorCode.NotFound, `run ${runId} of thread ${threadId} not found`);
    return run;
  }

  async listRuns(p: Principal, q: RunsQueryIn): Promise<RunsPage> {
    const userId = readScope(p, q.threadId, q.userId);
    const rows = await listRuns(this.#o.pool, { ...q, userId, limit: q.limit + 1 });
    const hasMore = rows.length > q.limit;
    const runs = hasMore ? rows.slice(0, q.limit) : rows;
    return { runs, nextBeforeSeq: runs[runs.length - 1]?.first_seq ?? q.beforeSeq, hasMore };
  }

  /** The threads `p` may read that have runs; a user-scoped token sees only its user's. */
  async listThreads(p: Principal, q: ThreadsQueryIn): Promise<ThreadsPage> {
    const { readable } = p;
    const rows = await listThreads(this.#o.pool, {
      ...(readable.all ? {} : { ids: readable.ids, prefixes: readable.prefixes }),
      userId: userScope(p, q.userId),
      after: q.after,
      limit: q.limit + 1,
    });
    const hasMore = rows.length > q.limit;
    const threads = hasMore ? rows.slice(0, q.limit) : rows;
    return { threads, nextAfter: threads[threads.length - 1]?.thread_id ?? q.after, hasMore };
  }

  async deleteThread(p: Principal, threadId: string, userId?: string): Promise<DeleteResult> {
    return this.#o.deleter.deleteThread(threadId, writeScope(p, threadId, userId));
  }

  async deleteRun(p: Principal, threadId: string, runId: string, userId?: string): Promise<DeleteResult> {
    return this.#o.deleter.deleteRun(threadId, runId, writeScope(p, threadId, userId));
  }
}

export { readScope, userScope, writeScope } from '../auth/scope.js';
