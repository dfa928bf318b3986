/**
 * Checking a client out of the pool for a transaction. A checked-out client has no
 * listener of the pool's: if its connection fails while no query is running on it (a
 * backend terminated, Postgres restarted, a failover), pg emits `'error'` on the client,
 * and an `'error'` event with no listener ends the process. {@link withClient} listens for
 * as long as the client is held, and gives a broken client back to be destroyed, not reused.
 */
import type pg from 'pg';

/** Runs `fn` on a client checked out of `pool`, and releases it however `fn` ends. */
export async function withClient<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  const onError = (err: Error): void => {
    broken ??= err;
  };
  client.on('error', onError);
  try {
    return await fn(client);
  } catch (err) {
    // The query saw the failure first; the client is no more use than after an 'error'.
    if (isConnectionFailure(err)) broken ??= err as Error;
    throw err;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}

/** Postgres ended the session (class 08, 57P0x) or the socket failed. */
export function isConnectionFailure(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string') return /^(08...|57P0.|ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT)$/.test(code);
  return /Connection terminated|not queryable/i.test(String(err));
}
