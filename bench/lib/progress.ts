/**
 * A coarse timeline of one measurement, sampled every second: how many events the
 * producer has had acked, the broker has committed to Postgres (a `count(*)`, cheap at
 * these sizes) and the subscribers have received. It shows which stage falls behind.
 */
import pg from 'pg';

export const PROGRESS_INTERVAL_MS = 1_000;

export interface ProgressPoint {
  /** Seconds since the first send. */
  readonly s: number;
  readonly acked: number;
  readonly stored: number;
  readonly delivered: number;
}

export class Progress implements AsyncDisposable {
  readonly points: ProgressPoint[] = [];
  readonly #client: pg.Client;
  /** performance.now() of the first send; points are timed from it. */
  origin = performance.now();
  #timer: NodeJS.Timeout | undefined;
  #busy = false;

  private constructor(client: pg.Client) {
    this.#client = client;
  }

  static async start(
    databaseUrl: string,
    read: () => { acked: number; delivered: number },
  ): Promise<Progress> {
    const client = new pg.Client({ connectionString: databaseUrl });
    client.on('error', () => undefined);
    await client.connect();
    const p = new Progress(client);
    p.#timer = setInterval(() => {
      if (p.#busy) return;
      p.#busy = true;
      const { acked, delivered } = read();
      const s = (performance.now() - p.origin) / 1000;
      client
        .query<{ n: string }>('SELECT count(*) AS n FROM run_events')
        .then((r) =>
          p.points.push({ s: Math.round(s * 10) / 10, acked, stored: Number(r.rows[0]?.n ?? 0), delivered }),
        )
        .catch(() => undefined)
        .finally(() => {
          p.#busy = false;
        });
    }, PROGRESS_INTERVAL_MS);
    return p;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    clearInterval(this.#timer);
    await this.#client.end().catch(() => undefined);
  }
}
