/**
 * Validation of producer input. Every field is checked before anything is published;
 * the first problem found is reported with its path (`events[3].content_json`), and the
 * request is refused whole.
 */
import { v7 as uuidv7 } from 'uuid';
import { CATEGORY_PATTERN, CATEGORY_RULE, categoryOfEnum, type LogRecord } from '../domain/event.js';
import { EVENT_TYPE_PATTERN, optionalId, requiredId } from '../domain/ids.js';
import { TIME_TEXT_RULE, timeTextMs } from '../domain/time-text.js';
import { withTraceparent } from '../domain/trace.js';
import { InvalidArgumentError, quote } from '../errors.js';
import type { Event__Output } from '../gen/runstream/v1/Event.js';
import { holdsInfiniteNumber, jsonTextProblem } from './json-text.js';

export interface ValidationLimits {
  readonly maxContentBytes: number;
  readonly maxEventsPerRequest: number;
  /** Deepest nesting of content_json and metadata_json (RS_MAX_JSON_DEPTH). */
  readonly maxJsonDepth: number;
}

/**
 * Validates a whole request's events and turns them into log records, or throws. A request's
 * `traceparent` goes into each record's metadata (domain/trace.ts), after the size check.
 */
export function validateEvents(
  events: readonly Event__Output[],
  limits: ValidationLimits,
  now: Date = new Date(),
  traceparent?: string,
): LogRecord[] {
  if (events.length === 0) throw new InvalidArgumentError('events', 'at least one event is required');
  if (events.length > limits.maxEventsPerRequest) {
    throw new InvalidArgumentError(
      'events',
      `${events.length} events in one request; the limit is ${limits.maxEventsPerRequest}`,
    );
  }
  const records: LogRecord[] = new Array(events.length);
  const receivedAt = now.toISOString();
  let previous: Validated | undefined;
  for (let i = 0; i < events.length; i++) {
    const e = events[i] as Event__Output;
    const record = validateEvent(e, `events[${i}]`, limits, receivedAt, traceparent, previous);
    records[i] = record;
    previous = { event: e, record };
  }
  return records;
}

/**
 * The request's previous event, valid, and its record. The events of a request mostly share
 * their thread, run, type, user and metadata: a field equal to that event's was checked there
 * (the checks depend on the value alone), so it is not checked again.
 */
interface Validated {
  readonly event: Event__Output;
  readonly record: LogRecord;
}

function validateEvent(
  e: Event__Output,
  path: string,
  limits: ValidationLimits,
  receivedAt: string,
  traceparent: string | undefined,
  previous: Validated | undefined,
): LogRecord {
  const p = previous?.event;
  if (e.thread_id !== p?.thread_id) requiredId(e.thread_id, `${path}.thread_id`);
  if (e.run_id !== p?.run_id) requiredId(e.run_id, `${path}.run_id`);
  optionalId(e.event_id, `${path}.event_id`);
  if (e.user_id !== p?.user_id) optionalId(e.user_id, `${path}.user_id`);
  if (e.event_type !== p?.event_type && !EVENT_TYPE_PATTERN.test(e.event_type)) {
    throw new InvalidArgumentError(
      `${path}.event_type`,
      e.event_type === '' ? 'is required' : 'must be 1-64 printable ASCII characters without spaces',
    );
  }
  const category =
    previous !== undefined && e.category === p?.category && e.category_name === p.category_name
      ? previous.record.category
      : categoryOf(e, path);
  if (e.seq !== 0) throw new InvalidArgumentError(`${path}.seq`, 'is assigned by the broker; leave it 0');
  if (e.offset !== 0)
    throw new InvalidArgumentError(`${path}.offset`, 'is assigned by the broker; leave it 0');

  const contentBytes = Buffer.byteLength(e.content_json, 'utf8');
  if (contentBytes > limits.maxContentBytes) {
    throw new InvalidArgumentError(
      `${path}.content_json`,
      `is ${contentBytes} bytes; the limit is ${limits.maxContentBytes}`,
    );
  }
  checkJson(e.content_json, `${path}.content_json`, false, limits.maxJsonDepth);
  const metadataJson = e.metadata_json === '' ? '{}' : e.metadata_json;
  const sameMetadata = previous !== undefined && e.metadata_json === previous.event.metadata_json;
  if (!sameMetadata) {
    const metadataBytes = Buffer.byteLength(metadataJson, 'utf8');
    if (metadataBytes > limits.maxContentBytes) {
      throw new InvalidArgumentError(
        `${path}.metadata_json`,
        `is ${metadataBytes} bytes; the limit is ${limits.maxContentBytes}`,
      );
    }
    checkJson(metadataJson, `${path}.metadata_json`, true, limits.maxJsonDepth);
  }

  const stamped = e.created_at ? timestampToIso(e.created_at, `${path}.created_at`) : undefined;
  const text = e.created_at_text === '' ? undefined : e.created_at_text;
  if (text !== undefined && e.created_at) {
    throw new InvalidArgumentError(
      `${path}.created_at_text`,
      'cannot be given with created_at; give one of them',
    );
  }
  const record: { -readonly [K in keyof LogRecord]: LogRecord[K] } = {
    thread_id: e.thread_id,
    run_id: e.run_id,
    event_id: e.event_id === '' ? uuidv7() : e.event_id,
    event_type: e.event_type,
    category,
    user_id: e.user_id,
    created_at: text !== undefined ? timeTextToIso(text, `${path}.created_at_text`) : (stamped ?? receivedAt),
    content_json: e.content_json,
    metadata_json:
      traceparent === undefined
        ? metadataJson
        : sameMetadata
          ? (previous as Validated).record.metadata_json
          : withTraceparent(metadataJson, traceparent),
  };
  // Added after the literal, not spread into it (domain/event.ts storedEvent says why).
  if (text !== undefined) record.created_at_text = text;
  return record;
}

/**
 * The event's category: `category_name` when given (any name matching the rule; the enum,
 * if set too, must name the same one), else the enum's known name.
 */
function categoryOf(e: Event__Output, path: string): string {
  const byEnum = categoryOfEnum(e.category);
  const name = e.category_name;
  if (name === '' || name === undefined) {
    if (byEnum === undefined) {
      throw new InvalidArgumentError(
        `${path}.category`,
        `must be MESSAGE, TRACE or LIFECYCLE, or category_name set (got ${String(e.category)})`,
      );
    }
    return byEnum;
  }
  if (!CATEGORY_PATTERN.test(name)) {
    throw new InvalidArgumentError(`${path}.category_name`, `${CATEGORY_RULE} (got ${quote(name)})`);
  }
  const enumSet =
    e.category !== 'CATEGORY_UNSPECIFIED' && e.category !== undefined && (e.category as unknown) !== 0;
  if (enumSet && byEnum !== name) {
    throw new InvalidArgumentError(
      `${path}.category`,
      `is ${String(e.category)} but category_name is ${quote(name)}; leave category unset or name the same one`,
    );
  }
  return name;
}

/**
 * JSON.parse refuses NaN, Infinity, trailing garbage and raw control characters (V8's parser
 * does not recurse, so depth cannot hurt it). What it accepts but Postgres cannot store is
 * refused too: see {@link jsonTextProblem}; and numbers past a double's range, which readers
 * cannot hold ({@link holdsInfiniteNumber}).
 */
function checkJson(text: string, field: string, mustBeObject: boolean, maxDepth: number): void {
  if (text === '') throw new InvalidArgumentError(field, 'is required (any JSON value, e.g. null)');
  if (text === '{}') return; // what an event without metadata carries: nothing to parse
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new InvalidArgumentError(field, `is not valid JSON (${(err as Error).message})`);
  }
  if (mustBeObject && (value === null || typeof value !== 'object' || Array.isArray(value))) {
    throw new InvalidArgumentError(field, 'must be a JSON object');
  }
  const problem = jsonTextProblem(text, maxDepth);
  if (problem !== undefined) throw new InvalidArgumentError(field, problem);
  if (holdsInfiniteNumber(text, value)) {
    throw new InvalidArgumentError(
      field,
      'holds a number beyond the range of a double (about ±1.8e308), which most JSON readers cannot hold',
    );
  }
}

const MIN_TIMESTAMP_S = Date.UTC(1970, 0, 1) / 1000;
/** The last second of 9999. */
const MAX_TIMESTAMP_S = Date.UTC(10000, 0, 1) / 1000 - 1;

/** A producer's time text (domain/time-text.ts) as the RFC 3339 instant it names. */
function timeTextToIso(text: string, field: string): string {
  const ms = timeTextMs(text);
  if (ms === undefined) throw new InvalidArgumentError(field, `${TIME_TEXT_RULE} (got ${quote(text)})`);
  if (ms < MIN_TIMESTAMP_S * 1000 || ms > MAX_TIMESTAMP_S * 1000) {
    throw new InvalidArgumentError(field, 'must be between 1970 and 9999');
  }
  return new Date(ms).toISOString();
}

function timestampToIso(ts: { seconds: number | string; nanos: number }, field: string): string {
  const seconds = Number(ts.seconds);
  if (!Number.isFinite(seconds) || seconds < MIN_TIMESTAMP_S || seconds > MAX_TIMESTAMP_S) {
    throw new InvalidArgumentError(field, 'seconds must be between 1970 and 9999');
  }
  if (!Number.isInteger(ts.nanos) || ts.nanos < 0 || ts.nanos > 999_999_999) {
    throw new InvalidArgumentError(field, 'nanos must be in [0, 999999999]');
  }
  return new Date(seconds * 1000 + Math.floor(ts.nanos / 1e6)).toISOString();
}
