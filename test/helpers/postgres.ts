/**
 * Starts a REAL throw-away Postgres cluster for integration tests: system binaries, random port, temp data dir,
 * fsync off. One initdb per test process into a cached template that is copied (`cp -a`) for every cluster.
 * Set DATABASE_URL to use an existing server instead: a fresh database is created there and dropped on stop().
 *
 * As root (initdb/postgres refuse to run as root) the binaries run as the `postgres` OS user; the uid/gid are
 * set directly on the spawned process (no runuser/su wrapper in between), so signals reach the postmaster itself.
 */
import { execFile as execFileCb, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { chown, mkdir, mkdtemp, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import {
  freePort,
  killGroup,
  logTail,
  type Running,
  registerExitCleanup,
  registerTempDir,
  removeTempDir,
  spawnServer,
  terminate,
} from './proc.js';
import { waitFor } from './wait.js';

const execFile = promisify(execFileCb);

export interface PostgresHandle extends AsyncDisposable {
  /** postgres://postgres@127.0.0.1:<port>/<fresh database> */
  readonly url: string;
  /** Same server, database `postgres` (external: DATABASE_URL as given). */
  readonly adminUrl: string;
  readonly port: number;
  /** true when DATABASE_URL was used. */
  readonly external: boolean;
  /** Fast shutdown (SIGINT), wait for the postmaster and all backends to exit; idempotent. External: drops the test database(s). */
  stop(): Promise<void>;
  /** SIGKILL the postmaster and all its children (crash simulation). */
  kill(): Promise<void>;
  /**
   * Stop, then start again on the same port and data dir; resolves once it accepts
   * queries. `fast` (the default, `pg_ctl -m fast`: SIGINT) rolls back and disconnects
   * clients; `immediate` (`-m immediate`: SIGQUIT) ends every backend at once and recovers
   * from the WAL at start.
   */
  restart(mode?: 'fast' | 'immediate'): Promise<void>;
  /** Another fresh, empty database on this server; returns its URL. */
  createDatabase(): Promise<string>;
}

export interface StartPostgresOptions {
  /** Honour DATABASE_URL if set (default true). */
  useEnv?: boolean;
  /** More server settings, `name=value` each (e.g. `shared_preload_libraries=pg_stat_statements`). */
  settings?: readonly string[];
}

export interface PostgresTimings {
  /** initdb of the per-process template (ms). */
  initdbMs?: number;
  /** `cp -a` of the template per cluster (ms). */
  copyMs: number[];
  /** spawn → accepts queries (ms). */
  startMs: number[];
  /** 'copy' once copying proved faster than initdb, 'initdb' otherwise. */
  strategy?: 'copy' | 'initdb';
}

const timings: PostgresTimings = { copyMs: [], startMs: [] };

/** Measured timings in this process (for diagnostics). */
export function postgresTimings(): Readonly<PostgresTimings> {
  return timings;
}

const READY_TIMEOUT_MS = 30_000;
const STOP_GRACE_MS = 15_000;

// ---------------------------------------------------------------------------------------------------------------
// binaries and OS user

let binDirCache: string | undefined;

async function pgBinDir(): Promise<string> {
  if (binDirCache) return binDirCache;
  const base = '/usr/lib/postgresql';
  let versions: string[] = [];
  try {
    versions = (await readdir(base))
      .filter((v) => /^\d+(\.\d+)?$/.test(v))
      .sort((a, b) => Number(b) - Number(a));
  } catch {
    // not a Debian-style layout
  }
  for (const v of versions) {
    try {
      await execFile(join(base, v, 'bin', 'postgres'), ['--version']);
      binDirCache = join(base, v, 'bin');
      return binDirCache;
    } catch {
      // incomplete install, try an older one
    }
  }
  throw new Error(
    'Postgres server binaries not found under /usr/lib/postgresql/*/bin — install them with `apt-get install postgresql` ' +
      '(or set DATABASE_URL to an existing server)',
  );
}

interface RunAs {
  uid?: number;
  gid?: number;
}

let runAsCache: RunAs | undefined;

/** As root: the `postgres` OS user's uid/gid (initdb and postgres refuse to run as root). Otherwise: as-is. */
function runAs(): RunAs {
  if (runAsCache) return runAsCache;
  if (process.getuid?.() !== 0) {
    runAsCache = {};
    return runAsCache;
  }
  try {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    if (!Number.isInteger(uid) || !Number.isInteger(gid)) throw new Error('unparsable id output');
    runAsCache = { uid, gid };
    return runAsCache;
  } catch (err) {
    throw new Error(
      'Running as root but there is no `postgres` OS user to run initdb/postgres as (apt-get install postgresql creates it)',
      { cause: err },
    );
  }
}

/** mkdtemp under os.tmpdir(), owned by the user postgres runs as. */
async function makeOwnedTempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const ra = runAs();
  if (ra.uid !== undefined && ra.gid !== undefined) await chown(dir, ra.uid, ra.gid);
  return dir;
}

async function makeOwnedDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const ra = runAs();
  if (ra.uid !== undefined && ra.gid !== undefined) await chown(dir, ra.uid, ra.gid);
}

// ---------------------------------------------------------------------------------------------------------------
// cluster creation: initdb once per process into a template, then cp -a

async function initdb(dataDir: string, cwd: string): Promise<void> {
  const bin = await pgBinDir();
  const ra = runAs();
  try {
    await execFile(
      join(bin, 'initdb'),
      ['-D', dataDir, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8', '--locale=C'],
      { cwd, ...ra, env: { ...process.env, LC_ALL: 'C' }, maxBuffer: 16 * 1024 * 1024 },
    );
  } catch (err) {
    const e = err as { stderr?: string; stdout?: string; message: string };
    throw new Error(`initdb failed: ${e.message}\n${e.stderr ?? ''}${e.stdout ?? ''}`, { cause: err });
  }
}

let templatePromise: Promise<string> | undefined;

function templateDataDir(): Promise<string> {
  templatePromise ??= (async () => {
    const dir = await makeOwnedTempDir('rs-pg-template-');
    registerTempDir(dir);
    const dataDir = join(dir, 'data');
    const t0 = performance.now();
    await initdb(dataDir, dir);
    timings.initdbMs = performance.now() - t0;
    return dataDir;
  })().catch((err: unknown) => {
    templatePromise = undefined; // a failed initdb must not poison later attempts
    throw err;
  });
  return templatePromise;
}

async function createCluster(dataDir: string, cwd: string): Promise<void> {
  if (timings.strategy === 'initdb') {
    await initdb(dataDir, cwd);
    return;
  }
  const template = await templateDataDir();
  const t0 = performance.now();
  // -a keeps ownership (postgres user) and the 0700 mode postgres insists on.
  await execFile('cp', ['-a', template, dataDir]);
  const ms = performance.now() - t0;
  timings.copyMs.push(ms);
  timings.strategy ??= timings.initdbMs !== undefined && ms > timings.initdbMs ? 'initdb' : 'copy';
}

// ---------------------------------------------------------------------------------------------------------------
// helpers

function randomDbName(): string {
  return `rs_test_${randomBytes(6).toString('hex')}`;
}

function withDatabase(url: string, db: string): string {
  const u = new URL(url);
  u.pathname = `/${encodeURIComponent(db)}`;
  return u.toString();
}

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  client.on('error', () => {}); // server going away mid-session must not crash the test process
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * A cluster that was SIGKILLed and is not restarted leaves its (tiny) System V shared memory segment behind; its id
 * is on line 7 of postmaster.pid ("<key> <shmid>"). Mark it for removal (it goes once nobody is attached).
 */
function releaseStaleShm(dataDir: string): void {
  let pidFile: string;
  try {
    pidFile = readFileSync(join(dataDir, 'postmaster.pid'), 'utf8');
  } catch {
    return; // clean shutdown (or never started): nothing to release
  }
  const shmid = pidFile.split('\n')[6]?.trim().split(/\s+/)[1];
  if (!shmid || !/^\d+$/.test(shmid)) return;
  try {
    execFileSync('ipcrm', ['-m', shmid], { stdio: 'ignore' });
  } catch {
    // already gone
  }
}

async function createDb(adminUrl: string): Promise<string> {
  const name = randomDbName();
  await withClient(adminUrl, (c) => c.query(`CREATE DATABASE "${name}"`));
  return name;
}

// ---------------------------------------------------------------------------------------------------------------
// public API

export async function startPostgres(opts: StartPostgresOptions = {}): Promise<PostgresHandle> {
  const envUrl = process.env.DATABASE_URL;
  if (opts.useEnv !== false && envUrl) return externalHandle(envUrl);

  const binDir = await pgBinDir();
  const root = await makeOwnedTempDir('rs-pg-');
  registerTempDir(root);
  const dataDir = join(root, 'data');
  const sockDir = join(root, 'sock');
  const logPath = join(root, 'postgres.log');
  const ra = runAs();
  const unregisterShmCleanup = registerExitCleanup(() => releaseStaleShm(dataDir));

  let proc: Running | undefined;
  let port = 0;
  let disposed = false;
  const adminUrlFor = () => `postgres://postgres@127.0.0.1:${port}/postgres`;

  /** Spawn the postmaster on `port` and wait until it answers `select 1`. */
  const launch = async (): Promise<void> => {
    const t0 = performance.now();
    // fsync=off / full_page_writes=off only matter for an OS crash, which tests never simulate. NOT
    // synchronous_commit=off: with it a committed row can be lost on kill() (the WAL is still in the server's
    // buffers), which would make crash tests flaky; with fsync=off a synchronous commit costs just a write().
    const r = spawnServer(
      join(binDir, 'postgres'),
      [
        '-D',
        dataDir,
        '-p',
        String(port),
        '-k',
        sockDir,
        '-c',
        'listen_addresses=127.0.0.1',
        '-c',
        'fsync=off',
        '-c',
        'full_page_writes=off',
        '-c',
        'max_connections=200',
        // DSM segments as files under $PGDATA/pg_dynshmem instead of /dev/shm/PostgreSQL.*, which a SIGKILLed
        // cluster that is never restarted would leak; removing the temp dir now removes them too.
        '-c',
        'dynamic_shared_memory_type=mmap',
        ...(opts.settings ?? []).flatMap((setting) => ['-c', setting]),
      ],
      { logPath, cwd: root, ...ra, env: { ...process.env, LC_ALL: 'C' } },
    );
    proc = r;
    try {
      await waitFor(
        () =>
          withClient(adminUrlFor(), async (c) => {
            await c.query('select 1');
            return true;
          }),
        {
          timeoutMs: READY_TIMEOUT_MS,
          intervalMs: 50,
          what: `postgres on port ${port}`,
          signal: r.exitSignal,
        },
      );
    } catch (err) {
      await killGroup(r).catch(() => {});
      const why = r.exit
        ? `exited during startup (code ${r.exit.code}, signal ${r.exit.signal})`
        : 'not ready';
      throw new Error(`postgres ${why} (log ${logPath}):\n${logTail(logPath)}`, { cause: err });
    }
    timings.startMs.push(performance.now() - t0);
  };

  const stop = async (mode: 'fast' | 'immediate' = 'fast'): Promise<void> => {
    const r = proc;
    if (!r) return;
    // SIGINT = "fast" shutdown (SIGTERM would be "smart" and wait for every client to
    // disconnect); SIGQUIT = "immediate".
    await terminate(r, mode === 'fast' ? 'SIGINT' : 'SIGQUIT', STOP_GRACE_MS);
    proc = undefined;
  };

  let dbName: string;
  try {
    await makeOwnedDir(sockDir);
    await createCluster(dataDir, root);
    // The free port is only reserved until we close the probe socket: retry if someone grabs it meanwhile.
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      try {
        await launch();
        break;
      } catch (err) {
        if (attempt >= 5 || !/could not bind|Address already in use/i.test((err as Error).message)) throw err;
      }
    }
    dbName = await createDb(adminUrlFor());
  } catch (err) {
    await stop().catch(() => {});
    releaseStaleShm(dataDir);
    unregisterShmCleanup();
    await removeTempDir(root);
    throw err;
  }

  return {
    get url() {
      return `postgres://postgres@127.0.0.1:${port}/${dbName}`;
    },
    get adminUrl() {
      return adminUrlFor();
    },
    get port() {
      return port;
    },
    external: false,
    stop: () => stop(),
    async kill() {
      const r = proc;
      if (!r) return;
      await killGroup(r); // postmaster + every backend/aux process, so a restart finds no live holder
      proc = undefined;
    },
    async restart(mode: 'fast' | 'immediate' = 'fast') {
      if (disposed) throw new Error('postgres handle already disposed');
      await stop(mode);
      // After kill() a stale postmaster.pid remains; postgres removes it itself since that pid is dead and
      // killGroup() made sure no backend still holds the old shared memory segment.
      await launch();
    },
    async createDatabase() {
      if (!proc) throw new Error('postgres is not running');
      return withDatabase(adminUrlFor(), await createDb(adminUrlFor()));
    },
    async [Symbol.asyncDispose]() {
      if (disposed) return;
      disposed = true;
      try {
        await stop();
      } finally {
        releaseStaleShm(dataDir); // only does something after kill() without restart()
        unregisterShmCleanup();
        await removeTempDir(root);
      }
    },
  };
}

async function externalHandle(envUrl: string): Promise<PostgresHandle> {
  const created: string[] = [];
  const first = await createDb(envUrl);
  created.push(first);
  const parsed = new URL(envUrl);
  const port = parsed.port ? Number(parsed.port) : 5432;
  const unsupported = (op: string) => async () => {
    throw new Error(
      `postgres ${op}() is not possible: tests are using the external server from DATABASE_URL. ` +
        'Unset DATABASE_URL (or pass { useEnv: false }) to run fault tests against a spawned server.',
    );
  };
  const stop = async (): Promise<void> => {
    const names = created.splice(0);
    if (names.length === 0) return;
    await withClient(envUrl, async (c) => {
      for (const name of names) {
        try {
          await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`); // PG13+
        } catch {
          await c.query(`DROP DATABASE IF EXISTS "${name}"`);
        }
      }
    });
  };
  return {
    url: withDatabase(envUrl, first),
    adminUrl: envUrl,
    port,
    external: true,
    stop,
    kill: unsupported('kill'),
    restart: unsupported('restart'),
    async createDatabase() {
      const name = await createDb(envUrl);
      created.push(name);
      return withDatabase(envUrl, name);
    },
    [Symbol.asyncDispose]: stop,
  };
}

/** What {@link countStatements} returns: the count so far, and `restore` (also on dispose). */
export interface StatementCount extends Disposable {
  (): number;
  restore(): void;
}

/**
 * Counts from now on the statements this process sends to Postgres through `pg` (every
 * client: pools and the in-process broker's), or only those whose prepared-statement name
 * matches `name`. Only observed: each is sent as it would be.
 */
export function countStatements(name?: RegExp): StatementCount {
  const query = pg.Client.prototype.query;
  let n = 0;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const config = args[0] as { name?: unknown } | undefined;
    if (name === undefined || (typeof config?.name === 'string' && name.test(config.name))) n++;
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  const restore = (): void => {
    pg.Client.prototype.query = query;
  };
  return Object.assign(() => n, { restore, [Symbol.dispose]: restore });
}
