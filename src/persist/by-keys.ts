/**
 * Lookups by many keys (events, thread runs) that may span thousands of threads: a statement
 * per {@link KEYS_PER_STATEMENT} keys, each key an index probe, instead of one per thread.
 */

/** Keys one statement of a lookup names. */
export const KEYS_PER_STATEMENT = 1000;

/** Runs `statement` on `keys`, {@link KEYS_PER_STATEMENT} at a time and in order; its rows joined. */
export async function byKeys<K, R>(
  keys: readonly K[],
  statement: (chunk: readonly K[]) => Promise<readonly R[]>,
): Promise<R[]> {
  const rows: R[] = [];
  for (let i = 0; i < keys.length; i += KEYS_PER_STATEMENT) {
    for (const r of await statement(keys.slice(i, i + KEYS_PER_STATEMENT))) rows.push(r);
  }
  return rows;
}
