/**
 * The `content` and `metadata` of an event's client-facing JSON text (see `eventJson` in
 * `src/event.ts`), cut out as the producer's exact text, without parsing the event.
 *
 * The header keys come first in a fixed order and hold no unescaped quote (ids match
 * `[A-Za-z0-9_-]`, `event_type` is a JSON string), so the first `,"content":` is the key
 * itself; the content value is then scanned to its end (it may hold anything, including
 * a `"metadata"` key of its own), and the metadata object runs to the closing brace.
 */

const CONTENT_KEY = ',"content":';
const METADATA_KEY = ',"metadata":';

export interface EventJsonParts {
  readonly content: string;
  readonly metadata: string;
}

export function eventJsonParts(json: string): EventJsonParts {
  const keyAt = json.indexOf(CONTENT_KEY);
  if (keyAt < 0) throw new Error('event JSON has no content');
  const start = keyAt + CONTENT_KEY.length;
  const end = jsonValueEnd(json, start);
  const metaKeyAt = json.indexOf(METADATA_KEY, end);
  if (metaKeyAt < 0) throw new Error('event JSON has no metadata after its content');
  return {
    content: json.slice(start, end).trim(),
    metadata: json.slice(metaKeyAt + METADATA_KEY.length, json.length - 1).trim(),
  };
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

function isWhitespace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/** Index just past the JSON value starting at (or after whitespace from) `i`. */
export function jsonValueEnd(s: string, i: number): number {
  while (i < s.length && isWhitespace(s.charCodeAt(i))) i++;
  const first = s[i];
  if (first === '"') return stringEnd(s, i);
  if (first === '{' || first === '[') {
    let depth = 0;
    for (; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c === QUOTE) {
        i = stringEnd(s, i) - 1;
      } else if (c === 0x7b || c === 0x5b) {
        depth++;
      } else if (c === 0x7d || c === 0x5d) {
        if (--depth === 0) return i + 1;
      }
    }
    throw new Error('unterminated JSON value');
  }
  // A number or a literal: it runs to the next delimiter.
  while (i < s.length) {
    const c = s.charCodeAt(i);
    if (c === 0x2c || c === 0x7d || c === 0x5d || isWhitespace(c)) break;
    i++;
  }
  return i;
}

/** Index just past the string whose opening quote is at `i`. */
function stringEnd(s: string, i: number): number {
  for (i++; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === BACKSLASH) i++;
    else if (c === QUOTE) return i + 1;
  }
  throw new Error('unterminated JSON string');
}
