/**
 * History on HTTP, under `/v1/threads` (docs/api.md), as routes of the HTTP port's router.
 * Every route takes only its own query parameters (and `access_token`): any other is
 * refused naming it, so a misspelt `aftr_seq` is an error, not a page from seq 1.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type Authenticator, bearerFromHttp, type Principal } from '../auth/principal.js';
import { optionalId, pathId } from '../domain/ids.js';
import { InvalidArgumentError, quote } from '../errors.js';
import type { Route, RouteParams } from '../http/router.js';
import { endJson } from '../http/unsent.js';
import { intParam, LIST_PARAMS, listParam, sendError, sendJson, strictQuery } from '../http/util.js';
import type { EventsPage, EventsQuery, History } from './history.js';
import {
  categoriesOf,
  DEFAULT_HISTORY_LIMIT,
  eventTypesOf,
  MAX_HISTORY_LIMIT,
  statusesOf,
} from './params.js';
import { chatMessageJson, eventsJson, runJson } from './render.js';

const THREAD = '/v1/threads/{thread_id}';
const RUN = `${THREAD}/runs/{run_id}`;

/** The longest a long-poll may wait. */
export const MAX_WAIT_MS = 60_000;

/**
 * Answers an events request that may wait (`wait_ms` > 0): as soon as events past the
 * cursor exist, or empty at the deadline. Served by the fan-out's subscription core.
 */
export type LongPoll = (p: Principal, q: EventsQuery, waitMs: number, res: ServerResponse) => Promise<void>;

export interface HistoryRoutesOptions {
  readonly history: History;
  readonly auth: Authenticator;
  /** Long-poll on the events routes; absent: `wait_ms` is refused. */
  readonly longPoll?: LongPoll | undefined;
}

interface Paging {
  readonly afterSeq: number;
  readonly beforeSeq: number | undefined;
  readonly limit: number;
  readonly userId: string | undefined;
}

function paging(url: URL): Paging {
  const before = intParam(url, 'before_seq', 0, 1, Number.MAX_SAFE_INTEGER);
  return {
    afterSeq: intParam(url, 'after_seq', 0, 0, Number.MAX_SAFE_INTEGER),
    beforeSeq: before === 0 ? undefined : before,
    limit: intParam(url, 'limit', DEFAULT_HISTORY_LIMIT, 1, MAX_HISTORY_LIMIT),
    userId: optionalId(url.searchParams.get('user_id'), 'user_id'),
  };
}

/** A page's cursor field: `next_before_seq` when paging backwards, else `next_after_seq`. */
function cursorJson(p: Pick<EventsPage, 'nextAfterSeq' | 'nextBeforeSeq'>): string {
  return p.nextBeforeSeq !== undefined
    ? `"next_before_seq":${p.nextBeforeSeq}`
    : `"next_after_seq":${p.nextAfterSeq ?? 0}`;
}

export function pageJson(p: EventsPage): string {
  return `{"events":${eventsJson(p.events)},${cursorJson(p)},"has_more":${p.hasMore}}`;
}

/** `?view=`: `events` (the default) or `chat`. */
function viewOf(url: URL): 'events' | 'chat' {
  const v = url.searchParams.get('view');
  if (v === null || v === '' || v === 'events') return 'events';
  if (v === 'chat') return 'chat';
  throw new InvalidArgumentError('view', `must be "events" or "chat" (got ${quote(v)})`);
}

const PAGING = ['after_seq', 'before_seq', 'limit', 'user_id'];

/** Refuses a query parameter the route does not take, naming it. */
function strict(url: URL, allowed: readonly string[]): void {
  strictQuery(url, new Set([...allowed, 'access_token']), "this route's query", LIST_PARAMS);
}

/** Every History route. */
export function historyRoutes(o: HistoryRoutesOptions): Route[] {
  const h = o.history;
  const route = (
    method: string,
    path: string,
    params: readonly string[],
    handle: (
      p: Principal,
      ids: { threadId: string; runId?: string },
      url: URL,
      res: ServerResponse,
    ) => Promise<void>,
  ): Route => ({
    method,
    path,
    owner: 'history',
    async handle(req: IncomingMessage, res: ServerResponse, raw: RouteParams, url: URL): Promise<void> {
      try {
        const threadId = pathId(raw.thread_id, 'thread_id');
        const runId = raw.run_id === undefined ? undefined : pathId(raw.run_id, 'run_id');
        strict(url, params);
        const principal = await o.auth.authenticate(bearerFromHttp(req, url));
        await handle(principal, { threadId, ...(runId === undefined ? {} : { runId }) }, url, res);
      } catch (err) {
        sendError(res, err);
      }
    },
  });

  /** An events page; with `wait_ms` > 0, a long-poll that waits for the first events past the cursor. */
  const events = async (
    p: Principal,
    threadId: string,
    runId: string | undefined,
    url: URL,
    res: ServerResponse,
  ) => {
    const q: EventsQuery = {
      threadId,
      runId,
      categories: categoriesOf(listParam(url, 'categories')),
      eventTypes: eventTypesOf(listParam(url, 'event_types')),
      ...paging(url),
    };
    const waitMs = intParam(url, 'wait_ms', 0, 0, MAX_WAIT_MS);
    if (waitMs > 0) {
      if (!o.longPoll) throw new InvalidArgumentError('wait_ms', 'long-poll is not available on this node');
      if (q.beforeSeq !== undefined) {
        throw new InvalidArgumentError(
          'wait_ms',
          'cannot be combined with before_seq: only new events are waited for',
        );
      }
      return o.longPoll(p, q, waitMs, res);
    }
    endJson(res, 200, pageJson(await h.listEvents(p, q)));
  };

  const messages = async (
    p: Principal,
    threadId: string,
    runId: string | undefined,
    url: URL,
    res: ServerResponse,
  ) => {
    const pg = paging(url);
    if (viewOf(url) === 'chat') {
      const page = await h.chat(p, { threadId, runId, ...pg });
      endJson(
        res,
        200,
        `{"messages":[${page.messages.map(chatMessageJson).join(',')}],${cursorJson(page)},"has_more":${page.hasMore}}`,
      );
      return;
    }
    endJson(
      res,
      200,
      pageJson(await h.listEvents(p, { threadId, runId, categories: new Set(['message'] as const), ...pg })),
    );
  };

  const count = async (
    p: Principal,
    threadId: string,
    runId: string | undefined,
    url: URL,
    res: ServerResponse,
  ) => {
    const n = await h.countMessages(
      p,
      threadId,
      runId,
      optionalId(url.searchParams.get('user_id'), 'user_id'),
    );
    sendJson(res, 200, { thread_id: threadId, ...(runId === undefined ? {} : { run_id: runId }), count: n });
  };

  const EVENTS = [...PAGING, 'categories', 'event_types', 'wait_ms'];
  return [
    route('GET', `${THREAD}/events`, [...EVENTS, 'run_id'], (p, ids, url, res) =>
      events(p, ids.threadId, optionalId(url.searchParams.get('run_id'), 'run_id'), url, res),
    ),
    route('GET', `${THREAD}/messages`, [...PAGING, 'view'], (p, ids, url, res) =>
      messages(p, ids.threadId, undefined, url, res),
    ),
    route('GET', `${THREAD}/messages/count`, ['run_id', 'user_id'], (p, ids, url, res) =>
      count(p, ids.threadId, optionalId(url.searchParams.get('run_id'), 'run_id'), url, res),
    ),
    route('GET', `${RUN}/events`, EVENTS, (p, ids, url, res) => events(p, ids.threadId, ids.runId, url, res)),
    route('GET', `${RUN}/messages`, [...PAGING, 'view'], (p, ids, url, res) =>
      messages(p, ids.threadId, ids.runId, url, res),
    ),
    route('GET', `${RUN}/messages/count`, ['user_id'], (p, ids, url, res) =>
      count(p, ids.threadId, ids.runId, url, res),
    ),
    route('GET', `${THREAD}/runs`, ['before_seq', 'limit', 'status', 'user_id'], async (p, ids, url, res) => {
      const pg = paging(url);
      const page = await h.listRuns(p, {
        threadId: ids.threadId,
        beforeSeq: pg.beforeSeq,
        statuses: statusesOf(listParam(url, 'status')),
        limit: pg.limit,
        userId: pg.userId,
      });
      endJson(
        res,
        200,
        `{"runs":[${page.runs.map(runJson).join(',')}],"next_before_seq":${page.nextBeforeSeq ?? null},"has_more":${page.hasMore}}`,
      );
    }),
    route('GET', RUN, ['user_id'], async (p, ids, url, res) => {
      const run = await h.getRun(
        p,
        ids.threadId,
        ids.runId as string,
        optionalId(url.searchParams.get('user_id'), 'user_id'),
      );
      endJson(res, 200, runJson(run));
    }),
    route('DELETE', THREAD, ['user_id'], async (p, ids, url, res) => {
      const r = await h.deleteThread(p, ids.threadId, optionalId(url.searchParams.get('user_id'), 'user_id'));
      sendJson(res, 200, { thread_id: ids.threadId, ...r });
    }),
    route('DELETE', RUN, ['user_id'], async (p, ids, url, res) => {
      const runId = ids.runId as string;
      const r = await h.deleteRun(
        p,
        ids.threadId,
        runId,
        optionalId(url.searchParams.get('user_id'), 'user_id'),
      );
      sendJson(res, 200, { thread_id: ids.threadId, run_id: runId, ...r });
    }),
  ];
}
