/**
 * What an id may be, checked in one place for every surface: thread, run, event and user
 * ids are `[A-Za-z0-9_-]{1,128}` (safe as NATS subject tokens, URL segments and SQL text),
 * event types are short printable ASCII. Every malformed id anywhere is the same
 * `InvalidArgumentError` naming its field; every path segment is decoded by {@link pathId}.
 */
import { InvalidArgumentError } from '../errors.js';

/** The longest id, in characters. */
export const MAX_ID_LENGTH = 128;
export const ID_PATTERN = new RegExp(`^[A-Za-z0-9_-]{1,${MAX_ID_LENGTH}}$`);
/** The rule of {@link ID_PATTERN}, as error messages say it. */
export const ID_RULE = `must match [A-Za-z0-9_-]{1,${MAX_ID_LENGTH}}`;
/** The longest event type, in characters. */
export const MAX_EVENT_TYPE_LENGTH = 64;
/** Event types: short, printable ASCII, no spaces. */
export const EVENT_TYPE_PATTERN = new RegExp(`^[\\x21-\\x7e]{1,${MAX_EVENT_TYPE_LENGTH}}$`);

export function isId(v: unknown): v is string {
  return typeof v === 'string' && ID_PATTERN.test(v);
}

/** A required id: `is required` when absent or empty, `must match …` when malformed. */
export function requiredId(v: unknown, field: string): string {
  if (v === undefined || v === null || v === '') throw new InvalidArgumentError(field, 'is required');
  if (!isId(v)) throw new InvalidArgumentError(field, ID_RULE);
  return v;
}

/** An optional id: absent, null or empty means none. */
export function optionalId(v: unknown, field: string): string | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  if (!isId(v)) throw new InvalidArgumentError(field, ID_RULE);
  return v;
}

/** A URL path segment naming an id: percent-decoded, then checked as {@link requiredId}. */
export function pathId(segment: string | undefined, field: string): string {
  let id: string;
  try {
    id = decodeURIComponent(segment ?? '');
  } catch {
    throw new InvalidArgumentError(field, 'is not valid percent-encoding');
  }
  return requiredId(id, field);
}
