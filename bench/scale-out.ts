/**
 * Scale-out on one machine: the same load through 1 or 2 ingest+fan-out processes and 1 or 2
 * persister processes, side by side in one run, medians of `--runs` (3).
 *
 * Each layout runs on a fresh database and log: a producer in this process sends `--events`
 * events (`--batch` per request, ACCEPTED, a window of unacked requests per stream) over
 * `--threads` threads, its streams spread round-robin over the ingest processes. It reports:
 *
 * - ingest events/s: events acked / (last ack − first send);
 * - stored events/s: events in Postgres / (the moment all are there − first send);
 * - the CPU of every process (broker processes, nats-server, Postgres, this producer) over the
 *   run, from /proc, in µs per event;
 * - each persister's share of the work: the events it stored (its `runstream_persister_batch_events`
 *   sum) and the partitions it held at the end.
 *
 *   node dist/bench/scale-out.js [--events 200000] [--threads 200] [--batch 100] [--runs 3]
 */
import { writeFileSync } from 'node:fs';
import pg from 'pg';
import { IngestClient } from '../src/client/ingest-client.js';
import { readProcStats } from '../test/helpers/proc.js';
import { type BrokerProcess, brokerConfig, spawnBroker, startServers } from '../test/helpers/stack.js';
import { median } from './lib/stats.js';

interface Args {
  readonly events: number;
  readonly threads: number;
  readonly batch: number;
  readonly runs: number;
  readonly window: number;
  readonly streams: number;
}

interface Layout {
  readonly name: string;
  readonly ingest: number;
  readonly persisters: number;
}

const LAYOUTS: readonly Layout[] = [
  { name: '1 ingest, 1 persister', ingest: 1, persisters: 1 },
  { name: '1 ingest, 2 persisters', ingest: 1, persisters: 2 },
  { name: '2 ingest, 1 persister', ingest: 2, persisters: 1 },
  { name: '2 ingest, 2 persisters', ingest: 2, persisters: 2 },
];

interface RunResult {
  readonly ingestPerS: number;
  readonly storedPerS: number;
  /** µs of CPU per event: each broker process, and the rest. */
  readonly cpu: Record<string, number>;
  /** Per persister: events it stored (duplicates included) and partitions held at the end. */
  readonly shares: { readonly events: number; readonly partitions: number }[];
}

function parseArgs(argv: readonly string[]): Args {
  const get = (name: string, fallback: number): number => {
    const i = argv.indexOf(`--${name}`);
    if (i < 0) return fallback;
    const v = Number(argv[i + 1]);
    if (!Number.isInteger(v) || v < 1) throw new Error(`--${name}: must be a positive integer`);
    return v;
  };
  return {
    events: get('events', 200_000),
    threads: get('threads', 200),
    batch: get('batch', 100),
    runs: get('runs', 3),
    window: get('window', 8),
    streams: get('streams', 8),
  };
}

/** utime + stime per process, in ms (clock ticks of 10 ms), and the pids by command name. */
function cpuByPid(): { readonly ms: Map<number, number>; readonly byComm: Map<string, number[]> } {
  const ms = new Map<number, number>();
  const byComm = new Map<string, number[]>();
  for (const p of readProcStats()) {
    ms.set(p.pid, (Number(p.fields[11]) + Number(p.fields[12])) * 10);
    byComm.set(p.comm, [...(byComm.get(p.comm) ?? []), p.pid]);
  }
  return { ms, byComm };
}

async function metric(httpPort: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${httpPort}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : 0;
}

async function runLayout(
  servers: Awaited<ReturnType<typeof startServers>>,
  layout: Layout,
  a: Args,
): Promise<RunResult> {
  const databaseUrl = await servers.pg.createDatabase();
  const config = brokerConfig(servers, { databaseUrl });
  const fronts: BrokerProcess[] = [];
  const persisters: BrokerProcess[] = [];
  try {
    for (let i = 0; i < layout.ingest; i++)
      fronts.push(await spawnBroker(config, { RS_ROLES: 'ingest,fanout' }));
    for (let i = 0; i < layout.persisters; i++)
      persisters.push(await spawnBroker(config, { RS_ROLES: 'persister' }));
    // Partitions divided before the clock starts.
    const deadline = Date.now() + 30_000;
    for (;;) {
      const held = await Promise.all(
        persisters.map((p) => metric(p.httpPort, 'runstream_persister_partitions')),
      );
      const even = Math.ceil(config.partitions / persisters.length);
      if (held.every((h) => h >= config.partitions / persisters.length - 1 && h <= even)) break;
      if (Date.now() > deadline) throw new Error(`partitions not divided: ${held.join(', ')}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const clients = fronts.map((f) => new IngestClient(`127.0.0.1:${f.grpcPort}`));
    const streams = Array.from({ length: a.streams }, (_, i) =>
      (clients[i % clients.length] as IngestClient).openStream(),
    );
    const threads = Array.from({ length: a.threads }, (_, i) => `so-${i}`);
    const perThread = Math.ceil(a.events / a.threads);
    // Requests built before the clock starts: thread t's requests go on stream t % streams, in order.
    const queues: { thread: string; events: ReturnType<typeof makeEvents> }[][] = streams.map(() => []);
    threads.forEach((thread, t) => {
      for (let from = 0; from < perThread; from += a.batch) {
        queues[t % streams.length]?.push({
          thread,
          events: makeEvents(thread, from, Math.min(a.batch, perThread - from)),
        });
      }
    });
    const total = threads.length * perThread;
    const { byComm } = cpuByPid();
    const cpuPids: Record<string, number[]> = {
      nats: byComm.get('nats-server') ?? [],
      postgres: byComm.get('postgres') ?? [],
      producer: [process.pid],
    };
    fronts.forEach((f, i) => {
      cpuPids[`ingest ${i + 1}`] = [f.child.pid as number];
    });
    persisters.forEach((p, i) => {
      cpuPids[`persister ${i + 1}`] = [p.child.pid as number];
    });
    const cpuAt = () => cpuByPid().ms;
    const before = cpuAt();
    const started = performance.now();
    let acked = 0;
    let lastAck = started;
    await Promise.all(
      streams.map(async (stream, s) => {
        const q = queues[s] ?? [];
        const inflight: Promise<unknown>[] = [];
        for (const req of q) {
          if (inflight.length >= a.window) await inflight.shift();
          inflight.push(
            stream.send(req.events, 'ACCEPTED').then((acks) => {
              acked += acks.length;
              lastAck = performance.now();
            }),
          );
        }
        await Promise.all(inflight);
        await stream.end();
      }),
    );
    let storedAt = performance.now();
    for (;;) {
      const n = await countIn(databaseUrl);
      storedAt = performance.now();
      if (n >= total) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const after = cpuAt();
    const shares = await Promise.all(
      persisters.map(async (p) => ({
        events: await metric(p.httpPort, 'runstream_persister_batch_events_sum'),
        partitions: await metric(p.httpPort, 'runstream_persister_partitions'),
      })),
    );
    for (const c of clients) c.close();
    const cpu: Record<string, number> = {};
    // Per process, what it used between the two readings (a Postgres backend gone by the second counts 0).
    for (const [k, pids] of Object.entries(cpuPids)) {
      const used = pids.reduce((sum, pid) => {
        const end = after.get(pid);
        return end === undefined ? sum : sum + end - (before.get(pid) ?? 0);
      }, 0);
      cpu[k] = Math.round(((used * 1000) / total) * 10) / 10;
    }
    return {
      ingestPerS: Math.round((acked / (lastAck - started)) * 1000),
      storedPerS: Math.round((total / (storedAt - started)) * 1000),
      cpu,
      shares,
    };
  } finally {
    for (const b of [...fronts, ...persisters]) await b.stop().catch(() => undefined);
  }
}

async function countIn(databaseUrl: string): Promise<number> {
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    const { rows } = await c.query<{ n: string }>('SELECT count(*) AS n FROM run_events');
    return Number(rows[0]?.n ?? 0);
  } finally {
    await c.end();
  }
}

function makeEvents(thread: string, from: number, n: number) {
  return Array.from({ length: n }, (_, k) => ({
    thread_id: thread,
    run_id: 'r',
    event_id: `e${from + k}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE' as const,
    content_json: JSON.stringify({ content: `token ${from + k} of a streamed answer` }),
  }));
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  process.setMaxListeners(64); // one exit listener per broker process spawned
  await using servers = await startServers();
  const results = new Map<string, RunResult[]>();
  for (let run = 0; run < a.runs; run++) {
    for (const layout of LAYOUTS) {
      const r = await runLayout(servers, layout, a);
      results.set(layout.name, [...(results.get(layout.name) ?? []), r]);
      process.stderr.write(
        `run ${run + 1} ${layout.name}: ingest ${r.ingestPerS}/s, stored ${r.storedPerS}/s, shares ${r.shares
          .map((s) => `${s.events} ev/${s.partitions} p`)
          .join(' | ')}\n`,
      );
    }
  }
  const base = median((results.get(LAYOUTS[0]?.name as string) ?? []).map((r) => r.storedPerS));
  const lines = [
    `scale-out: ${a.events} events, ${a.batch}/request, ${a.threads} threads, ${a.streams} streams × window ${a.window}, ACCEPTED; medians of ${a.runs}`,
    '',
    '| layout | ingest ev/s | stored ev/s | × 1+1 | µs CPU/event by process | persister shares (events / partitions) |',
    '|---|--:|--:|--:|---|---|',
  ];
  for (const layout of LAYOUTS) {
    const rs = results.get(layout.name) ?? [];
    const stored = median(rs.map((r) => r.storedPerS));
    const keys = Object.keys(rs[0]?.cpu ?? {});
    const cpu = keys.map((k) => `${k} ${median(rs.map((r) => r.cpu[k] ?? 0))}`).join(', ');
    const last = rs[rs.length - 1];
    const shares = (last?.shares ?? []).map((s) => `${Math.round(s.events)} / ${s.partitions}`).join(' · ');
    lines.push(
      `| ${layout.name} | ${median(rs.map((r) => r.ingestPerS))} | ${stored} | ${(stored / base).toFixed(2)} | ${cpu} | ${shares} |`,
    );
  }
  const out = lines.join('\n');
  process.stdout.write(`${out}\n`);
  const file = `bench/results/${new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19)}Z-scale-out.json`;
  writeFileSync(file, JSON.stringify({ args: a, results: Object.fromEntries(results) }, null, 2));
  process.stderr.write(`wrote ${file}\n`);
}

await main();
