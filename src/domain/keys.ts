/**
 * Strict frames and queries: a key a request does not define is refused, named, so that a
 * misspelt `aftr_seq` is an error rather than a silent replay from seq 1. One rule for
 * WebSocket frames, the SSE stream's query and History's routes.
 */
import { InvalidArgumentError, quote } from '../errors.js';

/** A key that can be a field name in an error message (`<field>: <problem>`). */
const FIELD_LIKE = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

/**
 * Refuses the first key not in `allowed`: named as the field when it looks like one, else
 * quoted in an error of its `container` (`frame`, `query`).
 */
export function refuseUnknownKeys(
  keys: Iterable<string>,
  allowed: ReadonlySet<string>,
  what: string,
  container: string,
): void {
  for (const key of keys) {
    if (allowed.has(key)) continue;
    const known = `(known: ${[...allowed].join(', ')})`;
    if (FIELD_LIKE.test(key)) throw new InvalidArgumentError(key, `is not a field of ${what} ${known}`);
    throw new InvalidArgumentError(container, `${quote(key)} is not a field of ${what} ${known}`);
  }
}
