/**
 * A subscription request in the core's words, and the one validator every transport's
 * parser hands its fields to: a WebSocket frame's JSON, an SSE or long-poll query (its
 * strings converted first), a gRPC `SubscribeRequest`. The same bad field gets the same
 * `<field>: <problem>` error whatever the transport.
 */
import type { StartCursor } from '../../domain/cursor.js';
import { type EventFilter, parseFilter } from '../../domain/filter.js';
import { requiredId } from '../../domain/ids.js';
import { InvalidArgumentError, quote } from '../../errors.js';

/** What a subscription delivers: the thread's events, or its chat view built from them. */
export type SubscriptionView = 'events' | 'chat';

export interface SubscribeRequest {
  readonly threadId: string;
  readonly start: StartCursor;
  /** The client's filter (the principal's scope is added by the service). */
  readonly filter: EventFilter;
  readonly view: SubscriptionView;
}

/** A request's fields as plain values; absent (undefined or null) means not given. */
export interface SubscribeFields {
  readonly thread_id?: unknown;
  readonly after_seq?: unknown;
  readonly from_offset?: unknown;
  readonly live_only?: unknown;
  readonly run_id?: unknown;
  readonly categories?: unknown;
  readonly event_types?: unknown;
  readonly view?: unknown;
}

/** The keys of {@link SubscribeFields}. */
export const SUBSCRIBE_FIELDS: readonly (keyof SubscribeFields)[] = [
  'thread_id',
  'after_seq',
  'from_offset',
  'live_only',
  'run_id',
  'categories',
  'event_types',
  'view',
];

const given = (v: unknown): boolean => v !== undefined && v !== null;

/** Validates a request's fields, the first problem named. */
export function subscribeRequest(f: SubscribeFields): SubscribeRequest {
  const threadId = requiredId(f.thread_id, 'thread_id');
  return { threadId, ...subscribeOptions(f) };
}

/** What a request asks of its thread (the thread named elsewhere, e.g. in a path): start, filter, view. */
export function subscribeOptions(f: SubscribeFields): Omit<SubscribeRequest, 'threadId'> {
  const start = startOf(f);
  const filter = parseFilter(f as Record<string, unknown>);
  const view = viewOf(f.view);
  if (view === 'chat' && (filter.categories !== undefined || filter.eventTypes !== undefined)) {
    throw new InvalidArgumentError(
      filter.categories !== undefined ? 'categories' : 'event_types',
      'cannot be combined with view "chat" (the chat view reads the events it needs)',
    );
  }
  return { start, filter, view };
}

function viewOf(v: unknown): SubscriptionView {
  if (!given(v) || v === 'events') return 'events';
  if (v === 'chat') return 'chat';
  throw new InvalidArgumentError('view', `must be "events" or "chat" (got ${quote(v)})`);
}

/** `after_seq` (default 0), `from_offset`, or `live_only: true`: at most one of them. */
function startOf(f: SubscribeFields): StartCursor {
  const present = (['after_seq', 'from_offset', 'live_only'] as const).filter((k) => given(f[k]));
  if (present.length > 1) {
    throw new InvalidArgumentError(present[1] as string, `cannot be combined with ${present[0]}`);
  }
  if (given(f.live_only)) {
    if (f.live_only !== true) throw new InvalidArgumentError('live_only', 'must be true when given');
    return { kind: 'live' };
  }
  if (given(f.from_offset)) return { kind: 'from_offset', offset: seqField(f.from_offset, 'from_offset', 1) };
  if (!given(f.after_seq)) return { kind: 'after_seq', seq: 0 };
  return { kind: 'after_seq', seq: seqField(f.after_seq, 'after_seq', 0) };
}

function seqField(v: unknown, field: string, min: number): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
    throw new InvalidArgumentError(
      field,
      min === 0 ? 'must be a non-negative integer' : `must be an integer >= ${min}`,
    );
  }
  return v;
}

export { refuseUnknownKeys } from '../../domain/keys.js';
