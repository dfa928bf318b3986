/**
 * The request side of an SSE stream: its query, turned into the core's subscription
 * fields (and checked by the core's one validator), and `Last-Event-ID`.
 */
import { InvalidArgumentError } from '../../errors.js';
import { intParam, LIST_PARAMS, listParam, strictQuery } from '../../http/util.js';
import {
  refuseUnknownKeys,
  SUBSCRIBE_FIELDS,
  type SubscribeRequest,
  subscribeOptions,
} from '../core/request.js';

/** The query parameters of `GET /v1/threads/{t}/stream`; any other is refused, named. */
export const STREAM_PARAMS: ReadonlySet<string> = new Set([
  ...SUBSCRIBE_FIELDS.filter((k) => k !== 'thread_id'), // the thread is in the path
  'access_token',
]);

export interface StreamQuery extends Omit<SubscribeRequest, 'threadId'> {
  /** The start came from `Last-Event-ID`: the client is reconnecting. */
  readonly resumed: boolean;
}

/**
 * The cursor, filters and view of `GET /v1/threads/{t}/stream`. `after_seq`, `from_offset`
 * and `live_only=true` are exclusive; `Last-Event-ID` wins over all of them, because an
 * EventSource reconnects with the URL it started with plus that header, and the header
 * is where the client really is.
 */
export function parseStreamQuery(url: URL, lastEventIdHeader: string | string[] | undefined): StreamQuery {
  strictQuery(url, STREAM_PARAMS, 'the stream query', LIST_PARAMS);
  const q = url.searchParams;
  const liveOnly = q.get('live_only');
  if (liveOnly !== null && !['true', '1', 'false', '0'].includes(liveOnly)) {
    throw new InvalidArgumentError('live_only', 'must be true or false');
  }
  const options = subscribeOptions({
    after_seq: q.has('after_seq') ? intParam(url, 'after_seq', 0, 0, Number.MAX_SAFE_INTEGER) : undefined,
    from_offset: q.has('from_offset')
      ? intParam(url, 'from_offset', 1, 1, Number.MAX_SAFE_INTEGER)
      : undefined,
    live_only: liveOnly === 'true' || liveOnly === '1' ? true : undefined,
    run_id: q.get('run_id') ?? undefined,
    categories: listParam(url, 'categories'),
    event_types: listParam(url, 'event_types'),
    view: q.get('view') ?? undefined,
  });
  // A given-but-false live_only still counts against the other cursors, as it is given.
  const given = ['after_seq', 'from_offset', 'live_only'].filter((k) => q.has(k));
  if (given.length > 1)
    throw new InvalidArgumentError(given[1] as string, `cannot be combined with ${given[0]}`);
  const lastEventId = lastEventIdSeq(lastEventIdHeader);
  if (lastEventId !== undefined) {
    return { ...options, start: { kind: 'after_seq', seq: lastEventId }, resumed: true };
  }
  return { ...options, resumed: false };
}

/** The seq in a `Last-Event-ID` header; undefined when absent or empty. */
export function lastEventIdSeq(
  header: string | string[] | undefined,
  allowMinusOne = false,
): number | undefined {
  const raw = (Array.isArray(header) ? header[0] : header)?.trim();
  if (raw === undefined || raw === '') return undefined;
  if (allowMinusOne && raw === '-1') return 0;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n)) {
    throw new InvalidArgumentError('Last-Event-ID', 'must be a seq: a non-negative integer');
  }
  return n;
}
