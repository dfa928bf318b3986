/**
 * A whole runstream stack for a test: its own nats-server and Postgres (or NATS_URL /
 * DATABASE_URL when set), a broker in-process or as a child process, and names with
 * random suffixes so tests never see each other's data.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type { JetStreamManager } from '@nats-io/jetstream';
import pg from 'pg';
import { type Broker, startBroker } from '../../src/broker.js';
import { IngestClient } from '../../src/client/ingest-client.js';
import { WsConnection } from '../../src/client/ws-subscriber.js';
import { type Config, loadConfig } from '../../src/config.js';
import { partitionOf } from '../../src/domain/partition.js';
import { partitionStream } from '../../src/log/streams.js';
import { createLogger } from '../../src/logger.js';
import { type NatsServerHandle, startNatsServer } from './nats-server.js';
import { type PostgresHandle, startPostgres } from './postgres.js';
import './index.js';

export const MAIN_JS = fileURLToPath(new URL('../../src/main.js', import.meta.url));

export function randomName(prefix: string): string {
  return `${prefix}${randomBytes(5).toString('hex')}`;
}

export interface Servers extends AsyncDisposable {
  readonly nats: NatsServerHandle;
  readonly pg: PostgresHandle;
  /** A pool on the test database, for assertions. */
  readonly db: pg.Pool;
}

export async function startServers(
  opts: { own?: boolean; pgSettings?: readonly string[]; monitor?: boolean } = {},
): Promise<Servers> {
  const useEnv = !opts.own;
  const [nats, pgh] = await Promise.all([
    startNatsServer({ useEnv, ...(opts.monitor ? { monitor: true } : {}) }),
    startPostgres({ useEnv, ...(opts.pgSettings ? { settings: opts.pgSettings } : {}) }),
  ]);
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

/** The log stream that holds a thread's events (its partition's). */
export function threadStream(config: Config, threadId: string): string {
  return partitionStream(config.streamName, partitionOf(threadId, config.partitions));
}

/** A new thread id in the partition of `threadId`: its events share the thread's stream and offsets. */
export function threadInPartitionOf(config: Config, threadId: string, prefix = 't-'): string {
  const p = partitionOf(threadId, config.partitions);
  for (;;) {
    const other = randomName(prefix);
    if (partitionOf(other, config.partitions) === p) return other;
  }
}

/** Messages in the whole log: every partition stream. */
export async function logMessageCount(jsm: JetStreamManager, config: Config): Promise<number> {
  let n = 0;
  for (let p = 0; p < config.partitions; p++) {
    n += (await jsm.streams.info(partitionStream(config.streamName, p))).state.messages;
  }
  return n;
}

/** Broker config for these servers: ephemeral ports, a private stream and subject prefix. */
export function brokerConfig(servers: Servers, overrides: Partial<Config> = {}): Config {
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
      logLevel: process.env.LOG_LEVEL ?? 'warn',
      ...overrides,
    },
  );
}

export interface Stack extends AsyncDisposable {
  readonly servers: Servers;
  readonly broker: Broker;
  readonly config: Config;
  readonly client: IngestClient;
  readonly db: pg.Pool;
  readonly grpcTarget: string;
  readonly wsUrl: string;
  readonly httpUrl: string;
  ws(): Promise<WsConnection>;
}

/** Servers plus an in-process broker and a client on it. */
export async function startStack(
  overrides: Partial<Config> = {},
  opts: { own?: boolean } = {},
): Promise<Stack> {
  const servers = await startServers(opts);
  const config = brokerConfig(servers, overrides);
  const broker = await startBroker(config, createLogger(config.logLevel));
  const grpcTarget = `127.0.0.1:${broker.grpcPort}`;
  const client = new IngestClient(grpcTarget);
  const wsUrl = `ws://127.0.0.1:${broker.httpPort}/v1/ws`;
  const sockets: WsConnection[] = [];
  return {
    servers,
    broker,
    config,
    client,
    db: servers.db,
    grpcTarget,
    wsUrl,
    httpUrl: `http://127.0.0.1:${broker.httpPort}`,
    async ws() {
      const c = await WsConnection.open(wsUrl);
      sockets.push(c);
      return c;
    },
    async [Symbol.asyncDispose]() {
      for (const s of sockets) await s.close().catch(() => undefined);
      client.close();
      await broker.close();
      await servers[Symbol.asyncDispose]();
    },
  };
}

/** A broker as a separate process (`node dist/src/main.js`), so it can be killed -9. */
export interface BrokerProcess {
  readonly child: ChildProcess;
  readonly grpcPort: number;
  readonly httpPort: number;
  /** SIGKILL, and wait for the exit. */
  kill(): Promise<void>;
  stop(): Promise<void>;
  /** Everything it wrote to stdout and stderr so far. */
  output(): string;
}

export async function spawnBroker(config: Config, env: Record<string, string> = {}): Promise<BrokerProcess> {
  const child = spawn(process.execPath, [MAIN_JS], {
    env: {
      ...process.env,
      RS_HOST: '127.0.0.1',
      GRPC_PORT: String(config.grpcPort),
      HTTP_PORT: String(config.httpPort),
      NATS_URL: config.natsUrl,
      DATABASE_URL: config.databaseUrl,
      RS_STREAM: config.streamName,
      RS_SUBJECT_PREFIX: config.subjectPrefix,
      RS_PARTITIONS: String(config.partitions),
      LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let output = '';
  const ports = await new Promise<{ grpcPort: number; httpPort: number }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`broker did not start:\n${output}`)), 30_000);
    child.stderr?.on('data', (d: Buffer) => {
      output += d.toString();
    });
    child.stdout?.on('data', (d: Buffer) => {
      output += d.toString();
      for (const line of d.toString().split('\n')) {
        if (!line.includes('runstream started')) continue;
        const m = JSON.parse(line) as { grpcPort: number; httpPort: number };
        clearTimeout(timer);
        resolve({ grpcPort: m.grpcPort, httpPort: m.httpPort });
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`broker exited with ${code}:\n${output}`));
    });
  });
  process.once('exit', () => child.kill('SIGKILL'));
  return {
    child,
    ...ports,
    async kill() {
      child.kill('SIGKILL');
      await exited;
    },
    async stop() {
      child.kill('SIGTERM');
      await exited;
    },
    output: () => output,
  };
}

/** Rows of a thread, in seq order. */
export async function threadRows(
  db: pg.Pool,
  threadId: string,
): Promise<{ seq: number; event_id: string; run_id: string; content: unknown; stream_offset: number }[]> {
  const { rows } = await db.query(
    'SELECT seq::int AS seq, event_id, run_id, content, stream_offset::int AS stream_offset FROM run_events WHERE thread_id = $1 ORDER BY seq',
    [threadId],
  );
  return rows;
}

/** Asserts-friendly: the seqs of a thread are exactly 1..n. Returns n. */
export function expectGapFree(seqs: readonly number[]): number {
  seqs.forEach((s, i) => {
    if (s !== i + 1) throw new Error(`seq ${i + 1} expected at position ${i}, found ${s}`);
  });
  return seqs.length;
}
