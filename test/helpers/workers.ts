/**
 * A broker host of workers (`RS_WORKERS` > 1) as a child process: its JSON log lines kept,
 * its workers' pids read from them as they start and restart.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import type { Config } from '../../src/config.js';
import { MAIN_JS } from './stack.js';
import { waitFor } from './wait.js';

export interface LogLine {
  readonly msg: string;
  readonly pid: number;
  readonly worker?: string;
  readonly [k: string]: unknown;
}

export interface WorkerHost {
  readonly child: ChildProcess;
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly lines: LogLine[];
  /** The current pid of a worker (`1`…`N`, `persister`), from the latest start line. */
  pidOf(worker: string): number;
  /** Pids of the workers that serve the ports. */
  servingPids(): number[];
  /** Resolves with the exit of the primary. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export async function spawnWorkerHost(
  config: Config,
  workers: number,
  env: Record<string, string> = {},
  /** `detached`: in a process group of its own, so a test can signal the whole group. */
  opts: { detached?: boolean } = {},
): Promise<WorkerHost> {
  const child = spawn(process.execPath, [MAIN_JS], {
    env: {
      ...process.env,
      RS_WORKERS: String(workers),
      RS_HOST: '127.0.0.1',
      GRPC_PORT: String(config.grpcPort),
      HTTP_PORT: String(config.httpPort),
      NATS_URL: config.natsUrl,
      DATABASE_URL: config.databaseUrl,
      RS_STREAM: config.streamName,
      RS_SUBJECT_PREFIX: config.subjectPrefix,
      LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: opts.detached ?? false,
  });
  process.once('exit', () => child.kill('SIGKILL'));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const lines: LogLine[] = [];
  let rest = '';
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  child.stdout?.on('data', (d: Buffer) => {
    const parts = (rest + d.toString()).split('\n');
    rest = parts.pop() ?? '';
    for (const p of parts) {
      try {
        lines.push(JSON.parse(p) as LogLine);
      } catch {
        // not a log line
      }
    }
  });
  // Polls for the primary's line; ends at once, with its output, if the host exits first.
  const gaveUp = new AbortController();
  const died = exited.then((e) => {
    gaveUp.abort();
    return new Error(`the host exited with code ${e.code} before it started:\n${stderr}`);
  });
  const started = await waitFor(() => lines.find((l) => l.msg === 'workers started'), {
    timeoutMs: 60_000,
    what: 'workers started',
    signal: gaveUp.signal,
  }).catch(async (err: unknown) => {
    child.kill('SIGKILL');
    throw gaveUp.signal.aborted ? await died : err;
  });
  // The primary's lines: `workers started` names every first pid, `worker started` a restart's.
  const pidOf = (worker: string): number => {
    for (let i = lines.length - 1; i >= 0; i--) {
      const l = lines[i] as LogLine;
      if (l.msg === 'worker started' && l.worker === worker) return l.workerPid as number;
    }
    const first = (started.workers as { worker: string; pid: number }[]).find((w) => w.worker === worker);
    if (first === undefined) throw new Error(`no worker ${worker}`);
    return first.pid;
  };
  return {
    child,
    grpcPort: started.grpcPort as number,
    httpPort: started.httpPort as number,
    lines,
    pidOf,
    servingPids: () => Array.from({ length: workers }, (_, i) => pidOf(String(i + 1))),
    exited,
  };
}

/** The value of one series in a Prometheus text exposition (undefined if absent). */
export function metricValue(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}
