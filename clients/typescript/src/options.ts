/** Checks of the options the publisher and the subscriber take: a bad one is refused by name. */
import type { BackoffOptions } from './backoff.js';
import { RunstreamError } from './errors.js';

/** The longest a Node timer waits. */
export const MAX_TIMER_MS = 2_147_483_647;

export const invalid = (field: string, problem: string): RunstreamError =>
  new RunstreamError('invalid_argument', `${field}: ${problem}`);

/** A count: an integer of at least `min`, or Infinity (no limit) where `unlimited`. */
export function checkCount(v: number | undefined, name: string, min = 1, unlimited = false): void {
  if (v === undefined || (unlimited && v === Number.POSITIVE_INFINITY)) return;
  if (!(Number.isSafeInteger(v) && v >= min)) {
    throw invalid(
      name,
      `must be an integer of at least ${min}${unlimited ? ' (or Infinity)' : ''}, not ${String(v)}`,
    );
  }
}

/** A time in ms: finite, at least `min` (above it with `above`), at most `max`. */
export function checkMs(
  v: number | undefined,
  name: string,
  o: { min?: number; above?: boolean; max?: number } = {},
): void {
  if (v === undefined) return;
  const min = o.min ?? 0;
  const max = o.max ?? MAX_TIMER_MS;
  if (!(Number.isFinite(v) && (o.above ? v > min : v >= min) && v <= max)) {
    throw invalid(
      name,
      `must be a number of ms ${o.above ? 'above' : 'from'} ${min} to ${max}, not ${String(v)}`,
    );
  }
}

/** Backoff options: delays finite and not negative (the longest a timer), a factor of at least 1. */
export function checkBackoff(b: BackoffOptions | undefined, prefix: string): void {
  if (b === undefined) return;
  checkMs(b.initialDelayMs, `${prefix}.initialDelayMs`, { max: Number.MAX_VALUE });
  checkMs(b.maxDelayMs, `${prefix}.maxDelayMs`);
  if (b.factor !== undefined && !(Number.isFinite(b.factor) && b.factor >= 1)) {
    throw invalid(`${prefix}.factor`, `must be a finite number of at least 1, not ${String(b.factor)}`);
  }
}
