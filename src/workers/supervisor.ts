/**
 * The primary of a host of workers (`RS_WORKERS` > 1): forks the workers of the
 * {@link workerPlan} with node:cluster, restarts one that dies (with backoff, logged),
 * answers every worker's `/metrics` scrape with the whole host's metrics, and at shutdown
 * drains the workers that serve the ports before the persister, so the events they
 * accepted meanwhile are stored and their `PERSISTED` calls answered.
 *
 * The primary itself connects to nothing (no NATS, no Postgres, no port: node:cluster holds
 * the listening sockets here and hands each accepted connection to a worker in turn), so a
 * dependency's failure never takes it down with the workers it supervises.
 */
import cluster, { type Worker } from 'node:cluster';
import { Counter, Gauge, Registry } from 'prom-client';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { aggregateMetrics } from './aggregate.js';
import { isToPrimary, type ToWorker, type WorkerMetrics } from './messages.js';
import { PERSISTER_SLOT, type Slot, WORKER_FLAG, type WorkerPlan, workerPlan } from './plan.js';

/** First wait before a dead worker is forked again; it doubles up to the maximum. */
export const WORKER_RESTART_MIN_MS = 250;
export const WORKER_RESTART_MAX_MS = 10_000;
/** A worker up this long is healthy again: its next restart waits the minimum. */
export const WORKER_STABLE_MS = 30_000;
/** A worker that does not send its metrics within this is left out of that scrape. */
export const WORKER_METRICS_TIMEOUT_MS = 3_000;
/** Once the serving workers are gone, the persister gets this long to stop before it is killed. */
export const PERSISTER_STOP_MS = 5_000;

export type SupervisorState = 'STARTING' | 'RUNNING' | 'DRAINING' | 'STOPPED' | 'FAILED';

export interface SupervisorOptions {
  readonly config: Config;
  readonly log: Logger;
  /** The module each worker runs (main.js: it sees it is a worker and runs {@link WorkerPlan}). */
  readonly exec: string;
}

interface SlotState {
  readonly plan: WorkerPlan;
  worker: Worker | undefined;
  started: boolean;
  startedAt: number;
  restartDelayMs: number;
  restartTimer: NodeJS.Timeout | undefined;
}

/** How long a whole shutdown can take at most: the serving workers' bound, then the persister's. */
export function supervisorShutdownBoundMs(config: Pick<Config, 'shutdownGraceMs'>): number {
  return config.shutdownGraceMs + 5_000 + PERSISTER_STOP_MS;
}

export class Supervisor {
  #state: SupervisorState = 'STARTING';
  readonly #o: SupervisorOptions;
  readonly #slots = new Map<Slot, SlotState>();
  readonly #registry = new Registry();
  readonly #restarts: Counter<'worker'>;
  #collectId = 0;
  readonly #collecting = new Map<number, { pending: Set<number>; got: WorkerMetrics[]; done: () => void }>();
  #started: { resolve: () => void; reject: (err: Error) => void } | undefined;
  #closing: Promise<void> | undefined;
  /** The shared ports, as the serving workers report them (they are the same for every worker). */
  #ports = { grpcPort: 0, httpPort: 0 };

  constructor(o: SupervisorOptions) {
    this.#o = o;
    for (const plan of workerPlan(o.config)) {
      this.#slots.set(plan.slot, {
        plan,
        worker: undefined,
        started: false,
        startedAt: 0,
        restartDelayMs: WORKER_RESTART_MIN_MS,
        restartTimer: undefined,
      });
    }
    const registers = [this.#registry];
    this.#restarts = new Counter({
      name: 'runstream_worker_restarts_total',
      help: 'Workers forked again after they died, by worker (1…N serve the ports; persister)',
      labelNames: ['worker'],
      registers,
    });
    const slots = this.#slots;
    new Gauge({
      name: 'runstream_workers',
      help: 'Workers up (started and not exited) on this host',
      registers,
      collect() {
        this.set([...slots.values()].filter((s) => s.started).length);
      },
    });
    for (const slot of this.#slots.keys()) this.#restarts.inc({ worker: slot }, 0);
  }

  get state(): SupervisorState {
    return this.#state;
  }

  /** Forks every worker; resolves once each has started its broker, rejects if one dies first. */
  async start(): Promise<void> {
    cluster.on('message', (worker, message) => this.#onMessage(worker, message));
    cluster.on('exit', (worker, code, signal) => this.#onExit(worker, code, signal));
    const started = new Promise<void>((resolve, reject) => {
      this.#started = { resolve, reject };
    });
    for (const s of this.#slots.values()) this.#fork(s);
    try {
      await started;
    } catch (err) {
      this.#state = 'FAILED';
      await this.#stopAll();
      throw err;
    }
    this.#state = 'RUNNING';
    const workers = [...this.#slots.values()].map((s) => ({
      worker: s.plan.slot,
      pid: s.worker?.process.pid,
      roles: [...s.plan.roles],
    }));
    this.#o.log.info({ workers, ...this.#ports }, 'workers started');
  }

  /** Drains the serving workers, then the persister; idempotent. */
  close(): Promise<void> {
    this.#closing ??= this.#drain();
    return this.#closing;
  }

  /** Ends every worker at once (a second signal). */
  kill(): void {
    for (const s of this.#slots.values()) s.worker?.process.kill('SIGKILL');
  }

  #fork(s: SlotState): void {
    s.restartTimer = undefined;
    // exec and args apply to the forks that follow: each worker learns its slot from them.
    cluster.setupPrimary({ exec: this.#o.exec, args: [`${WORKER_FLAG}${s.plan.slot}`] });
    s.worker = cluster.fork();
    s.started = false;
  }

  #slotOf(worker: Worker): SlotState | undefined {
    for (const s of this.#slots.values()) if (s.worker === worker) return s;
    return undefined;
  }

  #onMessage(worker: Worker, message: unknown): void {
    if (!isToPrimary(message)) return;
    const s = this.#slotOf(worker);
    if (s === undefined) return;
    switch (message.rs) {
      case 'started': {
        s.started = true;
        s.startedAt = performance.now();
        if (s.plan.listen) this.#ports = { grpcPort: message.grpcPort, httpPort: message.httpPort };
        if (this.#state === 'STARTING') {
          if ([...this.#slots.values()].every((x) => x.started)) this.#started?.resolve();
        } else {
          this.#o.log.info({ worker: s.plan.slot, workerPid: worker.process.pid }, 'worker started');
        }
        return;
      }
      case 'scrape':
        void this.#scrape().then(
          (r) => this.#send(worker, { rs: 'scrape-result', id: message.id, ...r }),
          (err: unknown) =>
            this.#send(worker, { rs: 'scrape-result', id: message.id, error: (err as Error).message }),
        );
        return;
      case 'collected': {
        const c = this.#collecting.get(message.id);
        if (c === undefined || !c.pending.delete(worker.id)) return;
        c.got.push(message.metrics);
        if (c.pending.size === 0) c.done();
        return;
      }
    }
  }

  #onExit(worker: Worker, code: number | null, signal: string | null): void {
    const s = this.#slotOf(worker);
    if (s === undefined) return;
    for (const c of this.#collecting.values())
      if (c.pending.delete(worker.id) && c.pending.size === 0) c.done();
    const wasStarted = s.started;
    s.worker = undefined;
    s.started = false;
    const fields = { worker: s.plan.slot, workerPid: worker.process.pid, code, signal };
    if (this.#state === 'DRAINING' || this.#state === 'STOPPED' || this.#state === 'FAILED') {
      this.#o.log.info(fields, 'worker stopped');
      return;
    }
    if (this.#state === 'STARTING' && !wasStarted) {
      // As a single process that cannot start exits 1: let the host's supervisor decide.
      this.#o.log.error(fields, 'worker exited before it started');
      this.#started?.reject(
        new Error(`worker ${s.plan.slot} exited before it started (code ${code}, signal ${signal})`),
      );
      return;
    }
    if (wasStarted && performance.now() - s.startedAt >= WORKER_STABLE_MS)
      s.restartDelayMs = WORKER_RESTART_MIN_MS;
    const delayMs = s.restartDelayMs;
    s.restartDelayMs = Math.min(WORKER_RESTART_MAX_MS, delayMs * 2);
    this.#restarts.inc({ worker: s.plan.slot });
    this.#o.log.warn({ ...fields, restartInMs: delayMs }, 'worker exited; restarting');
    s.restartTimer = setTimeout(() => this.#fork(s), delayMs);
  }

  #send(worker: Worker, message: ToWorker): void {
    if (!worker.isConnected()) return;
    worker.send(message, (err: Error | null) => {
      if (err) this.#o.log.debug({ err: err.message, worker: worker.id }, 'could not message a worker');
    });
  }

  /** Every started worker's metrics (a worker that does not answer in time is left out), merged. */
  async #scrape(): Promise<{ contentType: string; body: string }> {
    const id = ++this.#collectId;
    const targets = [...this.#slots.values()].flatMap((s) => (s.started && s.worker ? [s.worker] : []));
    const got: WorkerMetrics[] = [];
    await new Promise<void>((resolve) => {
      const pending = new Set(targets.map((w) => w.id));
      const timer = setTimeout(() => done(), WORKER_METRICS_TIMEOUT_MS);
      const done = (): void => {
        clearTimeout(timer);
        this.#collecting.delete(id);
        resolve();
      };
      this.#collecting.set(id, { pending, got, done });
      if (pending.size === 0) return done();
      for (const w of targets) this.#send(w, { rs: 'collect', id });
    });
    return aggregateMetrics(got, this.#registry);
  }

  async #drain(): Promise<void> {
    if (this.#state === 'STOPPED') return;
    this.#state = 'DRAINING';
    for (const s of this.#slots.values()) {
      clearTimeout(s.restartTimer);
      s.restartTimer = undefined;
    }
    const serving = [...this.#slots.values()].filter((s) => s.plan.slot !== PERSISTER_SLOT);
    const persister = this.#slots.get(PERSISTER_SLOT);
    // Workers end themselves at RS_SHUTDOWN_GRACE_MS + 5 s; this bound is a backstop for a stuck one.
    await this.#stop(serving, this.#o.config.shutdownGraceMs + 5_000);
    if (persister) await this.#stop([persister], PERSISTER_STOP_MS);
    this.#state = 'STOPPED';
  }

  async #stopAll(): Promise<void> {
    await this.#stop([...this.#slots.values()], this.#o.config.shutdownGraceMs + 5_000);
  }

  /** Asks these workers to shut down, waits for their exits, and kills the ones still there after `boundMs`. */
  async #stop(slots: readonly SlotState[], boundMs: number): Promise<void> {
    const workers = slots.flatMap((s) => (s.worker && !s.worker.isDead() ? [s.worker] : []));
    await Promise.all(
      workers.map(
        (w) =>
          new Promise<void>((resolve) => {
            if (w.isDead()) return resolve();
            const timer = setTimeout(() => {
              this.#o.log.error({ workerPid: w.process.pid }, 'worker did not stop in time: killing it');
              w.process.kill('SIGKILL');
            }, boundMs);
            w.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            this.#send(w, { rs: 'shutdown' });
          }),
      ),
    );
  }
}
