/**
 * HTTP long-poll, for clients behind proxies that break streaming:
 * `GET /v1/threads/{t}/events?after_seq=N&wait_ms=W` answers as soon as events past N
 * exist, or with an empty page at W. The page is History's (`events`, `next_after_seq`,
 * `has_more`), and `next_after_seq` is the subscription's cursor: with a filter it also
 * covers the events the filter skipped, so the next poll starts where this one stopped.
 *
 * It is a transport of the subscription core like the others: its parser is History's
 * query, its renderer collects event JSON, its writer is one HTTP response. Catch-up past N
 * answers at once; with nothing past N it waits live, and answers after the delivery turn
 * that brings the first events (so the events of one commit come together). A poll of one
 * run (`run_id=`) whose run has ended by its cursor answers at once with `"end":{"run_id",
 * "seq","status"}` after its events, as a run subscription's `end` frame says.
 */
import type { ServerResponse } from 'node:http';
import type { Principal } from '../auth/principal.js';
import { readScope } from '../auth/scope.js';
import type { RunStatusName } from '../domain/run-lifecycle.js';
import { ErrorCode, RunstreamError } from '../errors.js';
import type { EventsQuery } from '../history/history.js';
import type { LongPoll } from '../history/http-routes.js';
import { endJson } from '../http/unsent.js';
import { sendError } from '../http/util.js';
import { QueuedSink, type Renderer } from './core/queued-sink.js';
import type { SubscriptionService } from './core/service.js';
import type { DeliveredEvent, Subscription } from './core/subscription.js';

export interface LongPollOptions {
  readonly service: SubscriptionService;
  /** Bytes of event content a response holds at most (RS_MAX_PAGE_BYTES). */
  readonly maxPageBytes: number;
}

/** The long-poll of the events routes. */
export function longPoll(o: LongPollOptions): LongPoll {
  return (p, q, waitMs, res) => poll(o, p, q, waitMs, res);
}

async function poll(o: LongPollOptions, p: Principal, q: EventsQuery, waitMs: number, res: ServerResponse) {
  const { service } = o;
  // A user filter asked for (by a token allowed to) is the filter's, like History's.
  const userId = readScope(p, q.threadId, q.userId);
  const release = service.admit('long-poll');
  const events: string[] = [];
  let bytes = 0;
  let lastSeq = 0;
  let live = false;
  let answered = false;
  let ended: { run_id: string; seq: number; status: RunStatusName } | undefined;
  let sub: Subscription | undefined;
  let timer: NodeJS.Timeout | undefined;
  let soon: NodeJS.Immediate | undefined;
  const answer = (hasMore: boolean): void => {
    if (answered) return;
    answered = true;
    clearTimeout(timer);
    if (soon) clearImmediate(soon);
    // The event that filled the page is not yet the subscription's cursor: take it from the page too.
    const cursor = Math.max(sub?.resumeCursor ?? q.afterSeq, lastSeq);
    sub?.close();
    release();
    // A run poll whose run has ended says so, with its status: polling on would only get this again.
    const end = ended === undefined ? '' : `,"end":${JSON.stringify(ended)}`;
    endJson(
      res,
      200,
      `{"events":[${events.join(',')}],"next_after_seq":${cursor},"has_more":${hasMore}${end}}`,
    );
  };
  const fail = (err: RunstreamError): void => {
    if (answered) return;
    answered = true;
    clearTimeout(timer);
    release();
    sendError(res, err);
  };
  const queue = service.queue<string>(
    {
      write: (json, done) => {
        events.push(json);
        bytes += json.length;
        done();
      },
      size: (json) => json.length,
    },
    Number.MAX_SAFE_INTEGER,
    () => undefined,
  );
  const renderer: Renderer<string> = {
    event: (_s, e) => e.json(),
    live: () => {
      live = true;
      if (events.length > 0) answer(false);
      return undefined;
    },
    end: (_s, runId, seq, status) => {
      ended = { run_id: runId, seq, status };
      return undefined;
    },
    deleted: () => undefined,
    error: () => undefined,
  };
  // Past the page's count or bytes, this response is full; more follow on the next poll.
  const full = (): boolean => events.length >= q.limit || bytes >= o.maxPageBytes;
  const sink = new (class extends QueuedSink<string> {
    override event(s: Subscription, e: DeliveredEvent): void {
      super.event(s, e);
      lastSeq = e.seq;
      if (full()) {
        s.close();
        answer(true);
      } else if (live && !soon) {
        // After the turn's events, and after the run-end check a terminal event among them
        // starts: an answer that holds the run's end says so.
        soon = setImmediate(() => {
          void s.endChecked().then(() => answer(false));
        });
      }
    }
  })(queue, renderer, (_s, how) => {
    if (how.kind === 'error') fail(how.error);
    else answer(false);
  });
  res.on('close', () => {
    if (!answered) {
      answered = true;
      clearTimeout(timer);
      sub?.close();
      release();
    }
  });
  try {
    sub = service.open(
      p,
      {
        threadId: q.threadId,
        start: { kind: 'after_seq', seq: q.afterSeq },
        filter: { runId: q.runId, categories: q.categories, eventTypes: q.eventTypes, userId },
        view: 'events',
      },
      sink,
    );
  } catch (err) {
    fail(
      err instanceof RunstreamError
        ? err
        : new RunstreamError(ErrorCode.Internal, 'internal error', { cause: err }),
    );
    return;
  }
  timer = setTimeout(() => answer(false), waitMs);
  timer.unref();
}
