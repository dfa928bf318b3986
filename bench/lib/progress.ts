/**
 * A coarse timeline of one measurement: how many events the producer has had acked, the
 * broker has committed to Postgres and the subscribers have received, every 250 ms. It
 * shows which stage falls behind (acked − stored is the persister's lag).
 *
 * The producer and the subscribers are processes of their own, so each counts its events
 * in 100 ms buckets of the shared epoch clock ({@link Counts}); the bench samples the
 * stored count (`count(*)`, cheap at these sizes) and merges the three at the end.
 */
import pg from 'pg';
import { epochMs } from './payload.js';

const PROGRESS_INTERVAL_MS = 250;
const BUCKET_MS = 100;

export interface ProgressPoint {
  /** Seconds since the first send. */
  readonly s: number;
  readonly acked: number;
  readonly stored: number;
  readonly delivered: number;
}

/** Events counted per 100 ms of epoch time, from `fromMs` (a multiple of the bucket). */
export interface BucketCounts {
  readonly fromMs: number;
  readonly bucketMs: number;
  readonly counts: readonly number[];
}

/** The counting side, in a load generator. */
export class Counts {
  #fromMs = Number.NaN;
  readonly #counts: number[] = [];

  add(n: number, atMs: number = epochMs()): void {
    if (Number.isNaN(this.#fromMs)) this.#fromMs = Math.floor(atMs / BUCKET_MS) * BUCKET_MS;
    const i = Math.max(0, Math.floor((atMs - this.#fromMs) / BUCKET_MS));
    while (this.#counts.length <= i) this.#counts.push(0);
    this.#counts[i] = (this.#counts[i] as number) + n;
  }

  snapshot(): BucketCounts {
    return { fromMs: this.#fromMs, bucketMs: BUCKET_MS, counts: this.#counts };
  }
}

/** How many events were counted up to epoch `atMs` (to the bucket's resolution). */
function countedBy(b: BucketCounts, atMs: number): number {
  const end = Math.floor((atMs - b.fromMs) / b.bucketMs);
  let n = 0;
  for (let i = 0; i < Math.min(end, b.counts.length); i++) n += b.counts[i] as number;
  return n;
}

/** Samples the stored event count every PROGRESS_INTERVAL_MS, stamped with the epoch clock. */
export class StoredProgress implements AsyncDisposable {
  readonly samples: { readonly atMs: number; readonly stored: number }[] = [];
  readonly #client: pg.Client;
  #timer: NodeJS.Timeout | undefined;
  #busy = false;

  private constructor(client: pg.Client) {
    this.#client = client;
  }

  static async start(databaseUrl: string): Promise<StoredProgress> {
    const client = new pg.Client({ connectionString: databaseUrl });
    client.on('error', () => undefined);
    await client.connect();
    const p = new StoredProgress(client);
    p.#timer = setInterval(() => {
      if (p.#busy) return;
      p.#busy = true;
      const atMs = epochMs();
      client
        .query<{ n: string }>('SELECT count(*) AS n FROM run_events')
        .then((r) => p.samples.push({ atMs, stored: Number(r.rows[0]?.n ?? 0) }))
        .catch(() => undefined)
        .finally(() => {
          p.#busy = false;
        });
    }, PROGRESS_INTERVAL_MS);
    return p;
  }

  /**
   * Events stored per persister transaction, on average: each transaction's rows share their
   * `stored_at` (`now()`, the transaction's start), so distinct values count transactions.
   */
  async eventsPerTransaction(): Promise<number> {
    const { rows } = await this.#client.query<{ events: string; txs: string }>(
      'SELECT count(*) AS events, count(DISTINCT stored_at) AS txs FROM run_events',
    );
    const r = rows[0];
    return r && Number(r.txs) > 0 ? Math.round((Number(r.events) / Number(r.txs)) * 10) / 10 : Number.NaN;
  }

  /** The merged timeline, seconds counted from `originMs` (the first send). */
  timeline(originMs: number, acks: BucketCounts, deliveries: BucketCounts): ProgressPoint[] {
    return this.samples
      .filter((x) => x.atMs >= originMs)
      .map(({ atMs, stored }) => ({
        s: Math.round((atMs - originMs) / 100) / 10,
        acked: countedBy(acks, atMs),
        stored,
        delivered: countedBy(deliveries, atMs),
      }));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    clearInterval(this.#timer);
    await this.#client.end().catch(() => undefined);
  }
}

/** The persister's lag: the most events acked and not yet stored at any sample. */
export function maxPersisterLag(points: readonly ProgressPoint[]): number {
  return points.reduce((m, p) => Math.max(m, p.acked - p.stored), 0);
}
