/**
 * The request side of an SSE stream: where it starts (query cursors, `Last-Event-ID`),
 * what it filters, and the ids in its path.
 */
import { InvalidArgumentError } from '../errors.js';
import { intParam } from '../http/util.js';
import { ID_PATTERN } from '../ingest/validate.js';
import { type EventFilter, parseFilter } from './filter.js';
import type { StartCursor } from './subscription.js';

export interface StreamQuery {
  readonly start: StartCursor;
  readonly filter: EventFilter;
  /** The start came from `Last-Event-ID`: the client is reconnecting. */
  readonly resumed: boolean;
}

/**
 * The cursor and filters of `GET /v1/threads/{t}/stream`. `after_seq`, `from_offset` and
 * `live_only=true` are exclusive; `Last-Event-ID` wins over all of them, because an
 * EventSource reconnects with the URL it started with plus that header, and the header
 * is where the client really is.
 */
export function parseStreamQuery(url: URL, lastEventIdHeader: string | string[] | undefined): StreamQuery {
  const given = ['after_seq', 'from_offset', 'live_only'].filter((k) => url.searchParams.has(k));
  if (given.length > 1) {
    throw new InvalidArgumentError(given[1] as string, `cannot be combined with ${given[0]}`);
  }
  let start: StartCursor = { kind: 'after_seq', seq: 0 };
  if (url.searchParams.has('after_seq')) {
    start = { kind: 'after_seq', seq: intParam(url, 'after_seq', 0, 0, Number.MAX_SAFE_INTEGER) };
  } else if (url.searchParams.has('from_offset')) {
    start = { kind: 'from_offset', offset: intParam(url, 'from_offset', 1, 1, Number.MAX_SAFE_INTEGER) };
  } else if (url.searchParams.has('live_only')) {
    const v = url.searchParams.get('live_only');
    if (v === 'true' || v === '1') start = { kind: 'live' };
    else if (v !== 'false' && v !== '0') throw new InvalidArgumentError('live_only', 'must be true or false');
  }
  const filter = parseFilter({
    run_id: url.searchParams.get('run_id') ?? undefined,
    categories: listParam(url, 'categories'),
    event_types: listParam(url, 'event_types'),
  });
  const lastEventId = lastEventIdSeq(lastEventIdHeader);
  if (lastEventId !== undefined)
    return { start: { kind: 'after_seq', seq: lastEventId }, filter, resumed: true };
  return { start, filter, resumed: false };
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

/** A comma-separated (or repeated) query parameter, or undefined when absent. */
function listParam(url: URL, name: string): string[] | undefined {
  const all = url.searchParams.getAll(name);
  if (all.length === 0) return undefined;
  const values = all.flatMap((v) => v.split(',')).map((v) => v.trim());
  if (values.some((v) => v === '')) {
    throw new InvalidArgumentError(name, 'must be a comma-separated list of non-empty values');
  }
  return values;
}

/** A path segment naming an id, decoded and checked. */
export function pathId(segment: string | undefined, field: string): string {
  let id: string;
  try {
    id = decodeURIComponent(segment ?? '');
  } catch {
    throw new InvalidArgumentError(field, 'is not a valid URL path segment');
  }
  if (!ID_PATTERN.test(id)) throw new InvalidArgumentError(field, 'must match [A-Za-z0-9_-]{1,128}');
  return id;
}
