/**
 * The broker under measurement, as separate processes (so their CPU is their own and
 * can be profiled), on a fresh database and a fresh JetStream stream, so no measurement
 * sees the previous one's data. By default one process runs every role, as
 * `node dist/src/main.js` does; `split` runs ingest+fan-out and the persister as two
 * processes on the same stream and database, and `stages` runs each pipeline stage (ingest,
 * persister, fan-out) as a process of its own, so each stage's CPU can be read apart.
 * Disposing stops them and removes both the database and the stream.
 */

import { existsSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { partitionStream } from '../../src/log/streams.js';
import { registerTempDir, removeTempDir } from '../../test/helpers/proc.js';
import { type BrokerProcess, brokerConfig, type Servers, spawnBroker } from '../../test/helpers/stack.js';
import type { LoopDelaySecond } from './broker-probe.js';
import { type PgStatement, topStatements } from './pg-statements.js';

const PROBE_URL = new URL('./broker-probe.js', import.meta.url).href;

/** How long a broker gets to shut down gracefully before it is killed. */
const BROKER_STOP_GRACE_MS = 15_000;
/** Broker log lines kept for the report (warnings and errors only). */
const KEPT_LOG_LINES = 20;
const WARN_LEVEL = 40;
const ERROR_LEVEL = 50;

export interface BenchBroker extends AsyncDisposable {
  readonly grpcTarget: string;
  readonly wsUrl: string;
  /** Every broker process (one, two when split, three in the stages layout). */
  readonly pids: readonly number[];
  /** Each broker process's pid by its name: `broker`, or `front`/`persister`, or `ingest`/`persister`/`fanout`. */
  readonly pidsByName: Readonly<Record<string, number>>;
  readonly databaseUrl: string;
  /** Warnings and errors the broker logged, most recent last. */
  readonly logLines: string[];
  /** Warning/error lines logged in all (the kept ones are the last few). */
  logCount(): number;
  /** Broker processes that exited before stop() was called, e.g. `front: code null, signal SIGKILL`. */
  readonly earlyExits: string[];
  /** Stops the processes (graceful, then killed) and returns each one's event-loop delay per second. */
  stop(): Promise<Record<string, LoopDelaySecond[]>>;
  /** With `pgStats`, once stopped: the statements Postgres spent the most time on in this run. */
  readonly statements: () => readonly PgStatement[] | undefined;
}

export interface BenchBrokerOptions {
  readonly label: string;
  /** Write a V8 CPU profile of each broker process into this directory, `<label>[-role].cpuprofile`. */
  readonly profileDir?: string;
  /** Ingest + fan-out in one process, the persister in another. */
  readonly split?: boolean;
  /** One process per stage: ingest, persister and fan-out (`RS_ROLES` of one role each). */
  readonly stages?: boolean;
  /** One process with only these roles (`RS_ROLES`), e.g. `ingest` to measure that stage alone. */
  readonly roles?: string;
  readonly env?: Record<string, string>;
  /** Read this run's top statements from `pg_stat_statements` before its database goes (pg-statements.ts). */
  readonly pgStats?: boolean;
}

interface Member {
  readonly name: string;
  readonly proc: BrokerProcess;
  readonly probeFile: string;
}

export async function startBenchBroker(servers: Servers, o: BenchBrokerOptions): Promise<BenchBroker> {
  const databaseUrl = await servers.pg.createDatabase();
  const config = brokerConfig(servers, { databaseUrl });
  const probeDir = mkdtempSync(join(tmpdir(), 'rs-bench-probe-'));
  registerTempDir(probeDir); // removed at exit too, should the run be interrupted
  const logLines: string[] = [];
  let logged = 0;
  const keep = (name: string) => (d: Buffer) => {
    for (const line of d.toString().split('\n')) {
      if (line.trim() === '' || logLevel(line) < WARN_LEVEL) continue;
      logged++;
      logLines.push(`${name}: ${line.length > 400 ? `${line.slice(0, 400)}…` : line}`);
      if (logLines.length > KEPT_LOG_LINES) logLines.shift();
    }
  };

  const members: Member[] = [];
  const earlyExits: string[] = [];
  let stopping = false;
  const spawnMember = async (name: string, roles: string | undefined): Promise<void> => {
    const probeFile = join(probeDir, `${name}.json`);
    const env: Record<string, string> = {
      // info: spawnBroker waits for the 'runstream started' line; only warnings and errors are kept.
      LOG_LEVEL: 'info',
      // RS_BENCH_NODE_OPTIONS: more node flags for the brokers, e.g. --perf-basic-prof for `perf record`.
      NODE_OPTIONS: `--import=${PROBE_URL} ${process.env.RS_BENCH_NODE_OPTIONS ?? ''}`.trim(),
      RS_BENCH_PROBE_FILE: probeFile,
      ...(roles ? { RS_ROLES: roles } : {}),
      ...o.env,
    };
    if (o.profileDir) {
      mkdirSync(o.profileDir, { recursive: true });
      env.RS_BENCH_CPU_PROFILE = join(
        o.profileDir,
        `${o.label}${name === 'broker' ? '' : `-${name}`}.cpuprofile`,
      );
    }
    const proc = await spawnBroker(config, env);
    proc.child.once('exit', (code, signal) => {
      if (!stopping) earlyExits.push(`${name} (pid ${proc.child.pid}): code ${code}, signal ${signal}`);
    });
    proc.child.stdout?.on('data', keep(name));
    proc.child.stderr?.on('data', keep(name));
    members.push({ name, proc, probeFile });
  };

  let statements: PgStatement[] | undefined;
  let stopped: Promise<Record<string, LoopDelaySecond[]>> | undefined;
  const stop = (): Promise<Record<string, LoopDelaySecond[]>> => {
    stopped ??= (async () => {
      stopping = true;
      // Intake first, as in a rolling restart: the front process, then the persister.
      for (const m of members) await stopBrokerProcess(m.proc);
      const delays: Record<string, LoopDelaySecond[]> = {};
      for (const m of members) {
        if (existsSync(m.probeFile)) delays[m.name] = JSON.parse(readFileSync(m.probeFile, 'utf8'));
      }
      await removeTempDir(probeDir);
      await deleteLog(servers.nats.url, config.streamName, config.partitions).catch(() => undefined);
      if (o.pgStats) statements = await topStatements(databaseUrl);
      await dropDatabase(servers.pg.adminUrl, databaseUrl).catch(() => undefined);
      return delays;
    })();
    return stopped;
  };

  try {
    if (o.stages) {
      await spawnMember('ingest', 'ingest');
      await spawnMember('persister', 'persister');
      await spawnMember('fanout', 'fanout');
    } else if (o.split) {
      await spawnMember('front', 'ingest,fanout');
      await spawnMember('persister', 'persister');
    } else {
      await spawnMember('broker', o.roles);
    }
  } catch (err) {
    await stop();
    throw err;
  }
  const front = members[0] as Member;
  // In the stages layout producers talk to the ingest process and subscribers to the fan-out one.
  const fanout = members.find((m) => m.name === 'fanout') ?? front;
  return {
    grpcTarget: `127.0.0.1:${front.proc.grpcPort}`,
    wsUrl: `ws://127.0.0.1:${fanout.proc.httpPort}/v1/ws`,
    pids: members.map((m) => m.proc.child.pid as number),
    pidsByName: Object.fromEntries(members.map((m) => [m.name, m.proc.child.pid as number])),
    databaseUrl,
    logLines,
    logCount: () => logged,
    earlyExits,
    stop,
    statements: () => statements,
    async [Symbol.asyncDispose]() {
      await stop();
    },
  };
}

/** Stops a broker process gracefully, or kills it if it has not exited after {@link BROKER_STOP_GRACE_MS}. */
export async function stopBrokerProcess(proc: BrokerProcess): Promise<void> {
  if (proc.child.exitCode !== null || proc.child.signalCode !== null) return;
  let timer: NodeJS.Timeout | undefined;
  const graceful = await Promise.race([
    proc.stop().then(() => true),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), BROKER_STOP_GRACE_MS);
    }),
  ]);
  clearTimeout(timer);
  if (!graceful) await proc.kill();
}

/** pino's level number of a JSON log line; anything else (a crash trace on stderr) counts as an error. */
function logLevel(line: string): number {
  try {
    const level = (JSON.parse(line) as { level?: unknown }).level;
    return typeof level === 'number' ? level : ERROR_LEVEL;
  } catch {
    return ERROR_LEVEL;
  }
}

/** Every stream of a log: its partitions' (and one from before partitions, if any). */
/** Deletes a log's streams (the partition streams and the older single stream), whichever exist. */
export async function deleteLog(natsUrl: string, streamName: string, partitions: number): Promise<void> {
  const nc = await connect({ servers: natsUrl });
  try {
    const jsm = await jetstreamManager(nc);
    const names = [
      streamName,
      ...Array.from({ length: partitions }, (_, p) => partitionStream(streamName, p)),
    ];
    await Promise.all(names.map((n) => jsm.streams.delete(n).catch(() => false)));
  } finally {
    await nc.close();
  }
}

async function dropDatabase(adminUrl: string, databaseUrl: string): Promise<void> {
  const name = decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
  const client = new pg.Client({ connectionString: adminUrl });
  client.on('error', () => undefined);
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  } finally {
    await client.end();
  }
}
