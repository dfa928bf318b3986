/**
 * A scenario's result against its target, in one shape for the table, the summary JSON and
 * the plots: the value divided by a baseline measured in the same run (throughput targets,
 * e.g. e2e ≥ 0.5 × B-pg), or by the target itself for an absolute target (latency, RSS),
 * where the target ratio is then 1.
 */

export interface Ratio {
  /** The scenario's figure, in `unit`. */
  readonly value: number;
  /** What it is divided by: the baseline's figure, or the absolute limit itself. */
  readonly baseline: number;
  readonly ratio: number;
  /** The target on the ratio's scale (0.5 for "≥ 50 % of B-pg"; 1 for an absolute limit). */
  readonly target: number;
  readonly unit: string;
  /** 'higher': the target is ratio ≥ target (throughput); 'lower': ratio ≤ target (latency, memory). */
  readonly better: 'higher' | 'lower';
  readonly meets: boolean;
}

/** `value / baseline` against `target`; NaN (and not met) when either side is missing. */
export function ratioTo(
  value: number,
  baseline: number,
  target: number,
  unit: string,
  better: 'higher' | 'lower' = 'higher',
): Ratio {
  const ratio = baseline > 0 ? value / baseline : Number.NaN;
  const meets = Number.isFinite(ratio) && (better === 'higher' ? ratio >= target : ratio <= target);
  return { value, baseline, ratio, target, unit, better, meets };
}

/** An absolute limit such as "p99 ≤ 15 ms": the ratio is value / limit, the target 1. */
export function withinLimit(value: number, limit: number, unit: string): Ratio {
  return ratioTo(value, limit, 1, unit, 'lower');
}

/**
 * A scenario result with its targets, as bench/run.ts records it (and docs-report.ts finds
 * them): `ratio` for one target, `ratios` keyed by metric for several.
 */
export type Targeted<T> = T & {
  readonly scenario?: string;
  readonly metric?: string;
  readonly ratio?: Ratio;
  readonly ratios?: Record<string, Ratio>;
};
