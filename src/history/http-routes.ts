/**
 * History on HTTP, under `/v1/threads` (docs/api.md). The routes are handed to the
 * HttpServer (`routes` option), which tries them before its built-in ones; the events
 * route supersedes the built-in one and keeps its response fields (`events`,
 * `next_after_seq`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type Authenticator, bearerFromHttp, type Principal } from '../auth/principal.js';
import { InvalidArgumentError, quote } from '../errors.js';
import { type HttpRoute, intParam, sendError, sendJson } from '../http/util.js';
import type { EventsPage, History } from './history.js';
import {
  categoriesOf,
  DEFAULT_HISTORY_LIMIT,
  eventTypesOf,
  MAX_HISTORY_LIMIT,
  optionalId,
  requiredId,
  statusesOf,
} from './params.js';
import { chatMessageJson, eventsJson, runJson } from './render.js';

const THREAD = '/v1/threads/([^/]+)';
const RUN = `${THREAD}/runs/([^/]+)`;

export interface HistoryRoutesOptions {
  readonly history: History;
  readonly auth: Authenticator;
}

function sendText(res: ServerResponse, status: number, json: string): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' }).end(json);
}

/** A path segment, percent-decoded and checked like the gRPC field of the same name. */
function segment(raw: string | undefined, field: string): string {
  let v: string;
  try {
    v = decodeURIComponent(raw ?? '');
  } catch {
    throw new InvalidArgumentError(field, 'is not valid percent-encoding');
  }
  return requiredId(v, field);
}

/** A list parameter, repeated (`?categories=a&categories=b`) or comma-separated (`?categories=a,b`). */
function listParam(url: URL, name: string): string[] | undefined {
  const values = url.searchParams
    .getAll(name)
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter((v) => v !== '');
  return values.length > 0 ? values : undefined;
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

function pageJson(p: EventsPage): string {
  return `{"events":${eventsJson(p.events)},${cursorJson(p)},"has_more":${p.hasMore}}`;
}

/** `?view=`: `events` (the default) or `chat`. */
function viewOf(url: URL): 'events' | 'chat' {
  const v = url.searchParams.get('view');
  if (v === null || v === '' || v === 'events') return 'events';
  if (v === 'chat') return 'chat';
  throw new InvalidArgumentError('view', `must be "events" or "chat" (got ${quote(v)})`);
}

/** A route body for a thread, or one run of it (`runId`). */
type ScopedHandler = (
  p: Principal,
  threadId: string,
  runId: string | undefined,
  url: URL,
  res: ServerResponse,
) => Promise<void>;

/** Every History route. */
export function historyRoutes(o: HistoryRoutesOptions): HttpRoute[] {
  const h = o.history;
  const route = (
    method: string,
    path: string,
    handle: (p: Principal, m: RegExpExecArray, url: URL, res: ServerResponse) => Promise<void>,
  ): HttpRoute => ({
    method,
    pattern: new RegExp(`^${path}$`),
    async handle(req: IncomingMessage, res: ServerResponse, m: RegExpExecArray, url: URL): Promise<void> {
      try {
        const principal = await o.auth.authenticate(bearerFromHttp(req, url));
        await handle(principal, m, url, res);
      } catch (err) {
        sendError(res, err);
      }
    },
  });

  const events: ScopedHandler = async (p, threadId, runId, url, res) => {
    const pg = paging(url);
    const page = await h.listEvents(p, {
      threadId,
      runId,
      categories: categoriesOf(listParam(url, 'categories')),
      eventTypes: eventTypesOf(listParam(url, 'event_types')),
      ...pg,
    });
    sendText(res, 200, pageJson(page));
  };

  const messages: ScopedHandler = async (p, threadId, runId, url, res) => {
    const pg = paging(url);
    if (viewOf(url) === 'chat') {
      const page = await h.chat(p, { threadId, runId, ...pg });
      sendText(
        res,
        200,
        `{"messages":[${page.messages.map(chatMessageJson).join(',')}],${cursorJson(page)},"has_more":${page.hasMore}}`,
      );
      return;
    }
    sendText(
      res,
      200,
      pageJson(await h.listEvents(p, { threadId, runId, categories: new Set(['message'] as const), ...pg })),
    );
  };

  const count: ScopedHandler = async (p, threadId, runId, url, res) => {
    const n = await h.countMessages(
      p,
      threadId,
      runId,
      optionalId(url.searchParams.get('user_id'), 'user_id'),
    );
    sendJson(res, 200, { thread_id: threadId, ...(runId === undefined ? {} : { run_id: runId }), count: n });
  };

  const served: HttpRoute[] = [
    route('GET', `${THREAD}/events`, (p, m, url, res) =>
      events(p, segment(m[1], 'thread_id'), optionalId(url.searchParams.get('run_id'), 'run_id'), url, res),
    ),
    route('GET', `${THREAD}/messages`, (p, m, url, res) =>
      messages(p, segment(m[1], 'thread_id'), undefined, url, res),
    ),
    route('GET', `${THREAD}/messages/count`, (p, m, url, res) =>
      count(p, segment(m[1], 'thread_id'), optionalId(url.searchParams.get('run_id'), 'run_id'), url, res),
    ),
    route('GET', `${RUN}/events`, (p, m, url, res) =>
      events(p, segment(m[1], 'thread_id'), segment(m[2], 'run_id'), url, res),
    ),
    route('GET', `${RUN}/messages`, (p, m, url, res) =>
      messages(p, segment(m[1], 'thread_id'), segment(m[2], 'run_id'), url, res),
    ),
    route('GET', `${RUN}/messages/count`, (p, m, url, res) =>
      count(p, segment(m[1], 'thread_id'), segment(m[2], 'run_id'), url, res),
    ),
    route('GET', `${THREAD}/runs`, async (p, m, url, res) => {
      const threadId = segment(m[1], 'thread_id');
      const pg = paging(url);
      const page = await h.listRuns(p, {
        threadId,
        beforeSeq: pg.beforeSeq,
        statuses: statusesOf(listParam(url, 'status')),
        limit: pg.limit,
        userId: pg.userId,
      });
      sendText(
        res,
        200,
        `{"runs":[${page.runs.map(runJson).join(',')}],"next_before_seq":${page.nextBeforeSeq ?? null},"has_more":${page.hasMore}}`,
      );
    }),
    route('GET', RUN, async (p, m, url, res) => {
      const run = await h.getRun(
        p,
        segment(m[1], 'thread_id'),
        segment(m[2], 'run_id'),
        optionalId(url.searchParams.get('user_id'), 'user_id'),
      );
      sendText(res, 200, runJson(run));
    }),
    route('DELETE', THREAD, async (p, m, url, res) => {
      const threadId = segment(m[1], 'thread_id');
      const r = await h.deleteThread(p, threadId, optionalId(url.searchParams.get('user_id'), 'user_id'));
      sendJson(res, 200, { thread_id: threadId, ...r });
    }),
    route('DELETE', RUN, async (p, m, url, res) => {
      const threadId = segment(m[1], 'thread_id');
      const runId = segment(m[2], 'run_id');
      const r = await h.deleteRun(p, threadId, runId, optionalId(url.searchParams.get('user_id'), 'user_id'));
      sendJson(res, 200, { thread_id: threadId, run_id: runId, ...r });
    }),
  ];

  return served;
}

/**
 * For each path of `routes`, routes that answer any other method with 405 and an `Allow`
 * header. Put them after every other module's routes, so they never shadow one.
 */
export function methodNotAllowedRoutes(routes: readonly HttpRoute[]): HttpRoute[] {
  const allowed = new Map<string, string[]>();
  for (const r of routes) allowed.set(r.pattern.source, [...(allowed.get(r.pattern.source) ?? []), r.method]);
  const refused: HttpRoute[] = [];
  for (const [source, methods] of allowed) {
    for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].filter((x) => !methods.includes(x))) {
      refused.push({
        method,
        pattern: new RegExp(source),
        async handle(_req, res) {
          res.setHeader('allow', methods.join(', '));
          sendJson(res, 405, {
            error: {
              code: 'method_not_allowed',
              message: `${method} not allowed; use ${methods.join(' or ')}`,
            },
          });
        },
      });
    }
  }
  return refused;
}
