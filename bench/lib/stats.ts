/** Percentiles and medians for the benchmark: exact, from the recorded samples. */

/** Latency summary in milliseconds. */
export interface LatencySummary {
  readonly count: number;
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  readonly max: number;
}

/** Nearest-rank percentile (`p` in [0, 100]) of samples sorted ascending. */
export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1] as number;
}

/** Sorts a copy of the samples (a few hundred thousand at most, so exact beats a histogram here). */
export function summarize(samples: readonly number[]): LatencySummary {
  const sorted = Float64Array.from(samples).sort();
  return {
    count: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    p999: percentile(sorted, 99.9),
    max: sorted.length > 0 ? (sorted[sorted.length - 1] as number) : Number.NaN,
  };
}

/** Median of the finite values (the lower middle one of an even count); NaN when there is none. */
export function median(values: readonly number[]): number {
  const finite = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (finite.length === 0) return Number.NaN;
  return finite[Math.floor((finite.length - 1) / 2)] as number;
}
