/**
 * Wires the stages a process runs (see {@link Config.roles}) and shuts them down in the
 * reverse order: stop intake, drain the persister, close connections and pools.
 */
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import pg from 'pg';
import { createAuthenticator, logAuthMode } from './auth/jwt.js';
import type { Config } from './config.js';
import { cancelRoute } from './fanout/cancel-route.js';
import { GrpcSubscribeService } from './fanout/grpc-subscribe.js';
import { HttpServer } from './fanout/http-server.js';
import { LiveSubscriptions } from './fanout/live-subscriptions.js';
import { SseService } from './fanout/sse.js';
import type { LogBounds } from './fanout/subscription.js';
import { GrpcServer } from './grpc/server.js';
import { Deleter } from './history/deleter.js';
import { HistoryGrpcService } from './history/grpc-service.js';
import { History } from './history/history.js';
import { historyRoutes, methodNotAllowedRoutes } from './history/http-routes.js';
import { ControlFeeds, RunControl } from './ingest/control.js';
import { InflightBudget } from './ingest/inflight.js';
import { PersistWaiter } from './ingest/persist-waiter.js';
import { IngestService } from './ingest/server.js';
import { type CommittedEvent, decodeEvents, decodeReceipts } from './log/announcements.js';
import { connectNats, maxBodyBytes } from './log/connection.js';
import { type DeletionNotice, decodeDeletion } from './log/deletion-notices.js';
import { LOG_EVENT_OVERHEAD_BYTES, LOG_MESSAGE_OVERHEAD_BYTES } from './log/log-batch.js';
import { LogPublisher } from './log/publisher.js';
import { Resync } from './log/resync.js';
import { ensureLogStream } from './log/streams.js';
import { Subjects } from './log/subjects.js';
import { ThreadFeeds } from './log/thread-feed.js';
import type { Logger } from './logger.js';
import { deletionHorizon } from './persist/deletions.js';
import { migrate } from './persist/migrate.js';
import { Persister } from './persist/persister.js';
import { gatedPool } from './persist/query-gate.js';
import type { Receipt } from './persist/seq-assigner.js';

/** How long a thread's receipt subscription outlives its last PERSISTED request. */
const RECEIPT_LINGER_MS = 30_000;

export interface Broker extends AsyncDisposable {
  readonly config: Config;
  /** Bound gRPC port (health and reflection are served whatever the roles). */
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly persister: Persister | undefined;
  /** gRPC `Subscriber` service (fan-out role), for its open-call count. */
  readonly grpcSubscriber: GrpcSubscribeService | undefined;
  /** Threads this node holds a NATS subscription for on behalf of subscribers (events and deletions). */
  feedCount(): number;
  close(): Promise<void>;
}

export async function startBroker(config: Config, log: Logger): Promise<Broker> {
  const closers: (() => Promise<void>)[] = [];
  const closeAll = async (): Promise<void> => {
    for (const c of closers.splice(0).reverse()) {
      await c().catch((err: unknown) => log.warn({ err }, 'error during shutdown'));
    }
  };
  try {
    // One authenticator for every transport; a bad key stops start-up before anything connects.
    const auth = createAuthenticator(config, log.child({ stage: 'auth' }));
    logAuthMode(auth, config, log);

    const pool = new pg.Pool({
      connectionString: config.databaseUrl,
      max: config.pgPoolSize,
      application_name: 'runstream',
      connectionTimeoutMillis: 5_000,
    });
    // An idle client dropped by a Postgres restart must not crash the process.
    pool.on('error', (err) => log.warn({ err: err.message }, 'postgres client error'));
    closers.push(() => pool.end());
    await migrate(pool, log);

    const nc: NatsConnection = await connectNats(config.natsUrl, `runstream-${process.pid}`, log);
    closers.push(async () => {
      await nc.drain().catch(() => nc.close());
    });
    checkEventsFitTheLog(config, maxBodyBytes(nc));
    const jsm = await jetstreamManager(nc);
    const js = jetstream(nc);
    const subjects = new Subjects(config.subjectPrefix);
    await ensureLogStream(jsm, {
      streamName: config.streamName,
      subjects,
      maxAgeMs: config.streamMaxAgeMs,
      duplicateWindowMs: config.duplicateWindowMs,
      replicas: config.streamReplicas,
    });

    const logBounds = async (): Promise<LogBounds> => {
      const { state } = await jsm.streams.info(config.streamName);
      return { first: state.first_seq, last: state.last_seq };
    };

    let persister: Persister | undefined;
    if (config.roles.has('persister')) {
      persister = new Persister({
        nc,
        js,
        pool,
        subjects,
        streamName: config.streamName,
        batchMax: config.persistBatchMax,
        logBounds,
        log: log.child({ stage: 'persister' }),
      });
      await persister.start();
      const p = persister;
      closers.push(() => p.close());
    }

    const ready = async (): Promise<boolean> => {
      if (nc.isClosed() || nc.isDraining()) return false;
      await pool.query('SELECT 1');
      await nc.flush();
      return true;
    };

    const feeds = config.roles.has('fanout')
      ? new ThreadFeeds<CommittedEvent[]>(nc, (t) => subjects.events(t), decodeEvents, log)
      : undefined;
    // After a NATS reconnect (this process's, or a peer's), what core NATS may have lost is
    // looked up in Postgres: live subscriptions catch up to their heads, PERSISTED requests
    // look their events up.
    const resync = new Resync(nc, subjects.resync, log.child({ stage: 'resync' }));
    resync.start();
    closers.push(async () => resync.close());
    // Subscriber reads (catch-up of WebSocket, SSE, gRPC Subscribe) queue in-process for a share
    // of the pool, so a resubscribe storm waits its turn instead of timing out, and the
    // persister and ingest keep connections of their own.
    const readPool = gatedPool(pool, Math.max(1, config.pgPoolSize - 2));
    const live = feeds ? new LiveSubscriptions(readPool, log.child({ stage: 'resync' })) : undefined;
    if (live) resync.onResync(() => live.resync());
    // Deletion notices end the subscriptions on a deleted thread or run (History).
    const deletions = feeds
      ? new ThreadFeeds<DeletionNotice>(nc, (t) => subjects.deletions(t), decodeDeletion, log)
      : undefined;
    // History (stored events, runs, chat projection, deletion) is served by fan-out nodes.
    const history = config.roles.has('fanout')
      ? new History({
          pool,
          maxPageBytes: config.maxPageBytes,
          deleter: new Deleter({
            pool,
            nc,
            jsm,
            subjects,
            streamName: config.streamName,
            log: log.child({ stage: 'history' }),
          }),
        })
      : undefined;
    const historyHttp = history ? historyRoutes({ history, auth }) : [];
    // Cancel requests (WebSocket frame, HTTP POST, on_disconnect) are stored through the log and routed to producers.
    const control = new RunControl({
      nc,
      publisher: new LogPublisher(nc, subjects),
      subjects,
      pool,
      log: log.child({ stage: 'control' }),
    });
    // SSE (`/v1/threads/{t}/stream`) and the LangGraph-compatible join, on fan-out nodes.
    const sse = feeds
      ? new SseService({
          pool: readPool,
          feeds,
          deletions,
          logBounds,
          pageSize: config.catchupPageSize,
          maxPageBytes: config.maxPageBytes,
          live,
          maxBufferedBytes: config.wsMaxBufferedBytes,
          keepAliveMs: config.sseKeepAliveMs,
          maxStreams: config.sseMaxStreams,
          auth,
          cancelRun: async (threadId, runId, principal) => {
            await control.requestCancel({
              threadId,
              runId,
              reason: 'subscriber disconnected',
              source: 'on_disconnect',
              principal,
            });
          },
          log: log.child({ stage: 'sse' }),
        })
      : undefined;
    const http = new HttpServer({
      host: config.host,
      port: config.httpPort,
      pool: readPool,
      feeds,
      deletions,
      pageSize: config.catchupPageSize,
      maxPageBytes: config.maxPageBytes,
      live,
      maxSubscriptions: config.wsMaxSubscriptions,
      maxBufferedBytes: config.wsMaxBufferedBytes,
      maxPayloadBytes: config.wsMaxPayloadBytes,
      pingIntervalMs: config.wsPingIntervalMs,
      maxConnections: config.wsMaxConnections,
      control,
      logBounds,
      // History's events route supersedes the built-in one; its 405s go last, shadowing nobody.
      routes: [
        ...historyHttp,
        ...(sse?.routes ?? []),
        cancelRoute({ control, auth }),
        ...methodNotAllowedRoutes(historyHttp),
      ],
      ready,
      auth,
      allowedOrigins: config.allowedOrigins,
      log: log.child({ stage: 'fanout' }),
    });
    await http.start();
    closers.push(() => http.close());
    if (sse) closers.push(async () => sse.close());

    const grpcServer = new GrpcServer({
      host: config.host,
      port: config.grpcPort,
      maxMessageBytes: config.maxGrpcMessageBytes,
      log: log.child({ stage: 'grpc' }),
    });
    if (config.roles.has('ingest')) {
      // Receipt subscriptions linger, so a thread that publishes request after request keeps its
      // subscription instead of a SUB, a round trip and an UNSUB per PERSISTED request.
      const receipts = new ThreadFeeds<Receipt[]>(
        nc,
        (t) => subjects.receipts(t),
        decodeReceipts,
        log,
        RECEIPT_LINGER_MS,
      );
      const waiter = new PersistWaiter(receipts, pool, config.persistedAckTimeoutMs);
      resync.onResync(() => {
        waiter
          .recheck()
          .catch((err: unknown) =>
            log.warn({ err: (err as Error).message }, 'resync: could not look up waiting PERSISTED events'),
          );
      });
      new IngestService({
        publisher: new LogPublisher(nc, subjects),
        deletionHorizon: (threadId, runId) => deletionHorizon(pool, threadId, runId),
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
        auth,
        controls: new ControlFeeds(nc, subjects, log),
        log: log.child({ stage: 'ingest' }),
      }).register(grpcServer);
    }
    const subscriber = feeds
      ? new GrpcSubscribeService({
          pool: readPool,
          feeds,
          deletions,
          pageSize: config.catchupPageSize,
          maxPageBytes: config.maxPageBytes,
          live,
          maxBufferedBytes: config.grpcSubscribeMaxBufferedBytes,
          maxCalls: config.grpcSubscribeMaxCalls,
          logBounds,
          auth,
          log: log.child({ stage: 'grpc-subscribe' }),
        })
      : undefined;
    subscriber?.register(grpcServer);
    if (history) {
      new HistoryGrpcService({ history, auth, log: log.child({ stage: 'history' }) }).register(grpcServer);
    }
    await grpcServer.start();
    closers.push(() => grpcServer.close(config.shutdownGraceMs));
    // Closed first: Subscribe calls never end by themselves and would hold the gRPC server's grace period.
    if (subscriber) closers.push(() => subscriber.close());

    log.info(
      {
        roles: [...config.roles],
        grpcPort: grpcServer.port,
        httpPort: http.port,
        stream: config.streamName,
      },
      'runstream started',
    );
    let closing: Promise<void> | undefined;
    const close = (): Promise<void> => {
      closing ??= closeAll().then(() => log.info('runstream stopped'));
      return closing;
    };
    return {
      config,
      grpcPort: grpcServer.port,
      httpPort: http.port,
      persister,
      grpcSubscriber: subscriber,
      feedCount: () => (feeds?.size ?? 0) + (deletions?.size ?? 0),
      close,
      [Symbol.asyncDispose]: close,
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}

/**
 * Refuses to start when an event at the size limits could not travel: its content and
 * metadata (each up to RS_MAX_CONTENT_BYTES) must fit one log message, and one
 * announcement, within the NATS server's max_payload.
 */
function checkEventsFitTheLog(config: Config, maxBody: number): void {
  const need = 2 * config.maxContentBytes + LOG_EVENT_OVERHEAD_BYTES + LOG_MESSAGE_OVERHEAD_BYTES;
  if (need > maxBody) {
    throw new Error(
      `RS_MAX_CONTENT_BYTES=${config.maxContentBytes}: an event with content_json and metadata_json at ` +
        `that limit takes up to ${need} bytes of a NATS message, but the server takes ${maxBody} ` +
        '(its max_payload, less headers): raise max_payload in the NATS config or lower RS_MAX_CONTENT_BYTES',
    );
  }
}
