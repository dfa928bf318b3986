/**
 * Where each measured event's send → WebSocket latency went, split at two instants the
 * broker records in its row: `created_at` (set by ingest when the producer gives none) and
 * `stored_at` (`now()`, the start of the persister's transaction). All are epoch clocks of
 * one machine: the producer's send stamp travels in the content (`t`), the subscriber
 * records the receipt.
 */
import pg from 'pg';
import { type LatencySummary, summarize } from './stats.js';

export interface StageBreakdown {
  /** Send → the broker's ingest stamped `created_at` (gRPC, decoding, validation; ms precision). */
  readonly sendToIngest: LatencySummary;
  /** `created_at` → `stored_at`, the start of the persister's transaction (JetStream publish, consumer
   * delivery, waiting for the persister's current batch and for a pooled connection). */
  readonly ingestToTxStart: LatencySummary;
  /** `stored_at` → WebSocket receipt (the transaction's statements and commit, the announcement, fan-out). */
  readonly txStartToReceipt: LatencySummary;
}

/** `receivedAtMs`: `thread_id/seq` → epoch ms of WebSocket receipt, for the measured events only. */
export async function stageBreakdown(
  databaseUrl: string,
  receivedAtMs: ReadonlyMap<string, number>,
): Promise<StageBreakdown | undefined> {
  const client = new pg.Client({ connectionString: databaseUrl });
  client.on('error', () => undefined);
  try {
    await client.connect();
    const { rows } = await client.query<{
      thread_id: string;
      seq: string;
      t: number;
      ingest: number;
      tx: number;
    }>(
      `SELECT thread_id, seq, (content->>'t')::float8 AS t,
              extract(epoch FROM created_at)::float8 * 1000 AS ingest,
              extract(epoch FROM stored_at)::float8 * 1000 AS tx
         FROM run_events`,
    );
    const a: number[] = [];
    const b: number[] = [];
    const c: number[] = [];
    for (const r of rows) {
      const at = receivedAtMs.get(`${r.thread_id}/${r.seq}`);
      if (at === undefined) continue;
      a.push(r.ingest - r.t);
      b.push(r.tx - r.ingest);
      c.push(at - r.tx);
    }
    return { sendToIngest: summarize(a), ingestToTxStart: summarize(b), txStartToReceipt: summarize(c) };
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => undefined);
  }
}
