/**
 * Starts a REAL nats-server (JetStream on) for integration tests: random port, temp store dir, log file.
 * Set NATS_URL to use an already-running server instead (stop() is then a no-op; kill/restart throw).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  fileSize,
  findExecutable,
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

export interface NatsServerHandle extends AsyncDisposable {
  /** nats://127.0.0.1:<port> (or NATS_URL verbatim when external). */
  readonly url: string;
  readonly port: number;
  /** true when NATS_URL was used. */
  readonly external: boolean;
  /** SIGTERM, wait for exit; idempotent. */
  stop(): Promise<void>;
  /** SIGKILL, wait for exit (fault tests). */
  kill(): Promise<void>;
  /** SIGSTOP: the server keeps its connections open and answers nothing (a hung server). */
  pause(): void;
  /** SIGCONT after {@link pause}. */
  resume(): void;
  /**
   * Start again on the same port and store dir (JetStream data survives; with `wipeStore`, the
   * store is deleted first, as a server that lost its disk); resolves once it accepts connections.
   */
  restart(o?: { wipeStore?: boolean }): Promise<void>;
  /** http://127.0.0.1:<port> of the monitoring endpoint (`/connz`, `/varz`), when started with `monitor`. */
  readonly monitorUrl: string | undefined;
}

export interface StartNatsOptions {
  /** Honour NATS_URL if set (default true). */
  useEnv?: boolean;
  /** Serve the HTTP monitoring endpoint on a free port (`-m`), e.g. to count a client's subscriptions. */
  monitor?: boolean;
}

const READY_TIMEOUT_MS = 15_000;
const STOP_GRACE_MS = 10_000;
const LISTEN_RE = /Listening for client connections on 127\.0\.0\.1:(\d+)/;

export function findNatsServerBinary(): string {
  const bin = findExecutable('nats-server', ['/usr/sbin/nats-server', '/usr/bin/nats-server']);
  if (!bin) {
    throw new Error(
      'nats-server binary not found on PATH or at /usr/sbin/nats-server — install it with `apt-get install nats-server` ' +
        '(or set NATS_URL to an existing server)',
    );
  }
  return bin;
}

export async function startNatsServer(opts: StartNatsOptions = {}): Promise<NatsServerHandle> {
  const envUrl = process.env.NATS_URL;
  if (opts.useEnv !== false && envUrl) return externalHandle(envUrl);

  const bin = findNatsServerBinary();
  const dir = await mkdtemp(join(tmpdir(), 'rs-nats-'));
  registerTempDir(dir);
  const storeDir = join(dir, 'store');
  const logPath = join(dir, 'nats-server.log');

  let proc: Running | undefined;
  let port = -1;
  let disposed = false;
  const monitorPort = opts.monitor ? await freePort() : undefined;
  const monitorArgs = monitorPort === undefined ? [] : ['-m', String(monitorPort)];

  const launch = async (requestedPort: number): Promise<void> => {
    const offset = fileSize(logPath);
    const args = ['-a', '127.0.0.1', '-p', String(requestedPort), '-js', '-sd', storeDir, ...monitorArgs];
    const r = spawnServer(bin, args, {
      logPath,
      cwd: dir,
    });
    proc = r;
    const fail = (why: string, cause?: unknown): Error =>
      new Error(`nats-server ${why} (log ${logPath}):\n${logTail(logPath)}`, { cause });
    try {
      port = await waitFor(
        async () => {
          const log = await readLogFrom(logPath, offset);
          if (!log.includes('Server is ready')) return undefined;
          const m = LISTEN_RE.exec(log);
          return m?.[1] ? Number(m[1]) : undefined;
        },
        {
          timeoutMs: READY_TIMEOUT_MS,
          intervalMs: 10,
          what: 'nats-server "Server is ready"',
          signal: r.exitSignal,
        },
      );
      await waitFor(() => tcpProbe(port), {
        timeoutMs: READY_TIMEOUT_MS,
        intervalMs: 20,
        what: `TCP connect to 127.0.0.1:${port}`,
        signal: r.exitSignal,
      });
    } catch (err) {
      await killGroup(r).catch(() => {});
      throw fail(
        r.exit ? `exited during startup (code ${r.exit.code}, signal ${r.exit.signal})` : 'not ready',
        err,
      );
    }
  };

  const stop = async (): Promise<void> => {
    const r = proc;
    if (!r) return;
    signal(r, 'SIGCONT');
    await terminate(r, 'SIGTERM', STOP_GRACE_MS);
    proc = undefined;
  };

  try {
    await launch(-1);
  } catch (err) {
    await removeTempDir(dir);
    throw err;
  }

  return {
    get url() {
      return `nats://127.0.0.1:${port}`;
    },
    get port() {
      return port;
    },
    external: false,
    monitorUrl: monitorPort === undefined ? undefined : `http://127.0.0.1:${monitorPort}`,
    stop,
    async kill() {
      const r = proc;
      if (!r) return;
      signal(r, 'SIGCONT');
      await killGroup(r);
      proc = undefined;
    },
    pause() {
      if (proc) signal(proc, 'SIGSTOP');
    },
    resume() {
      if (proc) signal(proc, 'SIGCONT');
    },
    async restart(o: { wipeStore?: boolean } = {}) {
      if (disposed) throw new Error('nats-server handle already disposed');
      await stop();
      if (o.wipeStore) await rm(storeDir, { recursive: true, force: true });
      await launch(port);
    },
    async [Symbol.asyncDispose]() {
      if (disposed) return;
      disposed = true;
      try {
        await stop();
      } finally {
        await removeTempDir(dir);
      }
    },
  };
}

/** Signals a server that may have exited meanwhile. */
function signal(r: Running, sig: NodeJS.Signals): void {
  try {
    process.kill(r.pid, sig);
  } catch {
    // already gone
  }
}

function externalHandle(url: string): NatsServerHandle {
  const first = url.split(',')[0]?.trim() ?? url;
  let port = 4222;
  try {
    const parsed = new URL(first.includes('://') ? first : `nats://${first}`);
    if (parsed.port) port = Number(parsed.port);
  } catch {
    // keep default
  }
  const unsupported = (op: string) => async () => {
    throw new Error(
      `nats-server ${op}() is not possible: tests are using the external server from NATS_URL=${url}. ` +
        'Unset NATS_URL (or pass { useEnv: false }) to run fault tests against a spawned server.',
    );
  };
  return {
    url,
    port,
    external: true,
    monitorUrl: undefined,
    stop: async () => {},
    kill: unsupported('kill'),
    pause: () => {
      throw new Error(`nats-server pause() is not possible on the external server from NATS_URL=${url}`);
    },
    resume: () => undefined,
    restart: unsupported('restart'),
    [Symbol.asyncDispose]: async () => {},
  };
}
