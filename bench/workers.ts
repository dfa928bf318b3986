/**
 * Ingest throughput with RS_WORKERS=1 against RS_WORKERS=2 on this host, at 1 and at 100
 * events per request: `node dist/bench/workers.js` (after `npm run build`).
 *
 * Each run is a fresh broker host (RS_ROLES=ingest,fanout, so the numbers are the ingest
 * path alone: validate, publish to JetStream, ACCEPTED ack) on a fresh stream, driven by
 * this process over CONNECTIONS gRPC connections of their own, each keeping IN_FLIGHT
 * Publish calls outstanding, for MEASURE_MS after WARMUP_MS. Runs are interleaved (the
 * repetition is the outer loop), so a drift in the machine's load falls on every variant
 * alike; the report is the median of REPEATS. The broker's CPU (every process of the
 * host, from /proc) is reported per event. A benchmark reports; it asserts nothing.
 *
 * Environment: RS_BENCH_REPEATS (3), RS_BENCH_MEASURE_MS (8000).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { IngestClient } from '../src/client/ingest-client.js';
import type { Event } from '../src/gen/runstream/v1/Event.js';
import { brokerConfig, randomName, spawnBroker, startServers } from '../test/helpers/stack.js';
import { spawnWorkerHost } from '../test/helpers/workers.js';

const REPEATS = Number(process.env.RS_BENCH_REPEATS ?? 3);
const MEASURE_MS = Number(process.env.RS_BENCH_MEASURE_MS ?? 8_000);
const WARMUP_MS = 2_000;
const BACKGROUND_SAMPLE_MS = 1_000;
const CONNECTIONS = 16;
const IN_FLIGHT = 4;
const BATCHES = [1, 100] as const;
const WORKERS = [1, 2] as const;
const CONTENT = JSON.stringify({ text: 'a token of about twenty bytes' });
const CLOCK_TICKS_PER_S = 100;

interface Run {
  readonly workers: number;
  readonly batch: number;
  readonly eventsPerS: number;
  readonly brokerCpuUsPerEvent: number;
  readonly brokerCores: number;
  /** The benchmark's own nats-server. */
  readonly natsCores: number;
  /** This process, the load generator. */
  readonly loadgenCores: number;
  /** Every process on the machine (nats-server, Postgres, other work too): 2 = both cores busy. */
  readonly machineCores: number;
  /** The machine's busy cores in the second before the load started (work that is not this bench). */
  readonly backgroundCores: number;
}

/** The benchmark's own nats-server: a child of this process (test/helpers starts it). */
function natsServerPid(): number | undefined {
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (comm === 'nats-server' && ppid === process.pid) return Number(name);
    } catch {
      // exited meanwhile
    }
  }
  return undefined;
}

/** Busy CPU seconds of the whole machine so far (/proc/stat: all but idle and iowait). */
function machineBusySeconds(): number {
  const f = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '')
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return (total - (f[3] ?? 0) - (f[4] ?? 0)) / CLOCK_TICKS_PER_S;
}

/** user + system CPU seconds of these processes so far (/proc/<pid>/stat). */
function cpuSeconds(pids: readonly number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(f[11]) + Number(f[12]);
    } catch {
      // exited
    }
  }
  return ticks / CLOCK_TICKS_PER_S;
}

function event(thread: string, i: number): Event {
  return {
    thread_id: thread,
    run_id: 'run-1',
    event_id: `e${i}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: CONTENT,
  };
}

async function drive(
  grpcTarget: string,
  batch: number,
  pids: readonly number[],
  natsPid: number | undefined,
): Promise<Omit<Run, 'workers' | 'batch'>> {
  const idle0 = machineBusySeconds();
  await sleep(BACKGROUND_SAMPLE_MS);
  const backgroundCores = (machineBusySeconds() - idle0) / (BACKGROUND_SAMPLE_MS / 1000);
  const clients = Array.from(
    { length: CONNECTIONS },
    () => new IngestClient(grpcTarget, { ownConnection: true }),
  );
  let counting = false;
  let stopped = false;
  let acked = 0;
  const loops = clients.flatMap((client, c) =>
    Array.from({ length: IN_FLIGHT }, async (_, k) => {
      const thread = randomName(`b${c}-${k}-`);
      let i = 0;
      while (!stopped) {
        const events = Array.from({ length: batch }, () => event(thread, i++));
        await client.publish(events, 'ACCEPTED');
        if (counting) acked += batch;
      }
    }),
  );
  await sleep(WARMUP_MS);
  const cpu0 = cpuSeconds(pids);
  const nats0 = cpuSeconds(natsPid === undefined ? [] : [natsPid]);
  const own0 = process.cpuUsage();
  const machine0 = machineBusySeconds();
  const t0 = performance.now();
  counting = true;
  await sleep(MEASURE_MS);
  counting = false;
  const elapsedS = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds(pids) - cpu0;
  const nats = cpuSeconds(natsPid === undefined ? [] : [natsPid]) - nats0;
  const own = process.cpuUsage(own0);
  const machine = machineBusySeconds() - machine0;
  stopped = true;
  await Promise.all(loops);
  for (const c of clients) c.close();
  return {
    eventsPerS: acked / elapsedS,
    brokerCpuUsPerEvent: (cpu / acked) * 1e6,
    brokerCores: cpu / elapsedS,
    natsCores: nats / elapsedS,
    loadgenCores: (own.user + own.system) / 1e6 / elapsedS,
    machineCores: machine / elapsedS,
    backgroundCores,
  };
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? Number.NaN;
}

async function main(): Promise<void> {
  // Each broker host spawned registers an exit hook (test/helpers): 12 runs pass Node's default of 10.
  process.setMaxListeners(64);
  await using servers = await startServers({ own: true });
  const runs: Run[] = [];
  const natsPid = natsServerPid();
  for (let rep = 1; rep <= REPEATS; rep++) {
    for (const workers of WORKERS) {
      for (const batch of BATCHES) {
        const config = brokerConfig(servers, {
          streamName: randomName('BENCH_'),
          subjectPrefix: randomName('bw'),
        });
        const env = { RS_ROLES: 'ingest,fanout' };
        let grpcTarget: string;
        let pids: number[];
        let stop: () => Promise<void>;
        if (workers === 1) {
          const b = await spawnBroker(config, env);
          grpcTarget = `127.0.0.1:${b.grpcPort}`;
          pids = b.child.pid === undefined ? [] : [b.child.pid];
          stop = () => b.stop();
        } else {
          const h = await spawnWorkerHost(config, workers, env);
          grpcTarget = `127.0.0.1:${h.grpcPort}`;
          pids = [...(h.child.pid === undefined ? [] : [h.child.pid]), ...h.servingPids()];
          stop = async () => {
            h.child.kill('SIGTERM');
            await h.exited;
          };
        }
        const r = await drive(grpcTarget, batch, pids, natsPid);
        await stop();
        runs.push({ workers, batch, ...r });
        process.stdout.write(
          `run ${rep}/${REPEATS} RS_WORKERS=${workers} ${batch} ev/req: ${Math.round(r.eventsPerS)} ev/s, ` +
            `broker ${r.brokerCpuUsPerEvent.toFixed(1)} µs CPU/event, cores: broker ${r.brokerCores.toFixed(2)}, ` +
            `nats-server ${r.natsCores.toFixed(2)}, load generator ${r.loadgenCores.toFixed(2)}, machine ${r.machineCores.toFixed(2)} ` +
            `(${r.backgroundCores.toFixed(2)} before)\n`,
        );
      }
    }
  }
  process.stdout.write(
    `\nmedians of ${REPEATS} (${CONNECTIONS} connections × ${IN_FLIGHT} in flight, ${MEASURE_MS} ms each)\n`,
  );
  process.stdout.write(
    '| events/request | RS_WORKERS=1 ev/s | RS_WORKERS=2 ev/s | 2 vs 1 | broker CPU µs/event (1 / 2) | broker cores (1 / 2) | nats-server cores (1 / 2) | load generator cores (1 / 2) | machine cores busy (1 / 2) | busy before the run (1 / 2) |\n',
  );
  process.stdout.write('|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n');
  for (const batch of BATCHES) {
    const of = (w: number) => runs.filter((r) => r.batch === batch && r.workers === w);
    const m = (w: number, k: keyof Run) => median(of(w).map((r) => r[k] as number));
    const one = m(1, 'eventsPerS');
    const two = m(2, 'eventsPerS');
    process.stdout.write(
      `| ${batch} | ${Math.round(one)} | ${Math.round(two)} | ${(two / one).toFixed(2)}× | ` +
        `${m(1, 'brokerCpuUsPerEvent').toFixed(1)} / ${m(2, 'brokerCpuUsPerEvent').toFixed(1)} | ` +
        `${m(1, 'brokerCores').toFixed(2)} / ${m(2, 'brokerCores').toFixed(2)} | ` +
        `${m(1, 'natsCores').toFixed(2)} / ${m(2, 'natsCores').toFixed(2)} | ` +
        `${m(1, 'loadgenCores').toFixed(2)} / ${m(2, 'loadgenCores').toFixed(2)} | ` +
        `${m(1, 'machineCores').toFixed(2)} / ${m(2, 'machineCores').toFixed(2)} | ` +
        `${m(1, 'backgroundCores').toFixed(2)} / ${m(2, 'backgroundCores').toFixed(2)} |\n`,
    );
  }
  process.stdout.write(`\nall runs: ${JSON.stringify(runs)}\n`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
