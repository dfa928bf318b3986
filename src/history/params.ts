/**
 * Validation of History parameters, shared by gRPC and HTTP so both refuse the same
 * input with the same `<field>: <problem>` message.
 */

import { CATEGORY_PATTERN } from '../domain/event.js';
import { MAX_FILTER_VALUES } from '../domain/filter.js';
import { EVENT_TYPE_PATTERN } from '../domain/ids.js';
import { RUN_STATUSES, type RunStatusName } from '../domain/run-lifecycle.js';
import { InvalidArgumentError, quote } from '../errors.js';

export const DEFAULT_HISTORY_LIMIT = 100;
export const MAX_HISTORY_LIMIT = 1000;

export { optionalId, requiredId } from '../domain/ids.js';

/** Page size: absent or 0 means the default. */
export function limitOf(v: number | undefined): number {
  if (v === undefined || v === 0) return DEFAULT_HISTORY_LIMIT;
  if (!Number.isSafeInteger(v) || v < 1 || v > MAX_HISTORY_LIMIT) {
    throw new InvalidArgumentError('limit', `must be an integer in [1, ${MAX_HISTORY_LIMIT}]`);
  }
  return v;
}

/** A seq cursor; `before_seq` 0 means none. */
export function seqOf(v: number | undefined, field: string): number {
  const n = v ?? 0;
  if (!Number.isSafeInteger(n) || n < 0)
    throw new InvalidArgumentError(field, 'must be a non-negative integer');
  return n;
}

function list<T extends string>(
  raw: readonly string[] | undefined,
  field: string,
  check: (v: string) => boolean,
  expected: string,
): T[] | undefined {
  if (!raw || raw.length === 0) return undefined;
  if (raw.length > MAX_FILTER_VALUES) {
    throw new InvalidArgumentError(field, `at most ${MAX_FILTER_VALUES} values`);
  }
  for (const v of raw) {
    if (!check(v)) throw new InvalidArgumentError(field, `${quote(v)} is not ${expected}`);
  }
  return raw as T[];
}

/** Category names (`message`, `trace`, `lifecycle` or any other); empty means all. */
export function categoriesOf(raw: readonly string[] | undefined): ReadonlySet<string> | undefined {
  const names = list<string>(
    raw,
    'categories',
    (v) => CATEGORY_PATTERN.test(v),
    'a category name (a lower-case identifier matching [a-z][a-z0-9_]{0,63})',
  );
  return names && new Set(names);
}

/** Longest `metadata.task_id` a History filter takes. */
export const MAX_TASK_ID_CHARS = 256;

/**
 * The `metadata.task_id` filter: only events whose metadata has this string as `task_id`.
 * Absent means no filter; so does empty where the transport cannot tell the two apart (proto).
 */
export function taskIdOf(
  v: string | null | undefined,
  field: string,
  emptyIsAbsent: boolean,
): string | undefined {
  if (v === null || v === undefined || (v === '' && emptyIsAbsent)) return undefined;
  if (v === '') throw new InvalidArgumentError(field, 'must not be empty');
  // Postgres text cannot hold U+0000: no stored task_id has one.
  if (v.includes('\u0000')) throw new InvalidArgumentError(field, 'must not contain \\u0000');
  if (v.length > MAX_TASK_ID_CHARS)
    throw new InvalidArgumentError(field, `is longer than ${MAX_TASK_ID_CHARS} characters`);
  return v;
}

export function eventTypesOf(raw: readonly string[] | undefined): ReadonlySet<string> | undefined {
  const types = list<string>(raw, 'event_types', (v) => EVENT_TYPE_PATTERN.test(v), 'a valid event type');
  return types && new Set(types);
}

export function statusesOf(raw: readonly string[] | undefined): RunStatusName[] | undefined {
  return list<RunStatusName>(
    raw,
    'statuses',
    (v) => (RUN_STATUSES as readonly string[]).includes(v),
    RUN_STATUSES.join(', '),
  );
}
