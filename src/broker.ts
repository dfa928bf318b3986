/**
 * Wires the stages a process runs (see {@link Config.roles}) and shuts them down in the
 * reverse order: stop intake, drain the persister, close connections and pools.
 */
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import pg from 'pg';
import type { Config } from './config.js';
import { HttpServer } from './fanout/http-server.js';
import { GrpcServer } from './grpc/server.js';
import { PersistWaiter } from './ingest/persist-waiter.js';
import { IngestService } from './ingest/server.js';
import { type CommittedEvent, decodeEvents, decodeReceipts } from './log/announcements.js';
import { connectNats } from './log/connection.js';
import { LogPublisher } from './log/publisher.js';
import { ensureLogStream } from './log/streams.js';
import { Subjects } from './log/subjects.js';
import { ThreadFeeds } from './log/thread-feed.js';
import type { Logger } from './logger.js';
import { migrate } from './persist/migrate.js';
import { Persister } from './persist/persister.js';
import type { Receipt } from './persist/seq-assigner.js';

export interface Broker extends AsyncDisposable {
  readonly config: Config;
  /** Bound gRPC port (health and reflection are served whatever the roles). */
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly persister: Persister | undefined;
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
    const jsm = await jetstreamManager(nc);
    const js = jetstream(nc);
    const subjects = new Subjects(config.subjectPrefix);
    await ensureLogStream(jsm, {
      streamName: config.streamName,
      subjects,
      maxAgeMs: config.streamMaxAgeMs,
      duplicateWindowMs: config.duplicateWindowMs,
    });

    let persister: Persister | undefined;
    if (config.roles.has('persister')) {
      persister = new Persister({
        nc,
        js,
        pool,
        subjects,
        streamName: config.streamName,
        batchMax: config.persistBatchMax,
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
    const http = new HttpServer({
      host: config.host,
      port: config.httpPort,
      pool,
      feeds,
      pageSize: config.catchupPageSize,
      maxSubscriptions: config.wsMaxSubscriptions,
      maxBufferedBytes: config.wsMaxBufferedBytes,
      maxPayloadBytes: config.wsMaxPayloadBytes,
      pingIntervalMs: config.wsPingIntervalMs,
      logBounds: async () => {
        const { state } = await jsm.streams.info(config.streamName);
        return { first: state.first_seq, last: state.last_seq };
      },
      ready,
      log: log.child({ stage: 'fanout' }),
    });
    await http.start();
    closers.push(() => http.close());

    const grpcServer = new GrpcServer({
      host: config.host,
      port: config.grpcPort,
      maxMessageBytes: config.maxGrpcMessageBytes,
    });
    if (config.roles.has('ingest')) {
      const receipts = new ThreadFeeds<Receipt[]>(nc, (t) => subjects.receipts(t), decodeReceipts, log);
      new IngestService({
        publisher: new LogPublisher(js, subjects),
        waiter: new PersistWaiter(receipts, pool, config.persistedAckTimeoutMs),
        limits: config,
        log: log.child({ stage: 'ingest' }),
      }).register(grpcServer);
    }
    await grpcServer.start();
    closers.push(() => grpcServer.close(config.shutdownGraceMs));

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
      close,
      [Symbol.asyncDispose]: close,
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
