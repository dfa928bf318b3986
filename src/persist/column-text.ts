/**
 * How the fast path's columns travel to Postgres as text (migration 0011, `rs_store_rows`):
 * a text column as ONE text, every element preceded by the record separator and a NULL as the
 * unit separator alone, which `rs_split_column` splits back; a number or boolean column as the
 * array literal Postgres reads for its `int8[]` / `bool[]` parameter.
 *
 * node-postgres would send a JS array as an array literal it builds by escaping every element
 * (two regular-expression passes and a quoted copy each, numbers included), which Postgres then
 * parses back quote by quote: for JSON text, full of quotes, the most expensive way there is.
 */

/** Precedes every element of a joined text column. */
export const ELEMENT_SEPARATOR = '\x1e';
/** An element that is NULL, alone between two separators. */
export const NULL_ELEMENT = '\x1f';

/**
 * A text column as one text: `rs_split_column` gives back exactly `values` (NULLs included),
 * as long as no element holds a separator, which the function detects (its columns then do not
 * line up) and sends the batch down the slow path.
 */
export function joinedText(values: readonly (string | null)[]): string {
  if (values.length === 0) return '';
  let nulls = false;
  for (const v of values) {
    if (v === null) {
      nulls = true;
      break;
    }
  }
  const texts = nulls ? values.map((v) => (v === null ? NULL_ELEMENT : v)) : values;
  return ELEMENT_SEPARATOR + texts.join(ELEMENT_SEPARATOR);
}

/** A number or boolean column as a Postgres array literal: `{1,2,NULL}`, `{true,false}`. */
export function arrayLiteral(values: readonly (number | boolean | null)[]): string {
  let s = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) s += ',';
    const v = values[i];
    if (v === null || v === undefined) s += 'NULL';
    else if (typeof v === 'number' && !Number.isFinite(v)) throw new RangeError(`not a finite number: ${v}`);
    else s += String(v);
  }
  return `${s}}`;
}
