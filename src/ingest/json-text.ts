/**
 * What a producer's JSON text must satisfy beyond being JSON, so that Postgres (and every
 * reader after it) can hold it: Postgres' `json` input refuses nesting past its stack depth
 * (10,000 levels pass and 20,000 fail at the default `max_stack_depth`), and text cannot
 * hold `\u0000` or a lone UTF-16 surrogate. One pass over the text, no recursion, no
 * parse tree, so a hostile input costs what its length costs.
 */

/**
 * The first problem of a JSON text (which JSON.parse has accepted), or undefined. Scans
 * only what can hold a problem: a text shorter than twice `maxDepth` cannot nest that deep,
 * and one without `\u` has no escaped NUL or surrogate.
 */
export function jsonTextProblem(text: string, maxDepth: number): string | undefined {
  if (!text.isWellFormed()) return 'contains a lone UTF-16 surrogate, which cannot be stored';
  const deep = text.length > 2 * maxDepth;
  const escapes = text.includes('\\u');
  if (!deep && !escapes) return undefined;
  let depth = 0;
  let inString = false;
  /** A `\uD800`-`\uDBFF` escape was just read: the next character must be a low surrogate escape. */
  let high = false;
  const lone = 'contains a lone UTF-16 surrogate (\\uD800-\\uDFFF escape), which cannot be stored';
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === BACKSLASH) {
        if (text.charCodeAt(i + 1) !== LOWER_U) {
          if (high) return lone;
          i++; // \" \\ \/ \b \f \n \r \t
          continue;
        }
        const unit = Number.parseInt(text.slice(i + 2, i + 6), 16);
        i += 5;
        if (unit === 0) return 'contains \\u0000, which cannot be stored';
        const isLow = unit >= 0xdc00 && unit <= 0xdfff;
        if (high) {
          if (!isLow) return lone;
          high = false;
        } else if (unit >= 0xd800 && unit <= 0xdbff) high = true;
        else if (isLow) return lone;
        continue;
      }
      if (high) return lone;
      if (c === QUOTE) inString = false;
      continue;
    }
    if (c === QUOTE) inString = true;
    else if (c === OPEN_BRACKET || c === OPEN_BRACE) {
      if (++depth > maxDepth) return `nests deeper than ${maxDepth} levels (RS_MAX_JSON_DEPTH)`;
    } else if (c === CLOSE_BRACKET || c === CLOSE_BRACE) depth--;
  }
  return undefined;
}

/**
 * Whether a parsed JSON value holds a number JSON.parse read as ±Infinity: a literal beyond
 * the range of an IEEE 754 double (`1e999`, 400 digits). JSON's grammar allows it, but few
 * readers can hold it: JavaScript reads it as Infinity (and writes that back as null), Go's
 * encoding/json refuses the whole document. RFC 7493 (I-JSON) asks for no numbers beyond a
 * double's magnitude, and the broker refuses them; numbers only more precise than a double
 * holds (a 20-digit id, 1e-999) are kept as written. `text` is the value's JSON text: only one
 * with an exponent of 3 digits or a run of 210 digits can hold such a number, and only such a
 * text is walked (without recursion).
 */
export function holdsInfiniteNumber(text: string, value: unknown): boolean {
  if (!HUGE_EXPONENT.test(text) && !hasDigitRun(text, HUGE_DIGIT_RUN)) return false;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) return true;
    } else if (Array.isArray(v)) {
      for (const item of v) stack.push(item);
    } else if (v !== null && typeof v === 'object') {
      for (const item of Object.values(v)) stack.push(item);
    }
  }
  return false;
}

/** An exponent of 100 or more: a number that may pass a double's magnitude (~1.8e308). */
const HUGE_EXPONENT = /[eE]\+?\d{3}/;
/**
 * A run of this many digits may pass a double's magnitude: 309 alone, or 210 with a 2-digit
 * exponent (209 digits × 1e99 stays below 1e308).
 */
const HUGE_DIGIT_RUN = 210;

/** Whether the text has `n` ASCII digits in a row; one pass (a regex `\d{n}` may rescan each run). */
function hasDigitRun(text: string, n: number): boolean {
  if (text.length < n) return false;
  let run = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= ZERO && c <= NINE) {
      if (++run >= n) return true;
    } else run = 0;
  }
  return false;
}

const ZERO = 0x30;
const NINE = 0x39;

const BACKSLASH = 0x5c;
const LOWER_U = 0x75;
const QUOTE = 0x22;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
