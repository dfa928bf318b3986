/**
 * The fan-out role: subscribers on every transport, on one subscription core
 * (fanout/core/), and History (history/). Its routes and services go on the process's
 * HTTP router and gRPC server; `/v1/ws` upgrades go to the WebSocket endpoint.
 */

import { Admission } from '../fanout/core/admission.js';
import { LiveSubscriptions } from '../fanout/core/live-subscriptions.js';
import { ByteCount, QueueBudget } from '../fanout/core/send-queue.js';
import { SubscriptionService } from '../fanout/core/service.js';
import type { SubscriptionResources } from '../fanout/core/subscription.js';
import { GrpcSubscribeService } from '../fanout/grpc/subscribe.js';
import { langGraphRoutes } from '../fanout/langgraph/join.js';
import { longPoll } from '../fanout/long-poll.js';
import { SseStreams, sseRoutes } from '../fanout/sse/routes.js';
import { WS_PATH, WsEndpoint } from '../fanout/ws/endpoint.js';
import { Deleter } from '../history/deleter.js';
import { HistoryGrpcService } from '../history/grpc-service.js';
import { History } from '../history/history.js';
import { historyRoutes } from '../history/http-routes.js';
import type { UpgradeHandler } from '../http/server.js';
import { viewerRoutes } from '../http/viewer.js';
import type { RunControl } from '../ingest/control.js';
import { type CommittedEvent, committedAtMs, decodeEvents } from '../log/announcements.js';
import { type DeletionNotice, decodeDeletion } from '../log/deletion-notices.js';
import { ThreadFeeds } from '../log/thread-feed.js';
import { TRANSPORTS } from '../metrics.js';
import { gatedPool } from '../persist/query-gate.js';
import type { Base } from './base.js';

export interface FanoutMemory {
  readonly queuedBytes: number;
  readonly heldBytes: number;
}

export interface Fanout {
  readonly service: SubscriptionService;
  /** The committed-event feeds, one NATS subscription per thread watched. */
  readonly feeds: ThreadFeeds<CommittedEvent[]>;
  readonly grpcSubscriber: GrpcSubscribeService;
  readonly ws: WsEndpoint;
  readonly sse: SseStreams;
  readonly upgrades: ReadonlyMap<string, UpgradeHandler>;
  /** Threads with a NATS subscription held for subscribers (events and deletions). */
  feedCount(): number;
  /** Bytes queued to subscribers, and live events held by subscriptions catching up, on this node. */
  memory(): FanoutMemory;
  /** Ends every WebSocket connection (1001) and SSE stream: before the HTTP server closes. */
  closeSubscribers(): Promise<void>;
}

export function startFanoutRole(b: Base, control: RunControl): Fanout {
  const { config, nc, subjects, log, metrics } = b;
  // Decoded once per announcement on this node, and handed to its subscribers right after.
  const delivered = metrics.persistedToDeliveredSeconds;
  const feeds = new ThreadFeeds<CommittedEvent[]>(
    nc,
    (t) => subjects.events(t),
    (msg, threadId) => {
      const events = decodeEvents(msg, threadId);
      const at = committedAtMs(msg, subjects.committedAtPrefix);
      if (at !== undefined) delivered.observe(Math.max(0, Date.now() - at) / 1000);
      return events;
    },
    log,
  );
  // Deletion notices end the subscriptions on a deleted thread or run (History).
  const deletions = new ThreadFeeds<DeletionNotice>(nc, (t) => subjects.deletions(t), decodeDeletion, log);
  // Subscriber reads queue in-process for a share of the pool, so a resubscribe storm waits
  // its turn instead of timing out, and the persister and ingest keep connections of their own.
  const readPool = gatedPool(b.pool, Math.max(1, config.pgPoolSize - 2));
  // After a NATS reconnect, every live subscription behind its thread's head catches up.
  const live = new LiveSubscriptions(readPool, log.child({ stage: 'resync' }));
  b.resync.onResync(() => live.resync());
  const held = new ByteCount();
  const budget = new QueueBudget(config.fanoutMaxQueuedBytes);
  const resources: SubscriptionResources = {
    logBounds: b.threadLogBounds,
    pool: readPool,
    feeds,
    deletions,
    pageSize: config.catchupPageSize,
    maxPageBytes: config.maxPageBytes,
    maxHeldBytes: config.fanoutMaxHeldBytes,
    held,
    live,
    log: log.child({ stage: 'fanout' }),
  };
  const admission = new Admission({
    websocket: config.wsMaxConnections,
    sse: config.sseMaxStreams,
    grpc: config.grpcSubscribeMaxCalls,
    'long-poll': config.longPollMaxWaits,
  });
  const service = new SubscriptionService({
    resources,
    admission,
    budget,
    stallMs: config.slowConsumerStallMs,
    metrics,
  });
  metrics.gauge('runstream_connections', 'Subscriber connections held, by transport', ['transport'], (g) => {
    for (const t of TRANSPORTS) g.set({ transport: t }, admission.held(t));
  });
  metrics.gauge('runstream_fanout_queued_bytes', 'Bytes queued to subscribers on this node', [], (g) =>
    g.set(budget.queued),
  );
  metrics.gauge(
    'runstream_fanout_held_bytes',
    'Bytes of live events held by subscriptions catching up on this node',
    [],
    (g) => g.set(held.bytes),
  );
  metrics.gauge('runstream_fanout_feeds', 'Threads with a NATS subscription held for subscribers', [], (g) =>
    g.set(feeds.size + deletions.size),
  );

  const ws = new WsEndpoint({
    service,
    auth: b.auth,
    maxSubscriptions: config.wsMaxSubscriptions,
    maxBufferedBytes: config.wsMaxBufferedBytes,
    maxPayloadBytes: config.wsMaxPayloadBytes,
    pingIntervalMs: config.wsPingIntervalMs,
    control,
    log: log.child({ stage: 'websocket' }),
  });
  const sse = new SseStreams({
    service,
    auth: b.auth,
    maxBufferedBytes: config.wsMaxBufferedBytes,
    keepAliveMs: config.sseKeepAliveMs,
    log: log.child({ stage: 'sse' }),
  });
  const history = new History({
    pool: b.pool,
    maxPageBytes: config.maxPageBytes,
    deleter: new Deleter({
      pool: b.pool,
      nc,
      jsm: b.jsm,
      subjects,
      streamName: config.streamName,
      log: log.child({ stage: 'history' }),
    }),
  });
  b.router.add(
    ...historyRoutes({
      history,
      auth: b.auth,
      longPoll: longPoll({ service, maxPageBytes: config.maxPageBytes }),
    }),
    ...sseRoutes(sse),
    ...langGraphRoutes({ streams: sse, auth: b.auth, control }),
    // The viewer page at `/`: it reads History and subscribes on this node.
    ...viewerRoutes(log.child({ stage: 'viewer' })),
  );
  const grpcSubscriber = new GrpcSubscribeService({
    service,
    maxBufferedBytes: config.grpcSubscribeMaxBufferedBytes,
    stallMs: config.slowConsumerStallMs,
    auth: b.auth,
    log: log.child({ stage: 'grpc-subscribe' }),
  });
  grpcSubscriber.register(b.grpc);
  new HistoryGrpcService({ history, auth: b.auth, log: log.child({ stage: 'history' }) }).register(b.grpc);
  return {
    service,
    feeds,
    grpcSubscriber,
    ws,
    sse,
    upgrades: new Map([[WS_PATH, ws.upgrade]]),
    feedCount: () => feeds.size + deletions.size,
    memory: () => ({ queuedBytes: budget.queued, heldBytes: held.bytes }),
    closeSubscribers: async () => {
      sse.close();
      await ws.close();
    },
  };
}
