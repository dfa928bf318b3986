/**
 * One `/metrics` answer for a host of workers: every worker's registry, merged by
 * prom-client's {@link AggregatorRegistry.aggregate}, with the same names and labels as a
 * single process, so dashboards and alerts read the same either way. Counters, histograms
 * and the gauges of held things (connections, queued bytes, memory) are summed. Event-loop
 * delay is the worst worker's, not the average: one saturated worker is what it must show.
 * The primary's own metrics (workers up, restarts) are added.
 */
import { AggregatorRegistry, type Registry } from 'prom-client';
import type { WorkerMetrics } from './messages.js';

const WORST_WORKER = /^nodejs_eventloop_lag_(?!min_)/;

export async function aggregateMetrics(
  workers: readonly WorkerMetrics[],
  own: Registry,
): Promise<{ contentType: string; body: string }> {
  const adjusted = workers.map((metrics) =>
    metrics.map((m) => (WORST_WORKER.test(m.name) ? { ...m, aggregator: 'max' as const } : m)),
  );
  const merged = AggregatorRegistry.aggregate([...adjusted, await own.getMetricsAsJSON()]);
  return { contentType: merged.contentType, body: await merged.metrics() };
}
