/**
 * What nats-server spends per message as the number of threads grows, on the subjects the broker
 * uses: `node dist/bench/nats-subjects.js [--messages=N] [--threads=a,b] [--runs=R]`.
 *
 * Scenario 7 sends the same events over 10,000 threads as over 100, and nats-server spends about
 * twice the CPU per event there. Each thread is one subject in each of the broker's paths, so this
 * sends the same messages, round-robin over each thread count, through each path alone:
 *
 *  - js-publish  JetStream publishes to `<p>.log.<part>.<thread>.<run>` (Nats-Msg-Id set, 256 in
 *                flight), into a file-storage stream of `<p>.log.>`: ingest's publish;
 *  - js-read     ordered consumers of every partition (`<p>.log.<part>.*.*`, 32 of them) reading
 *                those messages back, as persisters do;
 *  - core-subs   core publishes to `<p>.ev.<thread>`, read by one connection holding a subscription
 *                per thread: announcements to fan-out;
 *  - core-wild   the same read by one `<p>.ev.*` subscription: what one subscription would cost.
 *
 * Each (run, thread count) has a nats-server of its own; thread counts alternate within a run.
 * nats-server's CPU is its threads' schedstat; reported per message, medians over runs, with the
 * ratio to the smallest thread count. Writes bench/results/<date>-nats-subjects.json.
 */
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { parseArgs } from 'node:util';
import {
  DeliverPolicy,
  DiscardPolicy,
  type JetStreamClient,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
} from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { DEFAULT_PERSIST_BATCH_MAX } from '../src/config.js';
import { DEFAULT_PARTITIONS, partitionOf } from '../src/domain/partition.js';
import { PULL_EXPIRES_MS } from '../src/persist/persister.js';
import { findNatsServerBinary, startNatsServer } from '../test/helpers/nats-server.js';
import { natsServerPid, schedstatNs, waitForQuiet } from './lib/cpu.js';
import { fmt, machineInfo, writeResults } from './lib/report.js';
import { median } from './lib/stats.js';

const { values: args } = parseArgs({
  options: {
    messages: { type: 'string', default: '30000' },
    threads: { type: 'string', default: '100,10000' },
    runs: { type: 'string', default: '3' },
  },
});
const MESSAGES = Number(args.messages);
const THREAD_COUNTS = String(args.threads).split(',').map(Number);
const RUNS = Number(args.runs);
/** A log message of 10 events, as scenario 7's requests make. */
const BODY = new Uint8Array(1_500).fill(97);
const PUBLISH_WINDOW = 256;
const PREFIX = 'ns';

type Phase = 'js-publish' | 'js-read' | 'core-subs' | 'core-wild';
const PHASES: readonly Phase[] = ['js-publish', 'js-read', 'core-subs', 'core-wild'];

interface Thread {
  readonly id: string;
  readonly partition: number;
}

function threadsOf(n: number): Thread[] {
  return Array.from({ length: n }, (_, i) => {
    const id = `t-${String(i).padStart(6, '0')}`;
    return { id, partition: partitionOf(id, DEFAULT_PARTITIONS) };
  });
}

/** nats-server CPU ns per message of what `work` sends. */
async function measured(pid: number, work: () => Promise<void>): Promise<number> {
  await waitForQuiet(0.3, 5_000);
  const before = schedstatNs(pid);
  await work();
  return (schedstatNs(pid) - before) / MESSAGES;
}

async function jsPublish(js: JetStreamClient, threads: readonly Thread[]): Promise<void> {
  const inFlight = new Set<Promise<unknown>>();
  for (let i = 0; i < MESSAGES; i++) {
    while (inFlight.size >= PUBLISH_WINDOW) await Promise.race(inFlight);
    const t = threads[i % threads.length] as Thread;
    const p = js
      .publish(`${PREFIX}.log.${t.partition}.${t.id}.r1`, BODY, { msgID: `${t.id}:${i}` })
      .finally(() => inFlight.delete(p));
    inFlight.add(p);
  }
  await Promise.all(inFlight);
}

async function jsRead(js: JetStreamClient): Promise<void> {
  let left = MESSAGES;
  let done!: () => void;
  const all = new Promise<void>((resolve) => {
    done = resolve;
  });
  const readers = await Promise.all(
    Array.from({ length: DEFAULT_PARTITIONS }, async (_, p) => {
      const consumer = await js.consumers.get('NS_LOG', {
        filter_subjects: `${PREFIX}.log.${p}.*.*`,
        deliver_policy: DeliverPolicy.All,
      });
      return consumer.consume({ max_messages: DEFAULT_PERSIST_BATCH_MAX, expires: PULL_EXPIRES_MS });
    }),
  );
  for (const r of readers) {
    void (async () => {
      for await (const _ of r) if (--left === 0) done();
    })();
  }
  await all;
  await Promise.all(readers.map((r) => r.close()));
}

/**
 * Core publishes round-robin over the threads' subjects, read by `sub` (a connection of its own);
 * nats-server CPU ns per message, clocked once the subscriptions are in place (fan-out's are
 * made before events come).
 */
async function corePath(
  pid: number,
  pub: NatsConnection,
  sub: NatsConnection,
  threads: readonly Thread[],
  wildcard: boolean,
): Promise<number> {
  let left = MESSAGES;
  let done!: () => void;
  const all = new Promise<void>((resolve) => {
    done = resolve;
  });
  const callback = (): void => {
    if (--left === 0) done();
  };
  const subs = wildcard
    ? [sub.subscribe(`${PREFIX}.ev.*`, { callback })]
    : threads.map((t) => sub.subscribe(`${PREFIX}.ev.${t.id}`, { callback }));
  await sub.flush();
  const ns = await measured(pid, async () => {
    for (let i = 0; i < MESSAGES; i++) {
      pub.publish(`${PREFIX}.ev.${(threads[i % threads.length] as Thread).id}`, BODY);
      // Let the subscriber read as it goes, as the broker's would.
      if (i % 1_000 === 999) await pub.flush();
    }
    await all;
  });
  for (const s of subs) s.unsubscribe();
  await sub.flush();
  return ns;
}

async function runOnce(threadCount: number): Promise<Record<Phase, number>> {
  await using nats = await startNatsServer({ useEnv: false });
  const pid = natsServerPid();
  const nc = await connect({ servers: nats.url });
  const reader = await connect({ servers: nats.url });
  try {
    const threads = threadsOf(threadCount);
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({
      name: 'NS_LOG',
      subjects: [`${PREFIX}.log.>`],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      discard: DiscardPolicy.Old,
      num_replicas: 1,
    });
    const js = jetstream(nc);
    const out = {} as Record<Phase, number>;
    out['js-publish'] = await measured(pid, () => jsPublish(js, threads));
    out['js-read'] = await measured(pid, () => jsRead(js));
    out['core-subs'] = await corePath(pid, nc, reader, threads, false);
    out['core-wild'] = await corePath(pid, nc, reader, threads, true);
    return out;
  } finally {
    await reader.close();
    await nc.close();
  }
}

async function main(): Promise<void> {
  const loadStart = os.loadavg();
  const results: Record<number, Record<Phase, number[]>> = {};
  for (const n of THREAD_COUNTS)
    results[n] = { 'js-publish': [], 'js-read': [], 'core-subs': [], 'core-wild': [] };
  for (let r = 0; r < RUNS; r++) {
    const order = r % 2 === 0 ? THREAD_COUNTS : [...THREAD_COUNTS].reverse();
    for (const n of order) {
      const one = await runOnce(n);
      for (const ph of PHASES) results[n]?.[ph].push(one[ph]);
      process.stdout.write(
        `run ${r + 1}, ${n} threads: ${PHASES.map((ph) => `${ph} ${fmt(one[ph] / 1000, 1)} µs`).join(', ')}\n`,
      );
    }
  }
  const base = THREAD_COUNTS[0] as number;
  const lines = [
    `| path | ${THREAD_COUNTS.map((n) => `${n.toLocaleString('en-US')} threads, µs/msg`).join(' | ')} | ${THREAD_COUNTS.slice(
      1,
    )
      .map((n) => `${n.toLocaleString('en-US')} ÷ ${base.toLocaleString('en-US')}`)
      .join(' | ')} |`,
    `| --- | ${THREAD_COUNTS.map(() => '---:').join(' | ')} | ${THREAD_COUNTS.slice(1)
      .map(() => '---:')
      .join(' | ')} |`,
  ];
  for (const ph of PHASES) {
    const med = THREAD_COUNTS.map((n) => median(results[n]?.[ph] ?? []) / 1000);
    lines.push(
      `| ${ph} | ${med.map((m) => fmt(m, 2)).join(' | ')} | ${med
        .slice(1)
        .map((m) => `${fmt(m / (med[0] as number), 2)}×`)
        .join(' | ')} |`,
    );
  }
  process.stdout.write(
    `\n${MESSAGES.toLocaleString('en-US')} messages, medians of ${RUNS}:\n\n${lines.join('\n')}\n`,
  );
  const natsVersion = execFileSync(findNatsServerBinary(), ['--version'], { encoding: 'utf8' }).trim();
  const file = writeResults(new Date().toISOString().replace(/\.\d+Z$/, 'Z'), '-nats-subjects', {
    machine: machineInfo({ natsServer: natsVersion }, loadStart, os.loadavg()),
    messages: MESSAGES,
    threadCounts: THREAD_COUNTS,
    runs: RUNS,
    nsPerMessage: results,
    table: lines.join('\n'),
  });
  process.stdout.write(`\nresults: ${file}\n`);
}

await main();
