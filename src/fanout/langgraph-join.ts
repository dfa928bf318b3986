/**
 * The LangGraph Platform join, so that an existing LangGraph SDK client's
 * `client.runs.joinStream(threadId, runId, { lastEventId, streamMode })` works against
 * runstream unchanged:
 *
 * - `GET /threads/{thread_id}/runs/{run_id}/stream` — SSE in LangGraph's framing
 *   (`metadata`, `values`, `updates`, `messages`, `custom`, …, `error`, `end`), every frame
 *   with `id:` = seq, honouring `Last-Event-ID` and `stream_mode`, ending after the run's
 *   terminal event. It sends `Location` like LangGraph's own streams, which is what makes
 *   the SDK reconnect by itself, with its last id, after a dropped connection.
 * - `GET /threads/{thread_id}/runs/{run_id}` — the run's status, which the SDK asks when a
 *   stream closes without an `end`, to decide whether to reconnect.
 *
 * The mapping from runstream events to LangGraph events is in docs/sse.md.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { requireCancel } from '../auth/http.js';
import type { Principal } from '../auth/principal.js';
import { scopedFilter } from '../auth/scope.js';
import { ErrorCode, InvalidArgumentError, quote, RunstreamError } from '../errors.js';
import { type HttpRoute, sendError, sendJson } from '../http/util.js';
import { headSeq } from '../persist/queries.js';
import { getRun } from '../persist/runs.js';
import { isTerminal } from '../run-lifecycle.js';
import { eventJsonParts } from './event-json-parts.js';
import { finalStatus, runSummary, runTerminal } from './run-status.js';
import type { SseService } from './sse.js';
import { lastEventIdSeq, pathId } from './sse-params.js';
import { SSE_HEADERS, type SseDialect, type SseFrame } from './sse-stream.js';
import type { DeliveredEvent } from './subscription.js';

export const LANGGRAPH_JOIN_PATTERN = /^\/threads\/([^/]+)\/runs\/([^/]+)\/stream$/;
export const LANGGRAPH_RUN_PATTERN = /^\/threads\/([^/]+)\/runs\/([^/]+)$/;

/** The `stream_mode` values of the LangGraph API. */
export const STREAM_MODES = [
  'values',
  'updates',
  'messages',
  'messages-tuple',
  'custom',
  'events',
  'debug',
  'tasks',
  'checkpoints',
  'tools',
  'lifecycle',
] as const;
export type StreamMode = (typeof STREAM_MODES)[number];

/**
 * The stream mode each LangGraph SSE event belongs to (a subgraph's `updates|ns` belongs
 * to the mode of `updates`). `messages-tuple` streams as `messages`; the legacy
 * `messages` mode as `messages/partial`, `messages/complete` and `messages/metadata`.
 */
const EVENT_MODE: Readonly<Record<string, StreamMode>> = {
  values: 'values',
  updates: 'updates',
  messages: 'messages-tuple',
  'messages/partial': 'messages',
  'messages/complete': 'messages',
  'messages/metadata': 'messages',
  custom: 'custom',
  events: 'events',
  debug: 'debug',
  tasks: 'tasks',
  checkpoints: 'checkpoints',
  tools: 'tools',
  lifecycle: 'lifecycle',
};

/** Events LangGraph sends whatever the stream modes. */
const ALWAYS_SENT: ReadonlySet<string> = new Set(['feedback']);

/** Errors a reconnect cures: the stream just ends, and the SDK comes back with its last id. */
const TRANSIENT: ReadonlySet<ErrorCode> = new Set([ErrorCode.SlowConsumer, ErrorCode.Unavailable]);

/** The LangGraph stream mode of an event type, or undefined when it is not a LangGraph name. */
export function langGraphMode(eventType: string): StreamMode | undefined {
  const bar = eventType.indexOf('|');
  return EVENT_MODE[bar < 0 ? eventType : eventType.slice(0, bar)];
}

/**
 * Renders one run's events as LangGraph Platform does. Stateful: it remembers that the
 * run's `end` went out, so the subscription's own end adds nothing.
 */
export class LangGraphDialect implements SseDialect {
  #ended = false;

  constructor(
    readonly threadId: string,
    readonly runId: string,
    /** Requested modes; undefined = every event. */
    readonly modes: ReadonlySet<StreamMode> | undefined,
  ) {}

  #wants(mode: StreamMode): boolean {
    return this.modes === undefined || this.modes.has(mode);
  }

  event(e: DeliveredEvent): readonly SseFrame[] {
    if (isTerminal(e.category, e.event_type)) {
      const content = JSON.parse(eventJsonParts(e.json()).content) as unknown;
      return this.#terminal(e.seq, e.event_type, content);
    }
    if (e.event_type === 'metadata' || (e.event_type === 'run_start' && e.category === 'lifecycle')) {
      const content = JSON.parse(eventJsonParts(e.json()).content) as unknown;
      const base = content !== null && typeof content === 'object' && !Array.isArray(content) ? content : {};
      return [
        {
          id: e.seq,
          event: 'metadata',
          data: JSON.stringify({ ...base, run_id: this.runId, thread_id: this.threadId }),
        },
      ];
    }
    if (ALWAYS_SENT.has(e.event_type)) {
      return [{ id: e.seq, event: e.event_type, data: eventJsonParts(e.json()).content }];
    }
    // Outside a terminal lifecycle event, `end` and `error` would make the SDK think the run is over.
    const mode = e.event_type === 'end' || e.event_type === 'error' ? undefined : langGraphMode(e.event_type);
    if (mode !== undefined) {
      return this.#wants(mode)
        ? [{ id: e.seq, event: e.event_type, data: eventJsonParts(e.json()).content }]
        : [];
    }
    return this.#wants('custom') ? [{ id: e.seq, event: 'custom', data: e.json() }] : [];
  }

  /** `end` with the run's final status, after an `error` when the run failed. */
  #terminal(seq: number, eventType: string, content: unknown): SseFrame[] {
    this.#ended = true;
    const status = finalStatus({ eventType, content });
    const end: SseFrame = { id: seq, event: 'end', data: JSON.stringify({ run_id: this.runId, status }) };
    if (status !== 'error') return [end];
    const c = (content ?? {}) as Record<string, unknown>;
    const error = {
      error: typeof c.error === 'string' ? c.error : 'Error',
      message: typeof c.message === 'string' ? c.message : `run ${this.runId} failed`,
    };
    return [{ id: seq, event: 'error', data: JSON.stringify(error) }, end];
  }

  /** No LangGraph event says "caught up"; an id-only block moves the client's last id to the head. */
  live(seq: number): readonly SseFrame[] {
    return [{ id: seq }];
  }

  end(runId: string, seq: number): readonly SseFrame[] {
    if (this.#ended) return [];
    this.#ended = true;
    return [{ id: seq, event: 'end', data: JSON.stringify({ run_id: runId, status: 'success' }) }];
  }

  deleted(_threadId: string, runId: string | undefined): readonly SseFrame[] {
    const what = runId === undefined ? `thread ${this.threadId}` : `run ${runId}`;
    return [{ event: 'error', data: JSON.stringify({ error: 'not_found', message: `${what} was deleted` }) }];
  }

  error(err: RunstreamError, cursor: number): readonly SseFrame[] {
    if (TRANSIENT.has(err.code)) return [{ comment: `${err.wsCode}: ${err.message}`, id: cursor }];
    return [{ event: 'error', data: JSON.stringify({ error: err.wsCode, message: err.message }) }];
  }
}

/** `stream_mode` as the SDK sends it (repeated), or comma-separated, or a JSON array. */
export function parseStreamModes(url: URL): ReadonlySet<StreamMode> | undefined {
  const raw = url.searchParams.getAll('stream_mode');
  if (raw.length === 0) return undefined;
  const values: unknown[] = raw.flatMap((v) => {
    if (!v.trimStart().startsWith('[')) return v.split(',').map((s) => s.trim());
    try {
      const parsed = JSON.parse(v) as unknown;
      return Array.isArray(parsed) ? parsed : [parsed];
    } catch {
      throw new InvalidArgumentError('stream_mode', 'is not a valid JSON array');
    }
  });
  for (const v of values) {
    if (typeof v !== 'string' || !(STREAM_MODES as readonly string[]).includes(v)) {
      throw new InvalidArgumentError('stream_mode', `${quote(v)} is not one of ${STREAM_MODES.join(', ')}`);
    }
  }
  return new Set(values as StreamMode[]);
}

/** A boolean query parameter as LangGraph takes it (`1`/`0`, `true`/`false`). */
function boolParam(url: URL, name: string): boolean {
  const v = url.searchParams.get(name);
  if (v === null || v === '' || v === '0' || v === 'false') return false;
  if (v === '1' || v === 'true') return true;
  throw new InvalidArgumentError(name, 'must be 1, 0, true or false');
}

/** The SDK sends its API key as `x-api-key`; it is taken as a bearer token when no other is given. */
function apiKey(req: IncomingMessage): string | undefined {
  const v = req.headers['x-api-key'];
  return (Array.isArray(v) ? v[0] : v) || undefined;
}

async function authorizeLangGraph(svc: SseService, req: IncomingMessage, url: URL, threadId: string) {
  const hasBearer = /^bearer /i.test(req.headers.authorization ?? '') || url.searchParams.has('access_token');
  return svc.authorize(req, url, threadId, hasBearer ? undefined : apiKey(req));
}

/** The LangGraph-compatible routes, served by the SSE service. */
export function langGraphRoutes(svc: SseService): HttpRoute[] {
  return [
    runRoute(svc, LANGGRAPH_JOIN_PATTERN, (run, req, res, url) => handleJoin(svc, run, req, res, url)),
    runRoute(svc, LANGGRAPH_RUN_PATTERN, (run, _req, res) => handleGetRun(svc, run, res)),
  ];
}

/** The run a LangGraph route names, and the caller allowed to read its thread. */
interface RunTarget {
  readonly threadId: string;
  readonly runId: string;
  readonly principal: Principal;
}

/** A GET route on one run: checks the path's ids, authorizes the caller, answers any error. */
function runRoute(
  svc: SseService,
  pattern: RegExp,
  serve: (run: RunTarget, req: IncomingMessage, res: ServerResponse, url: URL) => Promise<void>,
): HttpRoute {
  return {
    method: 'GET',
    pattern,
    handle: async (req, res, match, url) => {
      try {
        const threadId = pathId(match[1], 'thread_id');
        const runId = pathId(match[2], 'run_id');
        const principal = await authorizeLangGraph(svc, req, url, threadId);
        // A user-scoped token sees only its user's runs, as History's GetRun: another's is not found.
        if (
          principal.userId !== undefined &&
          !(await getRun(svc.options.pool, threadId, runId, principal.userId))
        ) {
          throw new RunstreamError(
            ErrorCode.NotFound,
            `thread ${threadId} has no run ${runId} of user ${principal.userId}`,
          );
        }
        await serve({ threadId, runId, principal }, req, res, url);
      } catch (err) {
        sendError(res, err);
      }
    },
  };
}

async function handleJoin(
  svc: SseService,
  { threadId, runId, principal }: RunTarget,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
): Promise<void> {
  svc.admit();
  const modes = parseStreamModes(url);
  const cancelOnDisconnect = boolParam(url, 'cancel_on_disconnect');
  const { cancelRun, pool, log } = svc.options;
  if (cancelOnDisconnect && !cancelRun) {
    throw new InvalidArgumentError('cancel_on_disconnect', 'is not available on this broker');
  }
  // Asked now, not at disconnect: a token that may not cancel is told before it relies on it.
  if (cancelOnDisconnect) requireCancel(principal, threadId);
  // As on LangGraph Platform: no Last-Event-ID joins from now on, "-1" replays the whole
  // run, a seq resumes after it. The head is read before the run's end is looked for, so
  // an end committed in between has a seq above it and is streamed, not missed.
  const lastEventId = lastEventIdSeq(req.headers['last-event-id'], true);
  const afterSeq = lastEventId ?? (await headSeq(pool, threadId));
  const path = `/threads/${threadId}/runs/${runId}`;
  const headers = { location: `${path}/stream${url.search}`, 'content-location': path };
  if (afterSeq > 0) {
    // The run ended at or before the cursor: say so, rather than wait for an end already passed.
    const terminal = await runTerminal(pool, threadId, runId);
    if (terminal && terminal.seq <= afterSeq) {
      const status = finalStatus(terminal);
      res.writeHead(200, { ...SSE_HEADERS, ...headers });
      res.end(`id: ${terminal.seq}\nevent: end\ndata: ${JSON.stringify({ run_id: runId, status })}\n\n`);
      return;
    }
  }
  const dialect = new LangGraphDialect(threadId, runId, modes);
  svc.open({
    res,
    threadId,
    start: { kind: 'after_seq', seq: afterSeq },
    filter: scopedFilter({ runId, categories: undefined, eventTypes: undefined }, principal),
    dialect,
    principal,
    headers,
    onClose: (byClient) => {
      if (!byClient || !cancelOnDisconnect || !cancelRun) return;
      cancelRun(threadId, runId, principal).catch((err: unknown) =>
        log.warn({ err, threadId, runId }, 'cancel on disconnect failed'),
      );
    },
  });
}

async function handleGetRun(
  svc: SseService,
  { threadId, runId }: RunTarget,
  res: ServerResponse,
): Promise<void> {
  const run = await runSummary(svc.options.pool, threadId, runId);
  if (!run) {
    sendJson(res, 404, {
      error: { code: 'not_found', message: `thread ${threadId} has no events of run ${runId}` },
    });
    return;
  }
  sendJson(res, 200, {
    run_id: runId,
    thread_id: threadId,
    assistant_id: run.assistantId ?? '',
    created_at: run.createdAt,
    updated_at: run.updatedAt,
    status: run.terminal ? finalStatus(run.terminal) : 'running',
    metadata: {},
    multitask_strategy: null,
    kwargs: {},
    last_seq: run.lastSeq,
  });
}
