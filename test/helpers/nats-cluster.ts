/**
 * Starts a REAL 3-node nats-server cluster (JetStream on) on loopback for cluster tests:
 * random client, route and monitoring ports, a store dir of each node's own, routes to
 * every other node, server names n1..n3. Resolves once JetStream has a meta leader.
 *
 * Nodes are addressed by index 0..2. `kill(i)` is SIGKILL, `pause(i)` SIGSTOP (a hung node:
 * its sockets stay open), `restart(i)` starts the node again on the same ports and store.
 */
import { mkdir, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findNatsServerBinary } from './nats-server.js';
import {
  fileSize,
  freePort,
  killGroup,
  logTail,
  type Running,
  readLogFrom,
  registerTempDir,
  removeTempDir,
  spawnServer,
  tcpProbe,
  terminate,
} from './proc.js';
import { waitFor } from './wait.js';

const NODES = 3;
const READY_TIMEOUT_MS = 20_000;
const STOP_GRACE_MS = 10_000;
/** How long a monitoring request may take before the node counts as not answering. */
const MONITOR_TIMEOUT_MS = 1_000;

interface Node {
  readonly name: string;
  readonly port: number;
  readonly routePort: number;
  readonly monitorPort: number;
  readonly storeDir: string;
  readonly logPath: string;
  proc: Running | undefined;
  paused: boolean;
}

export interface NatsClusterHandle extends AsyncDisposable {
  /** `nats://127.0.0.1:p1,nats://127.0.0.1:p2,nats://127.0.0.1:p3`, the broker's NATS_URL. */
  readonly url: string;
  /** nats://127.0.0.1:<port> of node i alone. */
  urlOf(i: number): string;
  /** Server name of node i (n1..n3). */
  nameOf(i: number): string;
  /** http://127.0.0.1:<port> of node i's monitoring endpoint. */
  monitorUrlOf(i: number): string;
  /** Node i runs (started and not killed or stopped; a paused node counts as running). */
  running(i: number): boolean;
  /** SIGKILL node i and wait for its exit. */
  kill(i: number): Promise<void>;
  /** SIGTERM node i (SIGKILL after a grace period) and wait for its exit. */
  stop(i: number): Promise<void>;
  /** SIGSTOP node i: it holds its connections but answers nothing. */
  pause(i: number): void;
  /** SIGCONT node i. */
  resume(i: number): void;
  /** Start node i again on the same ports and store; resolves once it accepts connections. */
  restart(i: number): Promise<void>;
  /** Index of the node that leads `stream`, as a running node's monitoring endpoint says (undefined: none). */
  leaderOf(stream: string): Promise<number | undefined>;
  /** Index of the JetStream meta leader (undefined: none known to a running node). */
  metaLeader(): Promise<number | undefined>;
  /** Waits until the running nodes agree on a meta leader; returns its index. */
  waitForMetaLeader(timeoutMs?: number): Promise<number>;
  /** Waits until `stream` has a leader among the running nodes; returns its index. */
  waitForLeader(stream: string, timeoutMs?: number): Promise<number>;
  /** Last lines of node i's log. */
  logTail(i: number, lines?: number): string;
}

interface Jsz {
  meta_cluster?: { leader?: string };
  account_details?: { stream_detail?: { name: string; cluster?: { leader?: string } }[] }[];
}

async function monitor(url: string): Promise<Jsz | undefined> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(MONITOR_TIMEOUT_MS) });
    if (!res.ok) return undefined;
    return (await res.json()) as Jsz;
  } catch {
    return undefined;
  }
}

export async function startNatsCluster(): Promise<NatsClusterHandle> {
  const bin = findNatsServerBinary();
  const dir = await mkdtemp(join(tmpdir(), 'rs-nats-cluster-'));
  registerTempDir(dir);
  const nodes: Node[] = [];
  // Ports are chosen up front: every node's routes name the others' route ports.
  const taken = new Set<number>();
  const pick = async (): Promise<number> => {
    for (;;) {
      const p = await freePort();
      if (!taken.has(p)) {
        taken.add(p);
        return p;
      }
    }
  };
  for (let i = 0; i < NODES; i++) {
    const nodeDir = join(dir, `n${i + 1}`);
    await mkdir(nodeDir, { recursive: true });
    nodes.push({
      name: `n${i + 1}`,
      port: await pick(),
      routePort: await pick(),
      monitorPort: await pick(),
      storeDir: join(nodeDir, 'store'),
      logPath: join(nodeDir, 'nats-server.log'),
      proc: undefined,
      paused: false,
    });
  }
  let disposed = false;

  const node = (i: number): Node => {
    const n = nodes[i];
    if (!n) throw new Error(`no cluster node ${i} (0..${NODES - 1})`);
    return n;
  };

  const launch = async (n: Node): Promise<void> => {
    const offset = fileSize(n.logPath);
    const routes = nodes
      .filter((o) => o !== n)
      .map((o) => `nats://127.0.0.1:${o.routePort}`)
      .join(',');
    const args = [
      '-a',
      '127.0.0.1',
      '-p',
      String(n.port),
      '-n',
      n.name,
      '-js',
      '-sd',
      n.storeDir,
      '-m',
      String(n.monitorPort),
      '--cluster_name',
      'rs',
      '--cluster',
      `nats://127.0.0.1:${n.routePort}`,
      '--routes',
      routes,
    ];
    const r = spawnServer(bin, args, { logPath: n.logPath, cwd: dir });
    n.proc = r;
    n.paused = false;
    try {
      await waitFor(async () => (await readLogFrom(n.logPath, offset)).includes('Server is ready'), {
        timeoutMs: READY_TIMEOUT_MS,
        intervalMs: 20,
        what: `nats-server ${n.name} "Server is ready"`,
        signal: r.exitSignal,
      });
      await waitFor(() => tcpProbe(n.port), {
        timeoutMs: READY_TIMEOUT_MS,
        intervalMs: 20,
        what: `TCP connect to ${n.name} at 127.0.0.1:${n.port}`,
        signal: r.exitSignal,
      });
    } catch (err) {
      await killGroup(r).catch(() => {});
      n.proc = undefined;
      throw new Error(`nats-server ${n.name} not ready (log ${n.logPath}):\n${logTail(n.logPath)}`, {
        cause: err,
      });
    }
  };

  const stopNode = async (n: Node, signal: 'SIGTERM' | 'SIGKILL'): Promise<void> => {
    const r = n.proc;
    if (!r) return;
    if (n.paused) {
      try {
        process.kill(r.pid, 'SIGCONT');
      } catch {
        // already gone
      }
    }
    if (signal === 'SIGKILL') await killGroup(r);
    else await terminate(r, 'SIGTERM', STOP_GRACE_MS);
    n.proc = undefined;
    n.paused = false;
  };

  const answering = (): Node[] => nodes.filter((n) => n.proc && !n.paused);
  const indexOfName = (name: string | undefined): number | undefined => {
    const i = nodes.findIndex((n) => n.name === name);
    return i < 0 ? undefined : i;
  };

  const metaLeader = async (): Promise<number | undefined> => {
    const seen = await Promise.all(answering().map((n) => monitor(`http://127.0.0.1:${n.monitorPort}/jsz`)));
    const leaders = new Set(seen.map((j) => j?.meta_cluster?.leader ?? ''));
    // Every answering node must know the same leader, and it must be one that runs.
    if (leaders.size !== 1) return undefined;
    const i = indexOfName([...leaders][0]);
    return i !== undefined && nodes[i]?.proc && !nodes[i]?.paused ? i : undefined;
  };

  const leaderOf = async (stream: string): Promise<number | undefined> => {
    for (const n of answering()) {
      const j = await monitor(`http://127.0.0.1:${n.monitorPort}/jsz?accounts=true&streams=true`);
      for (const a of j?.account_details ?? []) {
        for (const s of a.stream_detail ?? []) {
          if (s.name !== stream) continue;
          const i = indexOfName(s.cluster?.leader);
          if (i !== undefined && nodes[i]?.proc && !nodes[i]?.paused) return i;
        }
      }
    }
    return undefined;
  };

  const waitForMetaLeader = (timeoutMs = READY_TIMEOUT_MS): Promise<number> =>
    waitFor(async () => (await metaLeader()) ?? false, {
      timeoutMs,
      intervalMs: 100,
      what: 'a JetStream meta leader',
    });

  try {
    await Promise.all(nodes.map((n) => launch(n)));
    await waitForMetaLeader();
  } catch (err) {
    await Promise.all(nodes.map((n) => stopNode(n, 'SIGKILL').catch(() => {})));
    await removeTempDir(dir);
    throw err;
  }

  return {
    url: nodes.map((n) => `nats://127.0.0.1:${n.port}`).join(','),
    urlOf: (i) => `nats://127.0.0.1:${node(i).port}`,
    nameOf: (i) => node(i).name,
    monitorUrlOf: (i) => `http://127.0.0.1:${node(i).monitorPort}`,
    running: (i) => node(i).proc !== undefined,
    kill: (i) => stopNode(node(i), 'SIGKILL'),
    stop: (i) => stopNode(node(i), 'SIGTERM'),
    pause(i) {
      const n = node(i);
      if (!n.proc) throw new Error(`${n.name} is not running`);
      process.kill(n.proc.pid, 'SIGSTOP');
      n.paused = true;
    },
    resume(i) {
      const n = node(i);
      if (!n.proc) return;
      process.kill(n.proc.pid, 'SIGCONT');
      n.paused = false;
    },
    async restart(i) {
      if (disposed) throw new Error('nats cluster handle already disposed');
      const n = node(i);
      await stopNode(n, 'SIGTERM');
      await launch(n);
    },
    leaderOf,
    metaLeader,
    waitForMetaLeader,
    waitForLeader: (stream, timeoutMs = READY_TIMEOUT_MS) =>
      waitFor(async () => (await leaderOf(stream)) ?? false, {
        timeoutMs,
        intervalMs: 100,
        what: `a leader for stream ${stream}`,
      }),
    logTail: (i, lines) => logTail(node(i).logPath, lines),
    async [Symbol.asyncDispose]() {
      if (disposed) return;
      disposed = true;
      try {
        await Promise.all(nodes.map((n) => stopNode(n, 'SIGKILL')));
      } finally {
        await removeTempDir(dir);
      }
    },
  };
}
