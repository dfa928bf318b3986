/**
 * Times several ways of doing the same work in one process: each round runs every way
 * `iterations` times, in turn, after one warm-up round; the median of the rounds, in ns per
 * item (`items` per call). Alternating keeps a noisy host's drift out of the comparison.
 */
import { median } from './stats.js';

export function timeAlternated(
  ways: readonly (readonly [string, () => unknown])[],
  o: { readonly rounds: number; readonly iterations: number; readonly items: number },
): Map<string, number> {
  const ns = new Map<string, number[]>(ways.map(([name]) => [name, []]));
  for (let round = -1; round < o.rounds; round++) {
    for (const [name, run] of ways) {
      const start = process.hrtime.bigint();
      for (let i = 0; i < o.iterations; i++) run();
      const perItem = Number(process.hrtime.bigint() - start) / o.iterations / o.items;
      if (round >= 0) ns.get(name)?.push(perItem);
    }
  }
  return new Map([...ns].map(([name, v]) => [name, median(v)]));
}
