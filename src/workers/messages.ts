/**
 * The messages between the primary and its workers over node:cluster's IPC channel. Every
 * message carries `rs` (its kind), so the channel's other users (node itself) are told apart.
 */
import type { MetricObjectWithValues, MetricValue } from 'prom-client';
import type { Slot } from './plan.js';

export type WorkerMetrics = MetricObjectWithValues<MetricValue<string>>[];

export type ToPrimary =
  /** The worker's broker is up (ports are 0 for a worker that does not listen). */
  | { rs: 'started'; slot: Slot; grpcPort: number; httpPort: number }
  /** A scrape of `GET /metrics` arrived at this worker: answer for every worker. */
  | { rs: 'scrape'; id: number }
  /** The answer to {@link ToWorker} `collect`: this worker's own metrics. */
  | { rs: 'collected'; id: number; metrics: WorkerMetrics };

export type ToWorker =
  | { rs: 'scrape-result'; id: number; contentType: string; body: string }
  | { rs: 'scrape-result'; id: number; error: string }
  | { rs: 'collect'; id: number }
  /** Shut down gracefully, as on SIGTERM, and exit. */
  | { rs: 'shutdown' };

function isOurs(m: unknown): boolean {
  return typeof m === 'object' && m !== null && typeof (m as { rs?: unknown }).rs === 'string';
}

export function isToPrimary(m: unknown): m is ToPrimary {
  return isOurs(m);
}

export function isToWorker(m: unknown): m is ToWorker {
  return isOurs(m);
}
