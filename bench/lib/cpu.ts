/**
 * Where the CPU went during a measurement, per process role, from Linux /proc: the
 * broker, nats-server, Postgres (postmaster and every backend), the bench (this process
 * and its load-generator children: producers, subscribers), and everything else on the
 * machine ("other": concurrent jobs that make a 2-core box noisy). Elsewhere than Linux
 * it reports nothing.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { readProcStats } from '../../test/helpers/proc.js';

/** USER_HZ: the unit of utime/stime in /proc (100 on every Linux this runs on). */
const TICK_MS = 10;

export type Role = 'broker' | 'nats' | 'postgres' | 'bench' | 'other';
export type CpuMs = Record<Role, number>;

interface Proc {
  readonly ppid: number;
  readonly comm: string;
  readonly ticks: number;
}

function readProcs(): Map<number, Proc> {
  const procs = new Map<number, Proc>();
  for (const { pid, comm, fields: f } of readProcStats()) {
    // After "pid (comm) ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    procs.set(pid, { ppid: Number(f[1]), comm, ticks: Number(f[11]) + Number(f[12]) });
  }
  return procs;
}

/** Busy ticks of the whole machine (all CPUs), from the first line of /proc/stat. */
function machineBusyTicks(): number {
  const f = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '')
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
  return f.reduce((a, b) => a + b, 0) - (f[3] ?? 0) - (f[4] ?? 0);
}

/**
 * Cumulative CPU per role, in ms. `brokerPids` are the broker processes (their children count
 * as broker too); a baseline passes its bare server's pid, which stands in for the broker.
 */
export function cpuSnapshot(brokerPids: readonly number[]): CpuMs | undefined {
  if (process.platform !== 'linux') return undefined;
  const procs = readProcs();
  const roleOf = (pid: number): Role | undefined => {
    // Walk up to this process: only our own tree is attributed, by the nearest known ancestor.
    let role: Role | undefined;
    for (let p = pid, hops = 0; p > 1 && hops < 64; hops++) {
      const proc = procs.get(p);
      if (!proc) return undefined;
      if (brokerPids.includes(p)) role = 'broker';
      else if (role === undefined && proc.comm === 'nats-server') role = 'nats';
      else if (role === undefined && proc.comm === 'postgres') role = 'postgres';
      // Anything else of ours is the bench: this process and its load generators.
      if (p === process.pid) return role ?? 'bench';
      p = proc.ppid;
    }
    return undefined;
  };
  const out: CpuMs = { broker: 0, nats: 0, postgres: 0, bench: 0, other: 0 };
  let ours = 0;
  for (const [pid, proc] of procs) {
    const role = roleOf(pid);
    if (role === undefined) continue;
    out[role] += proc.ticks * TICK_MS;
    ours += proc.ticks * TICK_MS;
  }
  out.other = machineBusyTicks() * TICK_MS - ours;
  return out;
}

/** CPU used between two snapshots, as cores busy on average over `wallMs`. */
export function coresUsed(
  before: CpuMs | undefined,
  after: CpuMs | undefined,
  wallMs: number,
): CpuMs | undefined {
  if (!before || !after || wallMs <= 0) return undefined;
  const out = {} as CpuMs;
  for (const role of Object.keys(before) as Role[]) {
    out[role] = Math.max(0, after[role] - before[role]) / wallMs;
  }
  return out;
}

/**
 * Waits (at most `maxWaitMs`) for a second in which the rest of the machine used less
 * than `maxOtherCores`: on a shared 2-core box a concurrent build or test run would
 * otherwise land inside a measurement. Returns the last second's "other" cores.
 */
export async function waitForQuiet(maxOtherCores: number, maxWaitMs: number): Promise<number | undefined> {
  const until = performance.now() + maxWaitMs;
  let other: number | undefined;
  do {
    const before = cpuSnapshot([]);
    const t0 = performance.now();
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    other = coresUsed(before, cpuSnapshot([]), performance.now() - t0)?.other;
    if (other === undefined || other < maxOtherCores) return other;
  } while (performance.now() < until);
  return other;
}

/** CPU between two snapshots per event, in µs, per role ("other" is not ours and is left out). */
export function cpuPerEvent(
  before: CpuMs | undefined,
  after: CpuMs | undefined,
  events: number,
): Omit<CpuMs, 'other'> | undefined {
  if (!before || !after || events <= 0) return undefined;
  const us = (role: Role) => Math.round((Math.max(0, after[role] - before[role]) * 1000) / events);
  return { broker: us('broker'), nats: us('nats'), postgres: us('postgres'), bench: us('bench') };
}

/** The pid of the nats-server this process started (its parent chain reaches this process). */
export function natsServerPid(): number {
  const procs = readProcs();
  for (const [pid, proc] of procs) {
    if (proc.comm !== 'nats-server') continue;
    for (let q = pid, hops = 0; q > 1 && hops < 16; hops++) {
      if (q === process.pid) return pid;
      q = procs.get(q)?.ppid ?? 0;
    }
  }
  throw new Error('our nats-server process was not found in /proc');
}

/** CPU time of a process's threads from their schedstat, ns: finer than /proc/<pid>/stat's 10 ms ticks. */
export function schedstatNs(pid: number): number {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // the thread exited meanwhile
    }
  }
  return ns;
}
