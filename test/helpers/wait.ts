import { setTimeout as sleep } from 'node:timers/promises';

export interface WaitForOptions {
  /** Give up after this many milliseconds (default 10 000). */
  timeoutMs?: number;
  /** Pause between attempts (default 50). */
  intervalMs?: number;
  /** Human description of the awaited condition, used in the timeout error. */
  what?: string;
  /** Abort the wait early (rejects with the signal's reason). */
  signal?: AbortSignal;
}

/**
 * Polls `fn` until it returns something other than `undefined` / `false` and resolves with that value.
 * Exceptions thrown by `fn` count as "not yet" (the last one is reported on timeout).
 */
export async function waitFor<T>(
  fn: () => Promise<T | undefined | false> | T | undefined | false,
  opts: WaitForOptions = {},
): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const intervalMs = opts.intervalMs ?? 50;
  const what = opts.what ?? 'condition';
  const started = Date.now();
  let attempts = 0;
  let lastError: unknown;
  for (;;) {
    opts.signal?.throwIfAborted();
    attempts++;
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v;
      lastError = undefined;
    } catch (err) {
      lastError = err;
    }
    const elapsed = Date.now() - started;
    if (elapsed >= timeoutMs) {
      const last =
        lastError === undefined
          ? ''
          : `; last error: ${lastError instanceof Error ? lastError.message : String(lastError)}`;
      throw new Error(`Timed out after ${elapsed} ms (${attempts} attempts) waiting for ${what}${last}`, {
        cause: lastError,
      });
    }
    opts.signal?.throwIfAborted();
    await sleep(Math.min(intervalMs, Math.max(0, timeoutMs - elapsed)));
  }
}
