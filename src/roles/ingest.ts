/**
 * The ingest role: `runstream.v1.Ingest` on the gRPC port, publishing to the log and
 * answering at the producer's ack level (ingest/).
 */

import { partitionOf } from '../domain/partition.js';
import type { Receipt } from '../domain/receipt.js';
import { ControlFeeds } from '../ingest/control.js';
import { InflightBudget } from '../ingest/inflight.js';
import { PersistWaiter } from '../ingest/persist-waiter.js';
import { DUPLICATE_CHECK_MAX_MS, IngestService } from '../ingest/server.js';
import { decodeReceipts } from '../log/announcements.js';
import { LogPublisher } from '../log/publisher.js';
import { ThreadFeeds } from '../log/thread-feed.js';
import { deletionHorizons } from '../persist/deletions.js';
import { logsTakenUp } from '../persist/leases.js';
import type { Base } from './base.js';

/** How long a thread's receipt subscription outlives its last PERSISTED request (up to 0.5 s more: swept). */
export const RECEIPT_LINGER_MS = 30_000;
/** When the waiting PERSISTED requests look their events up a second time after a resync. */
const RESYNC_RECHECK_AGAIN_MS = 1_000;

export function startIngestRole(b: Base): void {
  const { config, nc, subjects, pool, log } = b;
  // Receipt listeners linger (in the waiter, so the subscription with them), so a thread that
  // publishes request after request keeps its subscription instead of a SUB, a round trip and
  // an UNSUB per PERSISTED request, and its listener instead of one added and removed per request.
  const receipts = new ThreadFeeds<Receipt[]>(nc, (t) => subjects.receipts(t), decodeReceipts, log);
  const waiter = new PersistWaiter(receipts, pool, config.persistedAckTimeoutMs, {
    log: log.child({ stage: 'ingest' }),
    lingerMs: RECEIPT_LINGER_MS,
    horizonsCurrent: async (threadIds) => {
      const partitionOfThread = new Map(threadIds.map((t) => [t, partitionOf(t, config.partitions)]));
      const taken = await logsTakenUp(
        pool,
        config.streamName,
        [...new Set(partitionOfThread.values())],
        async (p) => (await b.logBounds(p)).created,
      );
      return new Set(threadIds.filter((t) => taken.has(partitionOfThread.get(t) as number)));
    },
  });
  // Receipts lost while NATS moved: the waiting requests look their events up, now and once
  // more a moment later, when the servers of a cluster all know this node's subscriptions
  // again (the waiter also looks up by itself whatever waits long).
  b.resync.onResync(() => {
    const recheck = (): void => {
      waiter
        .recheck()
        .catch((err: unknown) =>
          log.warn({ err: (err as Error).message }, 'resync: could not look up waiting PERSISTED events'),
        );
    };
    recheck();
    setTimeout(recheck, RESYNC_RECHECK_AGAIN_MS).unref();
  });
  new IngestService({
    publisher: new LogPublisher(nc, subjects, undefined, { streamName: config.streamName }),
    deletionHorizons: (keys) => deletionHorizons(pool, keys),
    duplicateCheckMs: Math.min(DUPLICATE_CHECK_MAX_MS, config.persistedAckTimeoutMs),
    budget: new InflightBudget(config.ingestMaxInflightBytes),
    streamLimits: {
      streamMaxInflight: config.publishStreamMaxInflight,
      streamMaxInflightBytes: config.publishStreamMaxInflightBytes,
    },
    waiter,
    limits: {
      ...config,
      maxJsonDepth: config.testLoosenValidation.has('json-depth')
        ? Number.POSITIVE_INFINITY
        : config.maxJsonDepth,
    },
    auth: b.auth,
    controls: new ControlFeeds(nc, subjects, log),
    log: log.child({ stage: 'ingest' }),
    metrics: b.metrics,
  }).register(b.grpc);
}
