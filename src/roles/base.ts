/**
 * What every process has, whatever its roles: the authenticator, the Postgres pool (with
 * the migrations applied), the NATS connection and the log stream, the resync signal after
 * a NATS reconnect, and the HTTP router and gRPC server the roles register on.
 */
import { type JetStreamClient, type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import pg from 'pg';
import { countingAuthenticator } from '../auth/counted.js';
import { createAuthenticator, logAuthMode } from '../auth/jwt.js';
import type { Authenticator } from '../auth/principal.js';
import type { Config } from '../config.js';
import type { LogBounds } from '../domain/cursor.js';
import { partitionOf } from '../domain/partition.js';
import { GrpcServer } from '../grpc/server.js';
import { Router } from '../http/router.js';
import { connectNats, maxBodyBytes } from '../log/connection.js';
import {
  JETSTREAM_START_ATTEMPT_TIMEOUT_MS,
  JetStreamProbe,
  untilJetStreamAnswers,
} from '../log/jetstream-health.js';
import { LOG_EVENT_OVERHEAD_BYTES, LOG_MESSAGE_OVERHEAD_BYTES } from '../log/log-batch.js';
import { Resync } from '../log/resync.js';
import { ensureLogStream, type LogStreamOptions, partitionStream } from '../log/streams.js';
import { Subjects } from '../log/subjects.js';
import type { Logger } from '../logger.js';
import { Metrics } from '../metrics.js';
import { migrateWhenReachable } from '../persist/migrate.js';

/** How long start-up waits for Postgres before it carries on without it (and migrates later). */
const FIRST_DATABASE_TRY_MS = 6_000;

/** Functions that undo a start, run in reverse order at shutdown. */
export type Closers = (() => Promise<void>)[];

export interface Base {
  readonly config: Config;
  readonly log: Logger;
  /** This node's metrics, served at `GET /metrics`. */
  readonly metrics: Metrics;
  /** Counts its refusals in {@link Metrics.authRefusals}. */
  readonly auth: Authenticator;
  readonly pool: pg.Pool;
  readonly nc: NatsConnection;
  readonly jsm: JetStreamManager;
  readonly js: JetStreamClient;
  readonly subjects: Subjects;
  /** The current extent of a partition's log stream. */
  readonly logBounds: (partition: number) => Promise<LogBounds>;
  /** The current extent of a thread's log (its partition's stream). */
  readonly threadLogBounds: (threadId: string) => Promise<LogBounds>;
  /** Fires after a NATS reconnect, this process's or a peer's (log/resync.ts). */
  readonly resync: Resync;
  readonly router: Router;
  readonly grpc: GrpcServer;
  /** Resolves once Postgres was reached and migrated (at once, unless it was down at start). */
  readonly database: Promise<void>;
  readonly databaseReady: () => boolean;
  /** Every dependency this node needs is reachable. */
  readonly ready: () => Promise<boolean>;
}

export async function startBase(config: Config, log: Logger, closers: Closers): Promise<Base> {
  // One authenticator for every transport; a bad key stops start-up before anything connects.
  const jwt = createAuthenticator(config, log.child({ stage: 'auth' }));
  logAuthMode(jwt, config, log);
  const metrics = new Metrics();
  const auth = countingAuthenticator(jwt, metrics.authRefusals);

  const pool = new pg.Pool({
    connectionString: config.databaseUrl,
    max: config.pgPoolSize,
    application_name: 'runstream',
    connectionTimeoutMillis: 5_000,
    // A transaction left open by a stalled process (a persister stopped mid-batch) holds its
    // partitions' lease rows: Postgres ends it, so they can be taken over within a lease.
    idle_in_transaction_session_timeout: config.persisterLeaseMs,
  });
  // An idle client dropped by a Postgres restart must not crash the process.
  pool.on('error', (err) => log.warn({ err: err.message }, 'postgres client error'));
  closers.push(() => pool.end());
  // Postgres down at start is a dependency failing, which is normal: the node starts, says
  // it is not ready, and migrates (and starts its persister) once Postgres answers.
  const stopWaiting = new AbortController();
  closers.push(async () => stopWaiting.abort());
  let databaseReady = false;
  const database = migrateWhenReachable(pool, log, stopWaiting.signal).then(() => {
    databaseReady = true;
  });
  // Normally Postgres is there: wait for the migrations, so roles start on a migrated
  // database as before. Only a database still unreachable after the first try is left to
  // the background.
  // The timer is cleared once the race is decided: a pending one kept the process alive for
  // the rest of its 6 s after a shutdown (an embedded broker started and closed at once).
  let firstTryTimer: NodeJS.Timeout | undefined;
  const firstTry = await Promise.race([
    database.then(() => 'migrated' as const),
    new Promise<'waiting'>((resolve) => {
      firstTryTimer = setTimeout(() => resolve('waiting'), FIRST_DATABASE_TRY_MS);
    }),
  ]).finally(() => clearTimeout(firstTryTimer));
  if (firstTry === 'waiting') {
    database.catch((err: unknown) => {
      // A shutdown stops the wait: that is no failure.
      if (stopWaiting.signal.aborted) log.info('stopped waiting for postgres: shutting down');
      else log.error({ err }, 'migrations failed: this node stays not ready');
    });
  }

  const nc = await connectNats(config.natsUrl, `runstream-${process.pid}`, log);
  closers.push(async () => {
    await nc.drain().catch(() => nc.close());
  });
  checkEventsFitTheLog(config, maxBodyBytes(nc));
  const subjects = new Subjects(config.subjectPrefix, config.partitions);
  const logStreamOptions: LogStreamOptions = {
    streamName: config.streamName,
    subjects,
    maxAgeMs: config.streamMaxAgeMs,
    duplicateWindowMs: config.duplicateWindowMs,
    replicas: config.streamReplicas,
  };
  // A cluster electing a leader (a node just died, quorum intact) answers nothing for a few
  // seconds: wait for it rather than exit.
  const jsm = await untilJetStreamAnswers(
    'start-up',
    async () => {
      // A short timeout per attempt: a request sent while there is no leader is never
      // answered, even once one is elected, so a long one only delays the start.
      await ensureLogStream(
        await jetstreamManager(nc, { timeout: JETSTREAM_START_ATTEMPT_TIMEOUT_MS }),
        logStreamOptions,
      );
      return jetstreamManager(nc);
    },
    log,
    stopWaiting.signal,
  );
  const logBounds = async (p: number): Promise<LogBounds> => {
    const { state, created } = await jsm.streams.info(partitionStream(config.streamName, p));
    return { first: state.first_seq, last: state.last_seq, created };
  };
  // Readiness asks partition 0's stream for its leader: no quorum, no answer.
  const jetStream = new JetStreamProbe(nc, partitionStream(config.streamName, 0));
  const resync = new Resync(nc, subjects.resync, log.child({ stage: 'resync' }));
  // A server back without its store (a lost disk, a node replaced) has no log: make it again at
  // once, as a start would, rather than leave publishes failing until a process restarts. The
  // persisters find the new streams by their creation time (persist/leases.ts: adoptLogs).
  resync.onResync((why) => {
    if (why !== 'reconnect') return;
    void ensureLogStream(jsm, logStreamOptions).catch((err: unknown) =>
      log.warn({ err: (err as Error).message }, 'could not check the log streams after a reconnect'),
    );
  });
  resync.start();
  closers.push(async () => resync.close());

  const grpc = new GrpcServer({
    host: config.host,
    port: config.grpcPort,
    maxMessageBytes: config.maxGrpcMessageBytes,
    log: log.child({ stage: 'grpc' }),
  });
  return {
    config,
    log,
    metrics,
    auth,
    pool,
    nc,
    jsm,
    js: jetstream(nc),
    subjects,
    logBounds,
    threadLogBounds: (threadId) => logBounds(partitionOf(threadId, config.partitions)),
    resync,
    router: new Router(),
    grpc,
    database,
    databaseReady: () => databaseReady,
    ready: async () => {
      if (!databaseReady || nc.isClosed() || nc.isDraining()) return false;
      await pool.query('SELECT 1');
      await nc.flush();
      // Connected is not enough: a cluster without quorum takes connections but stores nothing.
      return jetStream.answers();
    },
  };
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
