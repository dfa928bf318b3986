/**
 * An event's time as text. A producer may give `created_at` as its own text (DeerFlow's
 * `datetime.isoformat()`, with microseconds and an offset); the broker keeps that text and
 * returns it exactly, and reads the instant it names here, once, at ingest: runs' times, the
 * `created_at` column and the proto Timestamp are made from the instant.
 */

/** Longest time text a producer may give. */
export const MAX_TIME_TEXT_CHARS = 64;

/** The forms {@link timeTextMs} reads, as error messages say it. */
export const TIME_TEXT_RULE =
  'must be an ISO 8601 date-time such as 2026-06-04T10:00:00.123456+00:00 (no offset: UTC), ' +
  `at most ${MAX_TIME_TEXT_CHARS} characters`;

// Date, `T` (or a space), hours and minutes; optional seconds with a fraction of 1-9 digits;
// optional `Z` or a ±hh, ±hhmm or ±hh:mm offset. Only these characters: the text needs no
// escaping in JSON.
const TIME_TEXT =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?(?:[Zz]|([+-])(\d{2})(?::?(\d{2}))?)?$/;

/**
 * Milliseconds since the epoch of a time text (the fraction cut to milliseconds); undefined
 * when it is not a date-time of {@link TIME_TEXT_RULE}'s forms or names no real day.
 */
export function timeTextMs(text: string): number | undefined {
  if (text.length > MAX_TIME_TEXT_CHARS) return undefined;
  const m = TIME_TEXT.exec(text);
  if (m === null) return undefined;
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  const hour = Number(m[4]);
  const minute = Number(m[5]);
  const second = m[6] === undefined ? 0 : Number(m[6]);
  const ms = m[7] === undefined ? 0 : Number(m[7].slice(0, 3).padEnd(3, '0'));
  if (month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59) return undefined;
  const d = new Date(0);
  // setUTCFullYear, not Date.UTC, which reads years 0-99 as 1900-1999.
  d.setUTCFullYear(year, month - 1, day);
  if (d.getUTCDate() !== day) return undefined; // 2026-02-30
  d.setUTCHours(hour, minute, second, ms);
  let offsetMinutes = 0;
  if (m[8] !== undefined) {
    const h = Number(m[9]);
    const mm = m[10] === undefined ? 0 : Number(m[10]);
    if (h > 23 || mm > 59) return undefined;
    offsetMinutes = (m[8] === '-' ? -1 : 1) * (h * 60 + mm);
  }
  return d.getTime() - offsetMinutes * 60_000;
}
