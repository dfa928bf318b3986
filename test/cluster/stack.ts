/**
 * The cluster suite's servers: a 3-node nats-server cluster and a Postgres of its own, and
 * in-process brokers on them with the log stream at three replicas.
 */
import pg from 'pg';
import { type Broker, startBroker } from '../../src/broker.js';
import { type Config, loadConfig, type Role } from '../../src/config.js';
import { createLogger } from '../../src/logger.js';
import { type NatsClusterHandle, startNatsCluster } from '../helpers/nats-cluster.js';
import { type PostgresHandle, startPostgres } from '../helpers/postgres.js';
import { randomName } from '../helpers/stack.js';
import '../helpers/index.js';

export interface ClusterServers extends AsyncDisposable {
  readonly nats: NatsClusterHandle;
  readonly pg: PostgresHandle;
  readonly db: pg.Pool;
}

export async function startClusterServers(): Promise<ClusterServers> {
  const [nats, pgh] = await Promise.all([startNatsCluster(), startPostgres({ useEnv: false })]);
  const db = new pg.Pool({ connectionString: pgh.url, max: 4 });
  db.on('error', () => undefined);
  return {
    nats,
    pg: pgh,
    db,
    async [Symbol.asyncDispose]() {
      await db.end().catch(() => undefined);
      await Promise.all([nats[Symbol.asyncDispose](), pgh[Symbol.asyncDispose]()]);
    },
  };
}

/** Config for a broker on the cluster (R3 log), ephemeral ports. */
export function clusterConfig(
  servers: ClusterServers,
  o: { roles?: readonly Role[] } & Omit<Partial<Config>, 'roles'>,
): Config {
  const { roles, ...rest } = o;
  return loadConfig(
    {},
    {
      host: '127.0.0.1',
      grpcPort: 0,
      httpPort: 0,
      natsUrl: servers.nats.url,
      databaseUrl: servers.pg.url,
      streamName: randomName('RS_'),
      subjectPrefix: randomName('rs'),
      streamReplicas: 3,
      // Each partition is an R3 stream (a Raft group): few, on a 2-core machine.
      partitions: CLUSTER_PARTITIONS,
      logLevel: process.env.LOG_LEVEL ?? 'warn',
      ...(roles ? { roles: new Set(roles) } : {}),
      ...rest,
    },
  );
}

/** Partitions of the tests' logs. */
export const CLUSTER_PARTITIONS = 4;

export async function clusterBroker(config: Config): Promise<Broker & AsyncDisposable> {
  return startBroker(config, createLogger(config.logLevel));
}
