/**
 * Wires the roles a process runs (see {@link Config.roles}), one function each (roles/),
 * and shuts them down in the reverse order: stop intake, drain the persister, close
 * connections and pools.
 */
import type { Config } from './config.js';
import { cancelRoute } from './fanout/cancel-route.js';
import type { GrpcSubscribeService } from './fanout/grpc/subscribe.js';
import { HttpServer } from './http/server.js';
import { UnsentResponses } from './http/unsent.js';
import { RunControl } from './ingest/control.js';
import { LogPublisher } from './log/publisher.js';
import type { Logger } from './logger.js';
import type { Metrics, MetricsSource } from './metrics.js';
import type { Persister } from './persist/persister.js';
import { type Closers, startBase } from './roles/base.js';
import { type FanoutMemory, startFanoutRole } from './roles/fanout.js';
import { startIngestRole } from './roles/ingest.js';
import { startPersisterRole } from './roles/persister.js';

export interface Broker extends AsyncDisposable {
  readonly config: Config;
  /** Bound gRPC port (health and reflection are served whatever the roles); 0 when not listening. */
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly persister: Persister | undefined;
  /** This node's metrics (served at `GET /metrics`). */
  readonly metrics: Metrics;
  /** gRPC `Subscriber` service (fan-out role), for its open-call count. */
  readonly grpcSubscriber: GrpcSubscribeService | undefined;
  /** Threads this node holds a NATS subscription for on behalf of subscribers (events and deletions). */
  feedCount(): number;
  /** Fan-out memory: bytes queued to subscribers and held by subscriptions catching up (0 without the role). */
  fanoutMemory(): FanoutMemory;
  close(): Promise<void>;
}

/** How a process hosts its broker: alone (the defaults), or as one worker of several (workers/). */
export interface BrokerOptions {
  /**
   * Open the HTTP and gRPC ports (default true). A worker that runs only the persister does
   * not: under node:cluster a listen joins the shared ports, where it would take connections
   * for services it does not run.
   */
  readonly listen?: boolean;
  /** What `GET /metrics` answers; default this broker's own registry. A worker answers for all workers. */
  readonly scrape?: MetricsSource['scrape'];
}

export async function startBroker(config: Config, log: Logger, options: BrokerOptions = {}): Promise<Broker> {
  const closers: Closers = [];
  const closeAll = async (): Promise<void> => {
    for (const c of closers.splice(0).reverse()) {
      await c().catch((err: unknown) => log.warn({ err }, 'error during shutdown'));
    }
  };
  try {
    const base = await startBase(config, log, closers);
    const persister = config.roles.has('persister') ? await startPersisterRole(base, closers) : undefined;
    // Cancel requests (WebSocket frame, HTTP POST, on_disconnect, the LangGraph SDK) are
    // stored through the log and routed to producers; the HTTP route is on every process.
    const control = new RunControl({
      nc: base.nc,
      publisher: new LogPublisher(base.nc, base.subjects, undefined, { streamName: config.streamName }),
      subjects: base.subjects,
      pool: base.pool,
      log: log.child({ stage: 'control' }),
    });
    base.router.add(cancelRoute({ control, auth: base.auth }));
    const fanout = config.roles.has('fanout') ? startFanoutRole(base, control) : undefined;
    if (config.roles.has('ingest')) startIngestRole(base);

    const listen = options.listen ?? true;
    const http = new HttpServer({
      host: config.host,
      port: config.httpPort,
      router: base.router,
      upgrades: fanout?.upgrades,
      ready: base.ready,
      allowedOrigins: config.allowedOrigins,
      unsent: new UnsentResponses(config.httpMaxUnsentBytes, config.httpWriteTimeoutMs),
      requestTimeoutMs: config.httpRequestTimeoutMs,
      metrics: options.scrape ? { scrape: options.scrape } : base.metrics,
      log: log.child({ stage: 'http' }),
    });
    if (listen) {
      await http.start();
      closers.push(() => http.close());
    }
    // Closed before the HTTP server, which waits for their sockets: WebSocket clients are
    // told (1001) and SSE streams end, so their clients reconnect elsewhere.
    if (fanout) closers.push(() => fanout.closeSubscribers());
    if (listen) {
      await base.grpc.start();
      closers.push(() => base.grpc.close(config.shutdownGraceMs));
    }
    // Closed first: Subscribe calls never end by themselves and would hold the gRPC server's grace period.
    if (fanout) closers.push(() => fanout.grpcSubscriber.close());

    log.info(
      {
        roles: [...config.roles],
        grpcPort: listen ? base.grpc.port : 0,
        httpPort: listen ? http.port : 0,
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
      grpcPort: listen ? base.grpc.port : 0,
      httpPort: listen ? http.port : 0,
      persister,
      metrics: base.metrics,
      grpcSubscriber: fanout?.grpcSubscriber,
      feedCount: () => fanout?.feedCount() ?? 0,
      fanoutMemory: () => fanout?.memory() ?? { queuedBytes: 0, heldBytes: 0 },
      close,
      [Symbol.asyncDispose]: close,
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
