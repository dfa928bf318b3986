/**
 * A subscription's filter: run, categories, event types. A filter decides what is
 * *delivered*; it never changes the cursor, which always advances over every seq the
 * subscription has passed, delivered or skipped.
 */

import { InvalidArgumentError, quote } from '../errors.js';
import { CATEGORY_PATTERN } from './event.js';
import { EVENT_TYPE_PATTERN, requiredId } from './ids.js';

export const MAX_FILTER_VALUES = 64;

export interface EventFilter {
  readonly runId: string | undefined;
  /** Category names: the known three or any other (an open set). */
  readonly categories: ReadonlySet<string> | undefined;
  readonly eventTypes: ReadonlySet<string> | undefined;
  /**
   * Set from a user-scoped token (never by the client): only that user's events are
   * delivered. An event whose user is unknown does not match.
   */
  readonly userId?: string | undefined;
}

export const NO_FILTER: EventFilter = { runId: undefined, categories: undefined, eventTypes: undefined };

/** What a filter needs to know of an event. */
export interface FilterableEvent {
  readonly run_id: string;
  readonly category: string;
  readonly event_type: string;
  readonly user_id?: string;
}

export function matches(f: EventFilter, e: FilterableEvent): boolean {
  return (
    (f.runId === undefined || e.run_id === f.runId) &&
    (f.categories === undefined || f.categories.has(e.category)) &&
    (f.eventTypes === undefined || f.eventTypes.has(e.event_type)) &&
    (f.userId === undefined || e.user_id === f.userId)
  );
}

export function isFiltered(f: EventFilter): boolean {
  return (
    f.runId !== undefined ||
    f.categories !== undefined ||
    f.eventTypes !== undefined ||
    f.userId !== undefined
  );
}

/** Reads `run_id`, `categories`, `event_types` from a subscribe frame (or query). */
export function parseFilter(msg: Record<string, unknown>): EventFilter {
  // Given means given: an empty run_id is a bad one, not no filter.
  const runId =
    msg.run_id === undefined || msg.run_id === null ? undefined : requiredId(msg.run_id, 'run_id');
  const list = (field: string, check: (v: string) => boolean, expected: string): string[] | undefined => {
    const raw = msg[field];
    if (raw === undefined || raw === null) return undefined;
    if (!Array.isArray(raw) || raw.length === 0 || raw.length > MAX_FILTER_VALUES) {
      throw new InvalidArgumentError(
        field,
        `must be a non-empty array of at most ${MAX_FILTER_VALUES} values`,
      );
    }
    for (const v of raw) {
      if (typeof v !== 'string' || !check(v))
        throw new InvalidArgumentError(field, `${quote(v)} is not ${expected}`);
    }
    return raw as string[];
  };
  const categories = list(
    'categories',
    (v) => CATEGORY_PATTERN.test(v),
    'a category name (a lower-case identifier matching [a-z][a-z0-9_]{0,63})',
  );
  const eventTypes = list('event_types', (v) => EVENT_TYPE_PATTERN.test(v), 'a valid event type');
  return {
    runId,
    categories: categories && new Set(categories),
    eventTypes: eventTypes && new Set(eventTypes),
  };
}
