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

const BACKSLASH = 0x5c;
const LOWER_U = 0x75;
const QUOTE = 0x22;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
