/**
 * Server-Sent Events fan-out: `GET /v1/threads/{thread_id}/stream`, runstream's own SSE
 * stream, and the LangGraph-compatible join (`langgraph-join.ts`), both served by
 * {@link SseService}.
 *
 * A stream is one {@link Subscription} with the same cursors and filters as a WebSocket
 * subscription, rendered as SSE: `id:` = seq, `event:` = event_type, `data:` = the event
 * JSON; `Last-Event-ID` resumes after that seq. docs/sse.md has the whole contract.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { authenticateHttp, requireRead } from '../auth/http.js';
import type { Authenticator, Principal } from '../auth/principal.js';
import { scopedFilter } from '../auth/scope.js';
import { ErrorCode, RunstreamError } from '../errors.js';
import { type HttpRoute, sendError } from '../http/util.js';
import type { EventFilter } from './filter.js';
import { langGraphRoutes } from './langgraph-join.js';
import { runTerminal } from './run-status.js';
import { parseStreamQuery, pathId } from './sse-params.js';
import { formatSse, SSE_HEADERS, type SseDialect, SseStream } from './sse-stream.js';
import {
  type DeliveredEvent,
  type StartCursor,
  Subscription,
  type SubscriptionResources,
  subscriptionResources,
} from './subscription.js';

export const SSE_STREAM_PATTERN = /^\/v1\/threads\/([^/]+)\/stream$/;

export interface SseServiceOptions extends SubscriptionResources {
  /** Bytes queued on one response past which its client is cut off as too slow. */
  readonly maxBufferedBytes: number;
  readonly keepAliveMs: number;
  /** Streams this node holds at most; past it a new one is refused with 429 (`resource_exhausted`). */
  readonly maxStreams: number;
  readonly auth: Authenticator;
  /**
   * Cancels a run on behalf of a subscriber, for the LangGraph join's
   * `cancel_on_disconnect=1`; without it that option is refused.
   */
  readonly cancelRun?: (threadId: string, runId: string, principal: Principal) => Promise<void>;
}

/** What a route asks of {@link SseService.open}. */
export interface SseOpenRequest {
  readonly res: ServerResponse;
  readonly threadId: string;
  readonly start: StartCursor;
  readonly filter: EventFilter;
  readonly dialect: SseDialect;
  readonly principal: Principal;
  readonly headers?: Readonly<Record<string, string>>;
  /** Called once when the stream is over; `byClient` when the client went away first. */
  readonly onClose?: (byClient: boolean) => void;
}

/** The SSE endpoints of a fan-out node and the streams they hold. */
export class SseService {
  readonly #o: SseServiceOptions;
  readonly #streams = new Set<SseStream>();
  #nextId = 0;
  #closed = false;

  constructor(o: SseServiceOptions) {
    this.#o = o;
  }

  /** What the routes of this service share (pool, auth, hooks). */
  get options(): SseServiceOptions {
    return this.#o;
  }

  /** Streams open now (each holds one subscription). */
  get streamCount(): number {
    return this.#streams.size;
  }

  /** The routes to hand to the HTTP server (`HttpServerOptions.routes`). */
  get routes(): HttpRoute[] {
    return [
      {
        method: 'GET',
        pattern: SSE_STREAM_PATTERN,
        handle: (req, res, match, url) => this.#handleStream(req, res, match, url),
      },
      ...langGraphRoutes(this),
    ];
  }

  /**
   * The caller's principal, if it may read the thread: 401 without a valid token, 403
   * when the token does not cover the thread. `token` overrides the request's bearer.
   */
  async authorize(req: IncomingMessage, url: URL, threadId: string, token?: string): Promise<Principal> {
    const principal =
      token === undefined
        ? await authenticateHttp(this.#o.auth, req, url)
        : await this.#o.auth.authenticate(token);
    requireRead(principal, threadId);
    return principal;
  }

  /** Throws a 429 when the node holds as many streams as it may: call before any work on a new stream. */
  admit(): void {
    if (this.#streams.size >= this.#o.maxStreams) {
      throw new RunstreamError(
        ErrorCode.ResourceExhausted,
        `this node holds its limit of ${this.#o.maxStreams} SSE streams; retry shortly or elsewhere`,
      );
    }
  }

  /** Starts streaming a subscription on the response. */
  open(r: SseOpenRequest): SseStream {
    const stream = new SseStream({
      res: r.res,
      dialect: r.dialect,
      keepAliveMs: this.#o.keepAliveMs,
      maxBufferedBytes: this.#o.maxBufferedBytes,
      principal: r.principal,
      headers: r.headers,
      log: this.#o.log,
      onClose: (s) => {
        this.#streams.delete(s);
        r.onClose?.(s.closedByClient);
      },
    });
    this.#streams.add(stream);
    if (this.#closed) {
      stream.close();
      return stream;
    }
    const sub = new Subscription({
      id: `sse-${++this.#nextId}`,
      threadId: r.threadId,
      start: r.start,
      // A user-scoped token sees only its user's events, whatever the client asked.
      filter: scopedFilter(r.filter, r.principal),
      ...subscriptionResources(this.#o),
      sink: stream,
      onClose: () => undefined,
    });
    stream.attach(sub);
    void sub.start();
    return stream;
  }

  async #handleStream(req: IncomingMessage, res: ServerResponse, match: RegExpExecArray, url: URL) {
    try {
      const threadId = pathId(match[1], 'thread_id');
      const principal = await this.authorize(req, url, threadId);
      this.admit();
      const q = parseStreamQuery(url, req.headers['last-event-id']);
      const runId = q.filter.runId;
      if (runId !== undefined && q.start.kind === 'after_seq' && q.start.seq > 0) {
        // The cursor is past the run's end: the subscription would never see it and wait forever.
        const terminal = await runTerminal(this.#o.pool, threadId, runId);
        if (terminal && terminal.seq <= q.start.seq) {
          // 204 is how SSE tells an EventSource to stop reconnecting.
          if (q.resumed) res.writeHead(204).end();
          else {
            res.writeHead(200, SSE_HEADERS);
            res.end(RUNSTREAM_DIALECT.end(runId, terminal.seq).map(formatSse).join(''));
          }
          return;
        }
      }
      this.open({ res, threadId, start: q.start, filter: q.filter, dialect: RUNSTREAM_DIALECT, principal });
    } catch (err) {
      sendError(res, err);
    }
  }

  /** Ends every stream (idempotent); their clients reconnect elsewhere with their Last-Event-ID. */
  close(): void {
    this.#closed = true;
    for (const s of [...this.#streams]) s.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}

/**
 * runstream's SSE framing. Every frame after which resuming is exact carries `id:` (a
 * seq): events, `live` (catch-up ended there, whatever a filter skipped), `end`, and an
 * `error` (the cursor where the stream stopped). Control frames' data has a `type` key,
 * which stored events never have: that tells them apart from events whose event_type is
 * `live`, `end`, `error` or `deleted`.
 */
export const RUNSTREAM_DIALECT: SseDialect = {
  event: (e: DeliveredEvent) => [{ id: e.seq, event: e.event_type, data: e.json() }],
  live: (seq) => [{ id: seq, event: 'live', data: `{"type":"live","seq":${seq}}` }],
  end: (runId, seq) => [{ id: seq, event: 'end', data: `{"type":"end","run_id":"${runId}","seq":${seq}}` }],
  deleted: (threadId, runId, cursor) => [
    {
      event: 'deleted',
      data: JSON.stringify({
        type: 'deleted',
        thread_id: threadId,
        ...(runId === undefined ? {} : { run_id: runId }),
        seq: cursor,
      }),
    },
  ],
  error: (err: RunstreamError, cursor) => [
    {
      id: cursor,
      event: 'error',
      data: JSON.stringify({ type: 'error', code: err.wsCode, message: err.message, seq: cursor }),
    },
  ],
};
