/**
 * Process plumbing shared by the real-server test helpers: spawning servers into their own process group with
 * output captured in a log file, waiting for exit, killing whole groups, and making sure nothing outlives the
 * test process (children are SIGKILLed and temp dirs removed on exit / SIGINT / SIGTERM / SIGHUP).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import {
  closeSync,
  existsSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmSync,
  statSync,
} from 'node:fs';
import { open, rm } from 'node:fs/promises';
import net from 'node:net';
import { constants as osConstants } from 'node:os';
import { waitFor } from './wait.js';

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Running {
  readonly child: ChildProcess;
  readonly pid: number;
  /** Set once the process has exited. */
  exit: ExitInfo | undefined;
  readonly exited: Promise<ExitInfo>;
  /** Aborted when the process exits (reason = Error describing the exit). */
  readonly exitSignal: AbortSignal;
}

export interface SpawnOptions {
  /** Append stdout+stderr to this file. */
  logPath: string;
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  uid?: number;
  gid?: number;
}

const liveGroups = new Set<number>();
const tempDirs = new Set<string>();
const exitCleanups = new Set<() => void>();
let hooksInstalled = false;

function killGroupSync(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // already gone
  }
}

function cleanupSync(): void {
  for (const pgid of liveGroups) killGroupSync(pgid, 'SIGKILL');
  liveGroups.clear();
  for (const fn of exitCleanups) {
    try {
      fn();
    } catch {
      // best effort
    }
  }
  exitCleanups.clear();
  if (process.env.RS_TEST_KEEP_TMP) return;
  for (const dir of tempDirs) {
    try {
      rmSync(dir, { recursive: true, force: true, maxRetries: 3, retryDelay: 20 });
    } catch {
      // best effort
    }
  }
  tempDirs.clear();
}

function installHooks(): void {
  if (hooksInstalled) return;
  hooksInstalled = true;
  process.on('exit', cleanupSync);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => {
      cleanupSync();
      // If nobody else handles the signal, behave like the default action (terminate).
      if (process.listenerCount(sig) === 0) process.exit(128 + (osConstants.signals[sig] ?? 0));
    });
  }
}

/** Run `fn` synchronously at process exit, after all server process groups were SIGKILLed. Returns an unregister function. */
export function registerExitCleanup(fn: () => void): () => void {
  installHooks();
  exitCleanups.add(fn);
  return () => exitCleanups.delete(fn);
}

/** Remove `dir` when the process exits (unless RS_TEST_KEEP_TMP is set). */
export function registerTempDir(dir: string): void {
  installHooks();
  tempDirs.add(dir);
}

export async function removeTempDir(dir: string): Promise<void> {
  tempDirs.delete(dir);
  if (process.env.RS_TEST_KEEP_TMP) return;
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 });
}

/**
 * Spawn `cmd` as the leader of a new process group (detached), stdout/stderr appended to `logPath`.
 * The child is unref'ed so a forgotten handle never keeps the test process alive; the exit hook kills it.
 */
export function spawnServer(cmd: string, args: readonly string[], opts: SpawnOptions): Running {
  installHooks();
  const fd = openSync(opts.logPath, 'a');
  let child: ChildProcess;
  try {
    child = spawn(cmd, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      stdio: ['ignore', fd, fd],
      detached: true,
      ...(opts.uid !== undefined ? { uid: opts.uid } : {}),
      ...(opts.gid !== undefined ? { gid: opts.gid } : {}),
    });
  } finally {
    closeSync(fd);
  }
  const pid = child.pid;
  if (pid === undefined) {
    // spawn failures (ENOENT, EACCES) are reported asynchronously via 'error'; pid is undefined then.
    child.on('error', () => {});
    throw new Error(`Failed to spawn ${cmd} ${args.join(' ')}`);
  }
  liveGroups.add(pid);
  child.unref();
  const ac = new AbortController();
  const running: Running = {
    child,
    pid,
    exit: undefined,
    exitSignal: ac.signal,
    exited: new Promise<ExitInfo>((resolve) => {
      const done = (info: ExitInfo) => {
        if (running.exit) return;
        running.exit = info;
        liveGroups.delete(pid);
        ac.abort(new Error(`${cmd} exited (code ${info.code}, signal ${info.signal})`));
        resolve(info);
      };
      child.on('exit', (code, signal) => done({ code, signal }));
      child.on('error', () => done({ code: null, signal: null }));
    }),
  };
  return running;
}

/** Non-zombie processes whose process group is `pgid` (Linux /proc; falls back to kill(-pgid, 0)). */
export function groupMembers(pgid: number): number[] {
  if (!existsSync('/proc/self/stat')) {
    try {
      process.kill(-pgid, 0);
      return [pgid];
    } catch {
      return [];
    }
  }
  const members: number[] = [];
  for (const { pid, fields } of readProcStats()) {
    const state = fields[0];
    const pgrp = Number(fields[2]);
    if (pgrp === pgid && state !== 'Z' && state !== 'X') members.push(pid);
  }
  return members;
}

/** A process's /proc/<pid>/stat: its command name and the fields after it (state ppid pgrp ...). */
export interface ProcStat {
  readonly pid: number;
  readonly comm: string;
  readonly fields: readonly string[];
}

/** /proc/<pid>/stat of every process (Linux only); a process that exits meanwhile is skipped. */
export function readProcStats(): ProcStat[] {
  const stats: ProcStat[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // pid (comm) state ppid pgrp ...  — comm may contain spaces/parens, so split after the last ')'.
    const close = stat.lastIndexOf(')');
    stats.push({
      pid: Number(name),
      comm: stat.slice(stat.indexOf('(') + 1, close),
      fields: stat.slice(close + 2).split(' '),
    });
  }
  return stats;
}

/** Wait until the child itself has exited (keeps the event loop alive meanwhile). */
export async function waitExit(r: Running, timeoutMs: number): Promise<boolean> {
  if (r.exit) return true;
  r.child.ref();
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      r.exited.then(() => true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
      }),
    ]);
  } finally {
    clearTimeout(timer);
    r.child.unref();
  }
}

/** SIGKILL the whole process group and wait until the leader is reaped and no live member remains. */
export async function killGroup(r: Running): Promise<void> {
  killGroupSync(r.pid, 'SIGKILL');
  if (!(await waitExit(r, 10_000))) throw new Error(`pid ${r.pid} did not exit after SIGKILL`);
  await waitFor(() => groupMembers(r.pid).length === 0, {
    timeoutMs: 10_000,
    intervalMs: 20,
    what: `process group ${r.pid} to die`,
  });
  liveGroups.delete(r.pid);
}

/** Send `signal` to the leader; if it has not exited within `graceMs`, SIGKILL the group. Always reaps. */
export async function terminate(r: Running, signal: NodeJS.Signals, graceMs: number): Promise<void> {
  if (!r.exit) {
    try {
      process.kill(r.pid, signal);
    } catch {
      // already gone
    }
    await waitExit(r, graceMs);
  }
  // Also covers stray members (e.g. postgres backends) that survived the leader.
  await killGroup(r);
}

/** Last `maxLines` lines of a log file (or a note if unreadable). */
export function logTail(path: string, maxLines = 40): string {
  try {
    const size = statSync(path).size;
    const len = Math.min(size, 16_384);
    const buf = Buffer.alloc(len);
    const fd = openSync(path, 'r');
    try {
      readSync(fd, buf, 0, len, size - len);
    } finally {
      closeSync(fd);
    }
    return buf.toString('utf8').trimEnd().split('\n').slice(-maxLines).join('\n');
  } catch (err) {
    return `<log ${path} unreadable: ${(err as Error).message}>`;
  }
}

/** Read the log from byte `offset` on. */
export async function readLogFrom(path: string, offset: number): Promise<string> {
  const fh = await open(path, 'r');
  try {
    const { size } = await fh.stat();
    if (size <= offset) return '';
    const buf = Buffer.alloc(size - offset);
    await fh.read(buf, 0, buf.length, offset);
    return buf.toString('utf8');
  } finally {
    await fh.close();
  }
}

export function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** Resolve true if a TCP connection to host:port succeeds. */
export function tcpProbe(port: number, host = '127.0.0.1', timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect({ port, host });
    const finish = (ok: boolean) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(timeoutMs, () => finish(false));
    sock.once('connect', () => finish(true));
    sock.once('error', () => finish(false));
  });
}

/** A currently free TCP port on 127.0.0.1 (bind to 0, read, close — inherently racy; callers retry). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => {
        if (addr && typeof addr === 'object') resolve(addr.port);
        else reject(new Error('could not determine a free port'));
      });
    });
  });
}

/** Find an executable: each PATH entry, then the given fallbacks. */
export function findExecutable(name: string, fallbacks: readonly string[] = []): string | undefined {
  const dirs = (process.env.PATH ?? '').split(':').filter(Boolean);
  for (const candidate of [...dirs.map((d) => `${d}/${name}`), ...fallbacks]) {
    try {
      const st = statSync(candidate);
      if (st.isFile() && (st.mode & 0o111) !== 0) return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}
