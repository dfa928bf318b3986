/** Exponential backoff with full jitter, shared by the subscriber's reconnects and the publisher's retries. */

export interface BackoffOptions {
  /** The first delay's upper bound. */
  initialDelayMs?: number;
  /** No delay exceeds this. */
  maxDelayMs?: number;
  /** Each attempt multiplies the bound by this. */
  factor?: number;
}

export const DEFAULT_INITIAL_DELAY_MS = 100;
export const DEFAULT_MAX_DELAY_MS = 10_000;
export const DEFAULT_BACKOFF_FACTOR = 2;

/**
 * The delay before retry number `attempt` (0-based): uniform in [0, min(max, initial·factor^attempt)].
 * Full jitter spreads a crowd of clients that lost the same broker across the window, so a
 * restarted node is not met by all of them in the same millisecond.
 */
export function backoffDelayMs(attempt: number, opts: BackoffOptions = {}, random = Math.random): number {
  const initial = opts.initialDelayMs ?? DEFAULT_INITIAL_DELAY_MS;
  const max = opts.maxDelayMs ?? DEFAULT_MAX_DELAY_MS;
  const factor = opts.factor ?? DEFAULT_BACKOFF_FACTOR;
  const bound = Math.min(max, initial * factor ** Math.min(attempt, 64));
  return Math.floor(random() * bound);
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
