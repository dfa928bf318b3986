/**
 * Ends a connection when its token expires: every long-lived transport (WebSocket,
 * gRPC streams, SSE) arms one of these with the principal's `expiresAtMs`.
 */
import type { Principal } from './principal.js';

/** setTimeout's longest delay; later expiries are reached in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Calls `onExpired` once, when `principal.expiresAtMs` passes (at once if it already has).
 * Returns a function that disarms it; a principal without expiry arms nothing.
 */
export function watchExpiry(principal: Principal, onExpired: () => void): () => void {
  const at = principal.expiresAtMs;
  if (at === undefined) return () => undefined;
  let timer: NodeJS.Timeout | undefined;
  const arm = (): void => {
    const left = at - Date.now();
    if (left <= 0) {
      timer = undefined;
      onExpired();
      return;
    }
    timer = setTimeout(arm, Math.min(left, MAX_TIMER_MS));
    // An expiry alone must not keep a process alive.
    timer.unref();
  };
  arm();
  return () => {
    clearTimeout(timer);
    timer = undefined;
  };
}
