// The soak: 2,000 events/s (half ACCEPTED, half PERSISTED, 20 threads) for RS_SOAK_SECONDS
// (600 in `make test-faults`), a live subscriber on every thread, and a dependency fault
// at random every 30-70 s (NATS SIGTERM or SIGKILL restart, Postgres fast or immediate
// restart, pg_terminate_backend). At the end: 0 lost, 0 duplicated, 0 gaps, in order; what the
// broker holds after a full garbage collection (V8 heap in use plus Buffers, read through its
// inspector) within 10% of what it held before the first fault past 40% of the run; and its
// RSS within 25% (medians of 30 s windows: one sample lands anywhere on the garbage
// collector's sawtooth). Held memory is the leak check: RSS keeps what the allocator took at
// a fault's peak (the same code ended +1% on one machine and +14% on another), so at 10% it
// failed a run in three without a leak; its looser bound catches memory outside V8's count.
// The broker itself is not killed here: a new process would make the comparison meaningless;
// broker kills have their own rows.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { randomName } from '../helpers/stack.js';
import { type AckedEvent, checkThread } from './checker.js';
import {
  catchUp,
  FaultBroker,
  type FaultServers,
  LiveSubscriber,
  Load,
  recordRow,
  settleStored,
  startFaultServers,
} from './harness.js';

const SOAK_SECONDS = Number(process.env.RS_SOAK_SECONDS ?? 600);
const EVENTS_PER_SECOND = 2_000;
const THREADS = 20;
const WARM_MS = Math.min(90_000, SOAK_SECONDS * 150);
/** Held memory (after a full collection) may end this much above its start. */
const HELD_TOLERANCE = 0.1;
/** RSS may end this much above its start (the allocator keeps what peaks took). */
const RSS_TOLERANCE = 0.25;
/**
 * When the starting RSS is measured: the heap reaches its working size only after the load's
 * warm-up and the first faults' recoveries (some 180 s in: 128 MiB at 30 s, 142 or 135 at 90 s,
 * ~155 from 180 s to the end, in runs of the same code), so measured at the warm-up's end the
 * start fell anywhere on that climb and the check passed or failed by chance. From 40% of the
 * run, a leak still has the rest of it, and its faults, to show.
 */
const RSS_START_MS = Math.max(WARM_MS, SOAK_SECONDS * 400);
/** A soak shorter than this measures its warm-up, not a leak: it reports memory and does not assert on it. */
const RSS_CHECKED_FROM_SECONDS = 300;
/** RSS is a sawtooth (garbage collection): each end is the median of this long a window of samples. */
const RSS_WINDOW_MS = Math.min(30_000, WARM_MS / 2);
const RSS_SAMPLE_MS = 2_000;
/**
 * No fault in the last this-many ms, so the end is measured on a settled broker: after a NATS
 * restart the backlog's drain and the subscribers' catch-ups raise RSS for ~30 s (a soak whose
 * last fault came 43 s before the end measured that transient, 17% over, then fell back).
 */
const QUIET_END_MS = RSS_WINDOW_MS + Math.min(45_000, SOAK_SECONDS * 200);

/** What the broker holds after a full collection: the median of 3 readings 1 s apart (events in flight vary). */
async function heldNow(broker: FaultBroker): Promise<number> {
  const readings: number[] = [];
  for (let i = 0; i < 3; i++) {
    if (i > 0) await sleep(1_000);
    readings.push(await broker.heldAfterGcMiB());
  }
  return median(readings);
}

function median(values: readonly number[]): number {
  const v = [...values].sort((a, b) => a - b);
  return v.length === 0 ? 0 : ((v[(v.length - 1) >> 1] as number) + (v[v.length >> 1] as number)) / 2;
}

/** A small seeded generator (mulberry32), so a failing soak can be run again as it was. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FAULTS: Record<string, (s: FaultServers) => Promise<void>> = {
  'NATS SIGTERM restart': (s) => s.nats.restart(),
  'NATS SIGKILL restart': async (s) => {
    await s.nats.kill();
    await sleep(1_000);
    await s.nats.restart();
  },
  'Postgres -m fast': (s) => s.pg.restart('fast'),
  'Postgres -m immediate': (s) => s.pg.restart('immediate'),
  pg_terminate_backend: async (s) => {
    await s.db.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE application_name = 'runstream' AND pid <> pg_backend_pid()`,
    );
  },
};

test(`soak: ${EVENTS_PER_SECOND} events/s for ${SOAK_SECONDS} s with random dependency faults; held memory ends within 10%`, async () => {
  const seed = Number(process.env.RS_SOAK_SEED ?? Date.now() % 1_000_000);
  const rand = random(seed);
  const started = Date.now();
  await using servers = await startFaultServers();
  await using broker = await FaultBroker.start(servers, {}, { inspect: true });
  const threads = Array.from({ length: THREADS }, () => randomName('t-'));
  const live = new LiveSubscriber(broker.wsUrl, threads);
  await live.start();
  const half = EVENTS_PER_SECOND / 2;
  const loads = [
    new Load({
      target: broker.grpcTarget,
      threads: threads.slice(0, THREADS / 2),
      ack: 'ACCEPTED',
      eventsPerSecond: half,
    }),
    new Load({
      target: broker.grpcTarget,
      threads: threads.slice(THREADS / 2),
      ack: 'PERSISTED',
      eventsPerSecond: half,
    }),
  ];
  for (const l of loads) l.start();
  const injected: { name: string; at: number; clearedAt: number }[] = [];
  const samples: { at: number; mib: number }[] = [];
  const sampler = setInterval(() => samples.push({ at: Date.now(), mib: broker.rssMiB() }), RSS_SAMPLE_MS);
  let heldStart: number | undefined;
  let heldEnd: number | undefined;
  let rssEndAt = 0;
  let loadStopped = 0;
  try {
    await sleep(WARM_MS);
    const end = started + SOAK_SECONDS * 1000;
    let next = Date.now() + 10_000;
    while (next < end - QUIET_END_MS) {
      await sleep(next - Date.now());
      // Settled (the last fault is 30 s or more behind): the start of the held-memory check.
      if (heldStart === undefined && Date.now() >= started + RSS_START_MS) heldStart = await heldNow(broker);
      const names = Object.keys(FAULTS);
      const name = names[Math.floor(rand() * names.length)] as string;
      const at = Date.now();
      await (FAULTS[name] as (s: FaultServers) => Promise<void>)(servers);
      injected.push({ name, at: Math.round((at - started) / 1000), clearedAt: Date.now() });
      next = Date.now() + 30_000 + rand() * 40_000;
    }
    await sleep(Math.max(0, end - Date.now()));
    rssEndAt = Date.now(); // RSS before the collection the reading forces
    heldEnd = await heldNow(broker);
  } finally {
    clearInterval(sampler);
    loadStopped = Date.now();
    await Promise.all(loads.map((l) => l.stop()));
  }
  const startAt = started + RSS_START_MS;
  const rssStart = median(
    samples.filter((x) => x.at > startAt - RSS_WINDOW_MS && x.at <= startAt).map((x) => x.mib),
  );
  const endAt = rssEndAt || loadStopped;
  const rssEnd = median(
    samples.filter((x) => x.at > endAt - RSS_WINDOW_MS && x.at <= endAt).map((x) => x.mib),
  );
  const rssPeak = Math.max(...samples.map((x) => x.mib));
  const acked = new Map<string, Map<string, AckedEvent>>();
  for (const l of loads) for (const [t, m] of l.acked) acked.set(t, m);
  const stored = await settleStored(servers.db, acked, [live], 300_000);
  const caught = await catchUp(broker.wsUrl, threads);
  live.close();
  const reports = threads.map((t) =>
    checkThread({
      thread: t,
      acked: acked.get(t) as Map<string, AckedEvent>,
      stored: stored.get(t) ?? [],
      live: (live.delivered.get(t) ?? []).map((d) => d.ev),
      catchUp: caught.get(t) ?? [],
    }),
  );
  const ackBack = injected.map(({ clearedAt }) =>
    Math.min(...loads.map((l) => l.ackRecoveryMs(clearedAt) ?? Number.POSITIVE_INFINITY)),
  );
  const liveBack = injected.map(({ clearedAt }) =>
    Math.min(...loads.map((l) => live.deliveryRecoveryMs(clearedAt, l) ?? Number.POSITIVE_INFINITY)),
  );
  const finite = (v: number): number => (Number.isFinite(v) ? v : -1);
  recordRow(
    {
      row: `soak ${SOAK_SECONDS} s at ${EVENTS_PER_SECOND.toLocaleString('en-US')} events/s`,
      injects: `${THREADS} threads, half ACCEPTED half PERSISTED; a random dependency fault every 30-70 s (seed ${seed})`,
      ack: 'both',
      ackRecoveryMs: ackBack.map(finite),
      deliveryRecoveryMs: liveBack.map(finite),
      rssBeforeMiB: rssStart,
      rssAfterMiB: rssEnd,
      rssPeakMiB: rssPeak,
      rssSeriesMiB: samples.map((x) => [Math.round((x.at - started) / 1000), x.mib] as const),
      heldBeforeMiB: heldStart,
      heldAfterMiB: heldEnd,
      notes: `faults: ${injected.map((f) => `${f.name} at ${f.at} s`).join(', ')}; held after a full collection ${heldStart ?? '–'} → ${heldEnd ?? '–'} MiB (before the first fault past ${RSS_START_MS / 1000} s; at the end, under load); RSS is the median of ${RSS_WINDOW_MS / 1000} s of samples before ${RSS_START_MS / 1000} s in and of the last ${RSS_WINDOW_MS / 1000} s, under load; ${live.reconnects} subscriber reconnects`,
      seconds: Math.round((Date.now() - started) / 1000),
    },
    reports,
    live.deliveredCount(),
    { alarms: broker.alarms, logTail: broker.logTail(40) },
  );
  assert.ok(injected.length >= 1, 'at least one fault was injected');
  assert.ok(broker.alive(), 'the broker is still running');
  if (SOAK_SECONDS < RSS_CHECKED_FROM_SECONDS) {
    console.log(
      `# soak of ${SOAK_SECONDS} s: held ${heldStart ?? '–'} → ${heldEnd} MiB, RSS ${rssStart} → ${rssEnd} MiB, ` +
        `not checked under ${RSS_CHECKED_FROM_SECONDS} s`,
    );
    return;
  }
  assert.ok(
    heldStart !== undefined && heldEnd !== undefined,
    'held memory was read at the start and the end',
  );
  assert.ok(
    heldEnd <= heldStart * (1 + HELD_TOLERANCE),
    `broker held ${heldStart} MiB after a full collection before the first fault past ${RSS_START_MS / 1000} s, ` +
      `${heldEnd} MiB at the end (more than ${HELD_TOLERANCE * 100}% up)`,
  );
  assert.ok(
    rssEnd <= rssStart * (1 + RSS_TOLERANCE),
    `broker RSS ${rssStart} MiB at ${RSS_START_MS / 1000} s, ${rssEnd} MiB at the end (more than ${RSS_TOLERANCE * 100}% up); ` +
      `samples: ${samples.map((x) => Math.round(x.mib)).join(' ')}`,
  );
});
