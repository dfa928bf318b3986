/**
 * CPU time per process role from the scheduler's own accounting (`/proc/<pid>/task/<tid>/schedstat`,
 * nanoseconds on the CPU), for measurements made of many short requests that bounce between
 * processes. The tick-sampled utime/stime that cpu.ts reads charges a whole 10 ms tick to whoever
 * runs when it fires, which is fine for seconds of steady work but unreliable for sub-millisecond
 * ping-pong between a client, a broker and Postgres. Roles as in cpu.ts: the broker processes
 * (and their children), nats-server, Postgres, and this process; only our own process tree.
 * Elsewhere than Linux it reports nothing.
 */
import { readdirSync, readFileSync } from 'node:fs';

export type OwnRole = 'broker' | 'nats' | 'postgres' | 'bench';
export type CpuNs = Record<OwnRole, number>;

function statOf(pid: string): { ppid: number; comm: string } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const close = stat.lastIndexOf(')');
    return {
      comm: stat.slice(stat.indexOf('(') + 1, close),
      ppid: Number(stat.slice(close + 2).split(' ')[1]),
    };
  } catch {
    return undefined; // exited meanwhile
  }
}

/** Nanoseconds every thread of the process has spent on a CPU (0 once it has exited). */
export function processNs(pid: number): number {
  let ns = 0;
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return 0;
  }
  for (const tid of tids) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // thread exited meanwhile
    }
  }
  return ns;
}

/**
 * CPU ns so far of every process of our tree that has a role, by pid. Per pid, because a process
 * that exits between two snapshots (pg-pool closes idle clients after 10 s, and their backends
 * exit) must not take its earlier CPU out of the difference.
 */
export interface SchedSnapshot {
  readonly procs: ReadonlyMap<number, { readonly role: OwnRole; readonly ns: number }>;
  /** Busy time of the whole machine (all CPUs; /proc/stat, 10 ms ticks), ns. */
  readonly machineBusyNs: number;
}

/** USER_HZ: the unit of /proc/stat (100 on every Linux this runs on). */
const TICK_NS = 10_000_000;

function machineBusyNs(): number {
  const f = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '')
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy (as in cpu.ts).
  return (f.reduce((a, b) => a + b, 0) - (f[3] ?? 0) - (f[4] ?? 0)) * TICK_NS;
}

/** `brokerPids` are the broker processes (their children count as broker too). */
export function schedSnapshot(brokerPids: readonly number[]): SchedSnapshot | undefined {
  if (process.platform !== 'linux') return undefined;
  const procs = new Map<number, { ppid: number; comm: string }>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const s = statOf(name);
    if (s) procs.set(Number(name), s);
  }
  const out = new Map<number, { role: OwnRole; ns: number }>();
  const machine = machineBusyNs();
  for (const pid of procs.keys()) {
    let role: OwnRole | undefined;
    let ours = false;
    for (let p = pid, hops = 0; p > 1 && hops < 64; hops++) {
      const proc = procs.get(p);
      if (!proc) break;
      if (brokerPids.includes(p)) role = 'broker';
      else if (role === undefined && proc.comm === 'nats-server') role = 'nats';
      else if (role === undefined && proc.comm === 'postgres') role = 'postgres';
      if (p === process.pid) {
        ours = true;
        break;
      }
      p = proc.ppid;
    }
    if (!ours) continue;
    role ??= pid === process.pid ? 'bench' : undefined;
    if (role) out.set(pid, { role, ns: processNs(pid) });
  }
  return { procs: out, machineBusyNs: machine };
}

/** What each process alive at the end used since the first snapshot (all of it, for one started in between). */
function ownNs(before: SchedSnapshot, after: SchedSnapshot): CpuNs {
  const ns: CpuNs = { broker: 0, nats: 0, postgres: 0, bench: 0 };
  for (const [pid, a] of after.procs) ns[a.role] += Math.max(0, a.ns - (before.procs.get(pid)?.ns ?? 0));
  return ns;
}

/**
 * Cores the rest of the machine used between two snapshots (cpu.ts's "other", but a process of
 * ours that exits in between does not move its whole past CPU into it).
 */
export function otherCores(
  before: SchedSnapshot | undefined,
  after: SchedSnapshot | undefined,
  wallMs: number,
): number | undefined {
  if (!before || !after || wallMs <= 0) return undefined;
  const own = Object.values(ownNs(before, after)).reduce((a, b) => a + b, 0);
  return Math.max(0, after.machineBusyNs - before.machineBusyNs - own) / 1e6 / wallMs;
}

/**
 * CPU per request between two snapshots, µs, per role: what each process alive at the end
 * used since the first snapshot (all of it, for one started in between).
 */
export function usPerRequest(
  before: SchedSnapshot | undefined,
  after: SchedSnapshot | undefined,
  requests: number,
): CpuNs | undefined {
  if (!before || !after || requests <= 0) return undefined;
  const ns = ownNs(before, after);
  const us = (r: OwnRole) => Math.round(ns[r] / 1000 / requests);
  return { broker: us('broker'), nats: us('nats'), postgres: us('postgres'), bench: us('bench') };
}
