/**
 * The LangGraph Platform routes, so that an existing LangGraph SDK client works against
 * runstream unchanged:
 *
 * - `GET /threads/{thread_id}/runs/{run_id}/stream`: `client.runs.joinStream(...)`. SSE in
 *   LangGraph's framing (`metadata`, `values`, `updates`, `messages`, `custom`, …, `error`,
 *   `end`), every frame with `id:` = seq, honouring `Last-Event-ID` and `stream_mode`, ending
 *   at the run's end. It sends `Location` like LangGraph's own streams, which is what makes
 *   the SDK reconnect by itself, with its last id, after a dropped connection. It is one
 *   subscription of the core, rendered by {@link LangGraphDialect}.
 * - `GET /threads/{thread_id}/runs/{run_id}`: the run's status, which the SDK asks when a
 *   stream closes without an `end`, to decide whether to reconnect.
 * - `POST /threads/{thread_id}/runs/{run_id}/cancel`: `client.runs.cancel(...)`, on the
 *   same cancel path as every other (ingest/control.ts).
 *
 * A run's status is the `runs` table's (domain/run-lifecycle.ts), in LangGraph's words.
 * The mapping from runstream events to LangGraph events is in docs/sse.md.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { requireCancel, requireRead } from '../../auth/http.js';
import { type Authenticator, bearerFromHttp, type Principal } from '../../auth/principal.js';
import { pathId } from '../../domain/ids.js';
import { hasEnded, isTerminal, langGraphStatus, type RunStatusName } from '../../domain/run-lifecycle.js';
import { ErrorCode, InvalidArgumentError, quote, RunstreamError } from '../../errors.js';
import type { Route } from '../../http/router.js';
import { sendError, sendJson } from '../../http/util.js';
import type { RunControl } from '../../ingest/control.js';
import { getRun, type RunRecord } from '../../persist/runs.js';
import { eventJsonParts } from '../core/event-json-parts.js';
import type { DeliveredEvent } from '../core/subscription.js';
import { lastEventIdSeq } from '../sse/params.js';
import type { SseStreams } from '../sse/routes.js';
import type { SseDialect, SseFrame } from '../sse/stream.js';

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

/** How long `cancel?wait=1` waits for the run to end before answering 202 anyway. */
export const CANCEL_WAIT_MS = 30_000;
const CANCEL_WAIT_POLL_MS = 200;

/** The LangGraph stream mode of an event type, or undefined when it is not a LangGraph name. */
export function langGraphMode(eventType: string): StreamMode | undefined {
  const bar = eventType.indexOf('|');
  return EVENT_MODE[bar < 0 ? eventType : eventType.slice(0, bar)];
}

/**
 * Renders one run's events as LangGraph Platform does. A terminal lifecycle event is not
 * a LangGraph event of its own: it is remembered, and when the subscription says the run
 * ended there, it becomes the `error` (for a failed run) and the `end`.
 */
export class LangGraphDialect implements SseDialect {
  /** Content of the last terminal lifecycle event streamed: the failure's message, if the run ends there. */
  #lastTerminal: { readonly content: unknown } | undefined;

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
      this.#lastTerminal = { content: JSON.parse(eventJsonParts(e.json()).content) as unknown };
      return [];
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

  /** No LangGraph event says "caught up"; an id-only block moves the client's last id to the head. */
  live(seq: number): readonly SseFrame[] {
    return [{ id: seq }];
  }

  /**
   * `end` with the run's status in LangGraph's words, after an `error` when the run failed
   * at an event this stream carried (one resumed past it has had its `error` already).
   */
  end(runId: string, seq: number, status: RunStatusName): readonly SseFrame[] {
    const lgStatus = langGraphStatus(status);
    const end: SseFrame = {
      id: seq,
      event: 'end',
      data: JSON.stringify({ run_id: runId, status: lgStatus }),
    };
    if (lgStatus !== 'error' || this.#lastTerminal === undefined) return [end];
    const c = (this.#lastTerminal.content ?? {}) as Record<string, unknown>;
    const error = {
      error: typeof c.error === 'string' ? c.error : 'Error',
      message: typeof c.message === 'string' ? c.message : `run ${runId} failed`,
    };
    return [{ id: seq, event: 'error', data: JSON.stringify(error) }, end];
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

export interface LangGraphRoutesOptions {
  readonly streams: SseStreams;
  readonly auth: Authenticator;
  /** Cancel requests: `cancel_on_disconnect=1` and the cancel route; absent: both refused. */
  readonly control?: RunControl | undefined;
}

/** The run a LangGraph route names, the caller, and the run as the caller may see it. */
interface RunTarget {
  readonly threadId: string;
  readonly runId: string;
  readonly principal: Principal;
}

/** The LangGraph-compatible routes. */
export function langGraphRoutes(o: LangGraphRoutesOptions): Route[] {
  const route = (
    method: string,
    path: string,
    serve: (run: RunTarget, req: IncomingMessage, res: ServerResponse, url: URL) => Promise<void>,
  ): Route => ({
    method,
    path,
    owner: 'langgraph',
    handle: async (req, res, params, url) => {
      try {
        const threadId = pathId(params.thread_id, 'thread_id');
        const runId = pathId(params.run_id, 'run_id');
        const hasBearer =
          /^bearer /i.test(req.headers.authorization ?? '') || url.searchParams.has('access_token');
        const token = hasBearer ? undefined : apiKey(req);
        const principal = await o.auth.authenticate(token ?? bearerFromHttp(req, url));
        requireRead(principal, threadId);
        // A user-scoped token sees only its user's runs, as History's GetRun: another's is not found.
        if (principal.userId !== undefined) await visibleRun(o, threadId, runId, principal);
        await serve({ threadId, runId, principal }, req, res, url);
      } catch (err) {
        sendError(res, err);
      }
    },
  });
  return [
    route('GET', '/threads/{thread_id}/runs/{run_id}/stream', (run, req, res, url) =>
      join(o, run, req, res, url),
    ),
    route('GET', '/threads/{thread_id}/runs/{run_id}', (run, _req, res) => getRunStatus(o, run, res)),
    route('POST', '/threads/{thread_id}/runs/{run_id}/cancel', (run, _req, res, url) =>
      cancel(o, run, res, url),
    ),
  ];
}

/** The run, when the principal may see it: 404 otherwise. */
async function visibleRun(
  o: LangGraphRoutesOptions,
  threadId: string,
  runId: string,
  p: Principal,
): Promise<RunRecord> {
  const run = await getRun(o.streams.options.service.resources.pool, threadId, runId, p.userId);
  if (!run) {
    throw new RunstreamError(
      ErrorCode.NotFound,
      p.userId === undefined
        ? `thread ${threadId} has no events of run ${runId}`
        : `thread ${threadId} has no run ${runId} of user ${p.userId}`,
    );
  }
  return run;
}

async function join(
  o: LangGraphRoutesOptions,
  { threadId, runId, principal }: RunTarget,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
): Promise<void> {
  const modes = parseStreamModes(url);
  const cancelOnDisconnect = boolParam(url, 'cancel_on_disconnect');
  const { control } = o;
  if (cancelOnDisconnect && !control) {
    throw new InvalidArgumentError('cancel_on_disconnect', 'is not available on this broker');
  }
  // Asked now, not at disconnect: a token that may not cancel is told before it relies on it.
  if (cancelOnDisconnect) requireCancel(principal, threadId);
  // As on LangGraph Platform: no Last-Event-ID joins from now on, "-1" replays the whole
  // run, a seq resumes after it. A run that has ended by then ends the stream at once.
  const lastEventId = lastEventIdSeq(req.headers['last-event-id'], true);
  const path = `/threads/${threadId}/runs/${runId}`;
  o.streams.open({
    res,
    request: {
      threadId,
      start: lastEventId === undefined ? { kind: 'live' } : { kind: 'after_seq', seq: lastEventId },
      filter: { runId, categories: undefined, eventTypes: undefined },
      view: 'events',
    },
    dialect: new LangGraphDialect(threadId, runId, modes),
    principal,
    headers: { location: `${path}/stream${url.search}`, 'content-location': path },
    onClose: (byClient) => {
      if (!byClient || !cancelOnDisconnect || !control) return;
      control
        .requestCancel({
          threadId,
          runId,
          reason: 'subscriber disconnected',
          source: 'on_disconnect',
          principal,
        })
        .catch((err: unknown) =>
          o.streams.options.log.warn({ err, threadId, runId }, 'cancel on disconnect failed'),
        );
    },
  });
}

async function getRunStatus(
  o: LangGraphRoutesOptions,
  { threadId, runId, principal }: RunTarget,
  res: ServerResponse,
) {
  const run = await visibleRun(o, threadId, runId, principal);
  const start = JSON.parse(run.metadata_json) as Record<string, unknown>;
  sendJson(res, 200, {
    run_id: runId,
    thread_id: threadId,
    assistant_id: typeof start.assistant_id === 'string' ? start.assistant_id : '',
    created_at: run.started_at,
    updated_at: run.updated_at,
    status: langGraphStatus(run.status),
    metadata: {},
    multitask_strategy: null,
    kwargs: {},
    last_seq: run.last_seq,
  });
}

/**
 * `client.runs.cancel(thread, run, wait, action)`: `?wait=1` waits (up to
 * {@link CANCEL_WAIT_MS}) for the run to end, and answers 204 once it has; otherwise 202.
 * `action=rollback` (delete the run's state) is not something a log of events can do.
 */
async function cancel(
  o: LangGraphRoutesOptions,
  { threadId, runId, principal }: RunTarget,
  res: ServerResponse,
  url: URL,
) {
  if (!o.control) throw new RunstreamError(ErrorCode.Unavailable, 'cancel is not available on this node');
  const action = url.searchParams.get('action') ?? 'interrupt';
  if (action !== 'interrupt') {
    throw new InvalidArgumentError(
      'action',
      `${quote(action)} is not supported; runstream cancels with "interrupt"`,
    );
  }
  const wait = boolParam(url, 'wait');
  await o.control.requestCancel({
    threadId,
    runId,
    reason: url.searchParams.get('reason') ?? '',
    source: 'http',
    principal,
  });
  if (!wait) return void res.writeHead(202).end();
  const pool = o.streams.options.service.resources.pool;
  const until = Date.now() + CANCEL_WAIT_MS;
  let gone = false;
  res.once('close', () => {
    gone = true;
  });
  while (Date.now() < until && !gone) {
    const run = await getRun(pool, threadId, runId, principal.userId);
    if (run && hasEnded(run.status)) return void res.writeHead(204).end();
    await new Promise((r) => setTimeout(r, CANCEL_WAIT_POLL_MS));
  }
  if (!gone) res.writeHead(202).end();
}
