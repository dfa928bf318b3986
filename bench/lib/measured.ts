/** What every broker measurement reports besides its own numbers. */
import type { LoopDelaySecond } from './broker-probe.js';
import type { PgStatement } from './pg-statements.js';

export interface LoopDelaySummary {
  /** Mean of the per-second means over the measured window, ms. */
  readonly meanMs: number;
  /** Highest per-second p99 in the window, ms. */
  readonly p99MaxMs: number;
  readonly maxMs: number;
  /** Garbage collection over the window: pauses per second, the share of the time paused, the longest pause (ms). */
  readonly gcPerSecond: number;
  readonly gcShare: number;
  readonly gcMaxMs: number;
}

export interface Measured {
  /** Date.now() at the start and the end of the measured window. */
  readonly windowEpochMs: readonly [number, number];
  /** Event-loop delay of each broker process during the window (filled in once it has stopped). */
  loopDelay?: Record<string, LoopDelaySummary>;
  /** With `--pg-stats`: the statements Postgres spent the most time on in this run. */
  pgStatements?: readonly PgStatement[];
}

export function summarizeLoopDelay(
  seconds: readonly LoopDelaySecond[],
  [from, to]: readonly [number, number],
): LoopDelaySummary | undefined {
  // A per-second sample covers the second before `at`.
  const inside = seconds.filter((s) => s.at > from && s.at - 1_000 < to);
  if (inside.length === 0) return undefined;
  return {
    meanMs: Math.round((inside.reduce((a, s) => a + s.mean, 0) / inside.length) * 10) / 10,
    p99MaxMs: Math.max(...inside.map((s) => s.p99)),
    maxMs: Math.max(...inside.map((s) => s.max)),
    gcPerSecond: Math.round(inside.reduce((a, s) => a + s.gcCount, 0) / inside.length),
    gcShare: Math.round(inside.reduce((a, s) => a + s.gcMs, 0) / inside.length / 10) / 100,
    gcMaxMs: Math.max(...inside.map((s) => s.gcMaxMs)),
  };
}
