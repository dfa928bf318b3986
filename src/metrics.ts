/**
 * The node's Prometheus metrics (`prom-client`), served at `GET /metrics` on the HTTP port.
 *
 * One {@link Metrics} per broker, with a registry of its own, so several brokers in one
 * process (the tests) never mix their counts. Stages get the instruments they update from
 * it; what is cheaper to read when scraped (connections, queued bytes, persister lag) is
 * read then, by {@link Metrics.gauge} callbacks. Every hook on the hot path is one counter
 * increment or one histogram observation, per request or per batch, never per event.
 * docs/operations.md lists every metric and what it means.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

/** Seconds, from 1 ms to 10 s: log publishes, commits, persisted-to-delivered. */
export const LATENCY_BUCKETS_S = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
] as const;
/** Events in one persister batch (RS_PERSIST_BATCH_MAX is 2000 by default). */
export const BATCH_SIZE_BUCKETS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2000, 5000] as const;

/** The ack level of a publish request, as a label. */
export type AckLabel = 'ACCEPTED' | 'PERSISTED' | 'invalid';
/** A subscriber transport, as a label (the LangGraph join counts as `sse`). */
export type TransportLabel = 'websocket' | 'sse' | 'grpc' | 'long-poll';

export const TRANSPORTS: readonly TransportLabel[] = ['websocket', 'sse', 'grpc', 'long-poll'];

/** What `GET /metrics` serves: the exposition text and its content type. */
export interface MetricsSource {
  scrape(): Promise<{ contentType: string; body: string }>;
}

export class Metrics implements MetricsSource {
  readonly registry = new Registry();
  /** Publish requests (a `Publish` call or one request of a `PublishStream`), by ack level and outcome. */
  readonly ingestRequests: Counter<'ack' | 'outcome'>;
  /** Events in those requests, likewise. */
  readonly ingestEvents: Counter<'ack' | 'outcome'>;
  /** From handing a request's events to JetStream to its acks. */
  readonly logPublishSeconds: Histogram;
  /** Events per persister transaction. */
  readonly persistBatchEvents: Histogram;
  /** One persister transaction, begin to commit. */
  readonly persistCommitSeconds: Histogram;
  /** Commit on the persister to the events handed to this node's subscribers. */
  readonly persistedToDeliveredSeconds: Histogram;
  /** Open subscriptions, by transport. */
  readonly subscriptions: Gauge<'transport'>;
  /** Subscribers cut off as too slow, by transport. */
  readonly slowConsumerCutoffs: Counter<'transport'>;
  /** Requests refused for their token (missing, invalid, expired) or its rights. */
  readonly authRefusals: Counter<'reason'>;

  constructor() {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: 10 });
    this.ingestRequests = new Counter({
      name: 'runstream_ingest_requests_total',
      help: 'Publish requests (a Publish call or one PublishStream request), by ack level and outcome',
      labelNames: ['ack', 'outcome'],
      registers,
    });
    this.ingestEvents = new Counter({
      name: 'runstream_ingest_events_total',
      help: 'Events in publish requests, by ack level and outcome',
      labelNames: ['ack', 'outcome'],
      registers,
    });
    this.logPublishSeconds = new Histogram({
      name: 'runstream_log_publish_seconds',
      help: "From handing a request's events to JetStream to JetStream's acks",
      buckets: [...LATENCY_BUCKETS_S],
      registers,
    });
    this.persistBatchEvents = new Histogram({
      name: 'runstream_persister_batch_events',
      help: 'Events per persister transaction',
      buckets: [...BATCH_SIZE_BUCKETS],
      registers,
    });
    this.persistCommitSeconds = new Histogram({
      name: 'runstream_persister_commit_seconds',
      help: 'One persister transaction (locks, inserts, runs, commit)',
      buckets: [...LATENCY_BUCKETS_S],
      registers,
    });
    this.persistedToDeliveredSeconds = new Histogram({
      name: 'runstream_persisted_to_delivered_seconds',
      help: "From the persister's commit to the events handed to this node's subscribers",
      buckets: [...LATENCY_BUCKETS_S],
      registers,
    });
    this.subscriptions = new Gauge({
      name: 'runstream_subscriptions',
      help: 'Open subscriptions, by transport',
      labelNames: ['transport'],
      registers,
    });
    this.slowConsumerCutoffs = new Counter({
      name: 'runstream_slow_consumer_cutoffs_total',
      help: 'Subscribers cut off as too slow, by transport',
      labelNames: ['transport'],
      registers,
    });
    this.authRefusals = new Counter({
      name: 'runstream_auth_refusals_total',
      help: 'Requests refused for their token (unauthenticated, token_expired) or its rights (permission_denied)',
      labelNames: ['reason'],
      registers,
    });
    // Present at zero from the start, so a dashboard's rate() has a series to work on.
    for (const t of TRANSPORTS) {
      this.subscriptions.set({ transport: t }, 0);
      this.slowConsumerCutoffs.inc({ transport: t }, 0);
    }
  }

  /**
   * A gauge read when scraped: `read` sets it. A `read` that throws (a dependency away)
   * leaves the gauge's last value, and the scrape still answers.
   */
  gauge<L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    read: (g: Gauge<L>) => void | Promise<void>,
  ): Gauge<L> {
    return new Gauge<L>({
      name,
      help,
      labelNames,
      registers: [this.registry],
      async collect() {
        try {
          await read(this);
        } catch {
          // keep the last value
        }
      },
    });
  }

  /** The exposition text and its content type. */
  async scrape(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}

/** Seconds since `startMs` (a `performance.now()` reading). */
export function secondsSince(startMs: number): number {
  return (performance.now() - startMs) / 1000;
}
