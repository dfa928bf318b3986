/**
 * Which worker processes a host runs for a config, and what each runs: `RS_WORKERS`
 * workers with the ingest and fan-out roles on the shared ports, and, when the persister
 * role is configured, one more worker with it alone (one persister per host, whatever the
 * worker count: persisters share the log's partitions by lease, so more of them are more
 * processes with RS_ROLES=persister, here or on other hosts, not more workers).
 */
import type { Config, Role } from '../config.js';

/** A worker's place in the plan: `1`…`N` serve the ports; `persister` runs the persister. */
export type Slot = string;

export const PERSISTER_SLOT: Slot = 'persister';

export interface WorkerPlan {
  readonly slot: Slot;
  readonly roles: ReadonlySet<Role>;
  /** Opens the gRPC and HTTP ports (node:cluster shares them among the workers that do). */
  readonly listen: boolean;
}

export function workerPlan(config: Pick<Config, 'workers' | 'roles'>): WorkerPlan[] {
  const serving = new Set([...config.roles].filter((r) => r !== 'persister'));
  const plan: WorkerPlan[] = [];
  if (serving.size > 0) {
    for (let i = 1; i <= config.workers; i++) plan.push({ slot: String(i), roles: serving, listen: true });
  }
  if (config.roles.has('persister')) {
    plan.push({ slot: PERSISTER_SLOT, roles: new Set(['persister']), listen: false });
  }
  return plan;
}

/** The command-line flag that tells a forked process which slot it is. */
export const WORKER_FLAG = '--runstream-worker=';

/** The slot named by this process's arguments, if it is a worker. */
export function slotFromArgv(argv: readonly string[]): Slot | undefined {
  return argv.find((a) => a.startsWith(WORKER_FLAG))?.slice(WORKER_FLAG.length);
}
