/**
 * The event as it travels between stages, and its one client-facing JSON form.
 *
 * The JetStream log carries a {@link LogRecord} (content and metadata kept as the
 * producer's JSON text); Postgres stores the same text; {@link eventJson} renders a
 * stored event for every reader (live fan-out, catch-up, HTTP), so a client sees
 * byte-identical events whichever path delivered them.
 */

import { InvalidArgumentError, quote } from '../errors.js';
import { EVENT_TYPE_PATTERN, ID_PATTERN as LOG_ID } from './ids.js';
import { timeTextMs } from './time-text.js';

/**
 * The categories the broker gives a meaning to: `message` (the conversation, counted as
 * messages), `trace` and `lifecycle` (a run's start and end). Any other name that matches
 * {@link CATEGORY_PATTERN} is stored and returned as given, and means nothing to the broker.
 */
export const CATEGORIES = ['message', 'trace', 'lifecycle'] as const;
/** One of the three known categories. */
export type CategoryName = (typeof CATEGORIES)[number];

/** The longest category name, in characters. */
export const MAX_CATEGORY_LENGTH = 64;
/** What a category name may be: a short lower-case identifier. */
export const CATEGORY_PATTERN = new RegExp(`^[a-z][a-z0-9_]{0,${MAX_CATEGORY_LENGTH - 1}}$`);
/** The rule of {@link CATEGORY_PATTERN}, as error messages say it. */
export const CATEGORY_RULE = `must be a lower-case identifier matching [a-z][a-z0-9_]{0,${MAX_CATEGORY_LENGTH - 1}}`;

/** Category number as stored in Postgres and sent over gRPC. */
export const CATEGORY_NUMBER: Readonly<Record<CategoryName, number>> = { message: 1, trace: 2, lifecycle: 3 };

const KNOWN_NUMBER: ReadonlyMap<string, number> = new Map(Object.entries(CATEGORY_NUMBER));

/**
 * A category's number in Postgres' `run_events.category`: 1-3 for the known ones, 0 for
 * any other name (which `category_name` then holds, migration 0006).
 */
export function categoryNumber(name: string): number {
  return KNOWN_NUMBER.get(name) ?? 0;
}

export function categoryName(n: number): CategoryName {
  const name = CATEGORIES[n - 1];
  if (name === undefined) throw new RangeError(`unknown category number ${n}`);
  return name;
}

const BY_PROTO_ENUM: ReadonlyMap<unknown, CategoryName> = new Map([
  ['MESSAGE', 'message'],
  ['TRACE', 'trace'],
  ['LIFECYCLE', 'lifecycle'],
]);

/**
 * A `runstream.v1.Category` enum value as a category name: the known names for MESSAGE,
 * TRACE and LIFECYCLE, undefined for CATEGORY_UNSPECIFIED or a number no name has.
 */
export function categoryOfEnum(v: unknown): CategoryName | undefined {
  return BY_PROTO_ENUM.get(v);
}

/**
 * A gRPC request's `categories` (enum values) and `category_names` as one list of names. An
 * enum value without a name (CATEGORY_UNSPECIFIED, an unknown number) stays as its text,
 * which no category name matches, so the filter's check refuses it by its value.
 */
export function requestCategories(enums: readonly unknown[], names: readonly string[]): string[] {
  return [...enums.map((c) => categoryOfEnum(c) ?? String(c)), ...names];
}

/**
 * Runs `check` (a validation that takes {@link requestCategories}' merged list, with the
 * request's other fields in their order) and names a refused category by the list it came
 * from: a value no category name matches, with every enum value a category, was in
 * `category_names`. Other errors, the combined list's count included, pass as they are.
 */
export function checkedCategories<T>(enums: readonly unknown[], names: readonly string[], check: () => T): T {
  try {
    return check();
  } catch (err) {
    const bad = names.find((n) => !CATEGORY_PATTERN.test(n));
    if (
      bad !== undefined &&
      err instanceof InvalidArgumentError &&
      err.field === 'categories' &&
      err.message.includes('is not a category name') &&
      enums.every((c) => categoryOfEnum(c) !== undefined)
    ) {
      throw new InvalidArgumentError(
        'category_names',
        `${quote(bad)} is not a category name (a lower-case identifier matching [a-z][a-z0-9_]{0,63})`,
      );
    }
    throw err;
  }
}

/** The `runstream.v1.Category` enum value of a category name (CATEGORY_UNSPECIFIED for any other). */
export function categoryEnum(name: string): 'MESSAGE' | 'TRACE' | 'LIFECYCLE' | 'CATEGORY_UNSPECIFIED' {
  switch (name) {
    case 'message':
      return 'MESSAGE';
    case 'trace':
      return 'TRACE';
    case 'lifecycle':
      return 'LIFECYCLE';
    default:
      return 'CATEGORY_UNSPECIFIED';
  }
}

/** A validated event as published to the JetStream log. */
export interface LogRecord {
  readonly thread_id: string;
  readonly run_id: string;
  readonly event_id: string;
  readonly event_type: string;
  /** One of {@link CATEGORIES}, or any other name matching {@link CATEGORY_PATTERN}. */
  readonly category: string;
  readonly user_id: string;
  /** RFC 3339, millisecond precision, UTC: the instant, for runs' times and the proto Timestamp. */
  readonly created_at: string;
  /**
   * The producer's own text of created_at (domain/time-text.ts), which clients get instead of
   * `created_at`, exactly as given. Absent when the producer gave none.
   */
  readonly created_at_text?: string | undefined;
  /** Any JSON value, as the producer's text. */
  readonly content_json: string;
  /** A JSON object, as the producer's text. */
  readonly metadata_json: string;
}

/** A stored event: a log record with its place in the thread and in the log. */
export interface StoredEvent extends LogRecord {
  readonly seq: number;
  readonly offset: number;
}

/**
 * A stored event of `r`, built key by key in one literal. V8 builds an object literal that
 * holds a spread followed by more keys (`{ ...r, seq, offset }`) in its runtime, with a new
 * shape each time: 3.3 µs an event against 25 ns this way (docs/benchmarks.md), in the
 * persister's every batch. `created_at_text` is added only when given (a key added after
 * the literal is a cached shape transition; a conditional spread inside it is not).
 */
export function storedEvent(r: LogRecord, seq: number, offset: number): StoredEvent {
  const e: { -readonly [K in keyof StoredEvent]: StoredEvent[K] } = {
    thread_id: r.thread_id,
    run_id: r.run_id,
    event_id: r.event_id,
    event_type: r.event_type,
    category: r.category,
    user_id: r.user_id,
    created_at: r.created_at,
    content_json: r.content_json,
    metadata_json: r.metadata_json,
    seq,
    offset,
  };
  if (r.created_at_text !== undefined) e.created_at_text = r.created_at_text;
  return e;
}

/**
 * The client-facing JSON text of a stored event: every field in snake_case, `content`
 * and `metadata` as JSON (not strings), `seq` and `offset` as numbers.
 */
export function eventJson(e: StoredEvent): string {
  return (
    `{"seq":${e.seq},"offset":${e.offset},"thread_id":"${e.thread_id}","run_id":"${e.run_id}"` +
    `,"event_id":"${e.event_id}","event_type":${JSON.stringify(e.event_type)},"category":"${e.category}"` +
    `,"user_id":"${e.user_id}","created_at":"${e.created_at_text ?? e.created_at}"` +
    `,"content":${e.content_json},"metadata":${e.metadata_json}}`
  );
}

/**
 * Checks a parsed log record has the shape ingest writes, so that a message put
 * on the log by anything else cannot make Postgres refuse a whole batch forever.
 *
 * `previous`, a record of the same message that passed: a field equal to its is not checked
 * again (the checks depend on the value alone). A message's events share their thread and run,
 * and mostly their type, category, user and time: at 100 events a message, the checks of
 * those were a regular expression or a date parse each, per event.
 */
export function decodeLogRecord(value: unknown, previous?: LogRecord): LogRecord {
  if (typeof value !== 'object' || value === null) throw new Error('log record is not an object');
  const r = value as Partial<Record<keyof LogRecord, unknown>>;
  const bad = (field: string): never => {
    throw new Error(`log record has a bad ${field}`);
  };
  const p = previous;
  const id = (v: unknown): boolean => typeof v === 'string' && LOG_ID.test(v);
  if ((p === undefined || r.thread_id !== p.thread_id) && !id(r.thread_id)) bad('thread_id');
  if ((p === undefined || r.run_id !== p.run_id) && !id(r.run_id)) bad('run_id');
  if (!id(r.event_id)) bad('event_id');
  if (
    (p === undefined || r.user_id !== p.user_id) &&
    (typeof r.user_id !== 'string' || (r.user_id !== '' && !id(r.user_id)))
  )
    bad('user_id');
  if (
    (p === undefined || r.event_type !== p.event_type) &&
    (typeof r.event_type !== 'string' || !EVENT_TYPE_PATTERN.test(r.event_type))
  )
    bad('event_type');
  if (
    (p === undefined || r.category !== p.category) &&
    (typeof r.category !== 'string' || !CATEGORY_PATTERN.test(r.category))
  )
    bad('category');
  if (
    (p === undefined || r.created_at !== p.created_at) &&
    (typeof r.created_at !== 'string' || Number.isNaN(Date.parse(r.created_at)))
  )
    bad('created_at');
  if (
    r.created_at_text !== undefined &&
    (p === undefined || r.created_at_text !== p.created_at_text) &&
    (typeof r.created_at_text !== 'string' || timeTextMs(r.created_at_text) === undefined)
  )
    bad('created_at_text');
  if (typeof r.content_json !== 'string') bad('content_json');
  if (typeof r.metadata_json !== 'string') bad('metadata_json');
  return r as LogRecord;
}
