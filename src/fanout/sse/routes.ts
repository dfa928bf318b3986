/**
 * Server-Sent Events: `GET /v1/threads/{thread_id}/stream`, runstream's own SSE stream. A
 * stream is one subscription of the core with the same cursors, filters and views as a
 * WebSocket subscription, rendered as SSE: `id:` = seq, `event:` = event_type, `data:` =
 * the event JSON; `Last-Event-ID` resumes after that seq. docs/sse.md has the contract.
 *
 * {@link SseStreams} also opens the LangGraph join's streams (langgraph/join.ts), which
 * share all of this but their dialect.
 */
import type { ServerResponse } from 'node:http';
import { authenticateHttp, requireRead } from '../../auth/http.js';
import type { Authenticator, Principal } from '../../auth/principal.js';
import { pathId } from '../../domain/ids.js';
import { InvalidArgumentError, type RunstreamError } from '../../errors.js';
import type { Route } from '../../http/router.js';
import { sendError } from '../../http/util.js';
import type { ChatFrame } from '../core/chat-view.js';
import type { SubscribeRequest } from '../core/request.js';
import type { SubscriptionService } from '../core/service.js';
import type { DeliveredEvent } from '../core/subscription.js';
import { parseStreamQuery } from './params.js';
import { type SseDialect, SseStream } from './stream.js';

export interface SseStreamsOptions {
  readonly service: SubscriptionService;
  readonly auth: Authenticator;
  /** Bytes queued on one response past which its client is cut off as too slow. */
  readonly maxBufferedBytes: number;
  readonly keepAliveMs: number;
  readonly log: import('../../logger.js').Logger;
}

/** What a route asks of {@link SseStreams.open}. */
export interface SseOpenRequest {
  readonly res: ServerResponse;
  readonly request: SubscribeRequest;
  readonly dialect: SseDialect;
  readonly principal: Principal;
  readonly headers?: Readonly<Record<string, string>>;
  readonly resumed?: boolean;
  /** Called once when the stream is over; `byClient` when the client went away first. */
  readonly onClose?: (byClient: boolean) => void;
}

/** The SSE streams of a fan-out node: opens them on the core, and ends them all at shutdown. */
export class SseStreams {
  readonly #o: SseStreamsOptions;
  readonly #streams = new Set<SseStream>();
  #closed = false;

  constructor(o: SseStreamsOptions) {
    this.#o = o;
  }

  get options(): SseStreamsOptions {
    return this.#o;
  }

  /** Streams open now (each holds one subscription). */
  get streamCount(): number {
    return this.#streams.size;
  }

  /**
   * Starts a stream of the subscription on the response. Throws before anything is written
   * when the node holds its maximum of streams (429), or the principal may not read.
   */
  open(r: SseOpenRequest): SseStream {
    const { service } = this.#o;
    if (r.request.view === 'chat' && r.dialect.chat === undefined) {
      throw new InvalidArgumentError('view', 'chat is not available on this stream');
    }
    service.authorize(r.principal, r.request);
    const release = service.admit('sse');
    const stream = new SseStream({
      res: r.res,
      dialect: r.dialect,
      service,
      keepAliveMs: this.#o.keepAliveMs,
      maxBufferedBytes: this.#o.maxBufferedBytes,
      principal: r.principal,
      headers: r.headers,
      resumed: r.resumed,
      log: this.#o.log,
      onClose: (byClient) => {
        release();
        this.#streams.delete(stream);
        r.onClose?.(byClient);
      },
    });
    this.#streams.add(stream);
    if (this.#closed) {
      stream.close();
      return stream;
    }
    try {
      stream.attach(service.open(r.principal, r.request, stream.sink));
    } catch (err) {
      stream.close();
      throw err;
    }
    return stream;
  }

  /** Ends every stream (idempotent); their clients reconnect elsewhere with their Last-Event-ID. */
  close(): void {
    this.#closed = true;
    for (const s of [...this.#streams]) s.close();
  }
}

/** `GET /v1/threads/{thread_id}/stream`. */
export function sseRoutes(streams: SseStreams): Route[] {
  return [
    {
      method: 'GET',
      path: '/v1/threads/{thread_id}/stream',
      owner: 'sse',
      handle: async (req, res, params, url) => {
        try {
          const threadId = pathId(params.thread_id, 'thread_id');
          const principal = await authenticateHttp(streams.options.auth, req, url);
          requireRead(principal, threadId);
          const q = parseStreamQuery(url, req.headers['last-event-id']);
          streams.open({
            res,
            request: { threadId, start: q.start, filter: q.filter, view: q.view },
            dialect: RUNSTREAM_DIALECT,
            principal,
            resumed: q.resumed,
          });
        } catch (err) {
          sendError(res, err);
        }
      },
    },
  ];
}

/**
 * runstream's SSE framing. Every frame after which resuming is exact carries `id:` (a
 * seq): events, `live` (catch-up ended there, whatever a filter skipped), `end`, chat
 * frames, and an `error` (the cursor where the stream stopped). Control frames' data has
 * a `type` key, which stored events never have: that tells them apart from events whose
 * event_type is `live`, `end`, `error` or `deleted`.
 */
export const RUNSTREAM_DIALECT: SseDialect = {
  event: (e: DeliveredEvent) => [{ id: e.seq, event: e.event_type, data: e.json() }],
  live: (seq) => [{ id: seq, event: 'live', data: `{"type":"live","seq":${seq}}` }],
  end: (runId, seq, status) => [
    { id: seq, event: 'end', data: `{"type":"end","run_id":"${runId}","seq":${seq},"status":"${status}"}` },
  ],
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
  chat: (frame: ChatFrame) => [
    { id: frame.seq, event: 'chat', data: `{"type":"chat",${frame.json.slice(1)}` },
  ],
};
