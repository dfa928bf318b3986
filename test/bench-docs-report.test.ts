// The bench's docs report (bench/lib/docs-report.ts): medians from a results object, the
// generated block of docs/benchmarks.md, and the prose around it left alone.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import {
  type BenchReportInput,
  renderSummary,
  replaceSummaryBlock,
  reportInputFrom,
  SUMMARY_END,
  SUMMARY_START,
  writeDocsReport,
} from '../bench/lib/docs-report.js';

const ratio = (value: number, baseline: number, target: number, better: 'higher' | 'lower', unit: string) => {
  const r = value / baseline;
  return {
    value,
    baseline,
    ratio: r,
    target,
    unit,
    better,
    meets: better === 'higher' ? r >= target : r <= target,
  };
};

/** Three runs shaped like bench/run.ts's results, with one run's numbers missing (null, as JSON has it). */
const RESULTS = {
  date: '2026-11-30T10:00:00Z',
  mode: 'full',
  machine: {
    cpus: 2,
    cpuModel: 'AMD EPYC',
    memoryGiB: 24,
    node: 'v20.20.2',
    loadavgStart: [1],
    loadavgEnd: [2],
  },
  runs: [
    {
      A: { e2eEventsPerS: 40, ratio: ratio(40, 100, 0.5, 'higher', 'events/s') },
      B: [
        {
          rate: 5_000,
          ratios: { p50: ratio(2, 3, 1, 'lower', 'ms'), p99: ratio(30, 15, 1, 'lower', 'ms') },
          curve: [
            { offered: 1_000, achieved: 1_000, p50: 1, p99: 5, p999: 9 },
            { offered: 5_000, achieved: 4_000, p50: 2, p99: 30, p999: 60 },
          ],
        },
      ],
      errors: [],
    },
    {
      A: { e2eEventsPerS: 60, ratio: ratio(60, 100, 0.5, 'higher', 'events/s') },
      B: [
        {
          rate: 5_000,
          ratios: { p50: ratio(2.5, 3, 1, 'lower', 'ms'), p99: ratio(12, 15, 1, 'lower', 'ms') },
          curve: [{ offered: 1_000, achieved: 1_000, p50: 3, p99: 7, p999: null }],
        },
      ],
      errors: [],
    },
    {
      A: { e2eEventsPerS: 55, ratio: { ...ratio(55, 100, 0.5, 'higher', 'events/s'), ratio: null } },
      B: [],
      errors: ['B5000: failed'],
    },
  ],
};

test('reportInputFrom takes the median of the runs per target and per offered rate', () => {
  const input = reportInputFrom(JSON.parse(JSON.stringify(RESULTS)));
  assert.equal(input.date, '2026-11-30T10:00:00Z');
  assert.equal(input.quick, false);
  assert.equal(input.runs, 3);
  assert.match(input.machine, /^2 × AMD EPYC, 24 GiB, Node v20.20.2/);
  assert.deepEqual(
    input.ratios.map((r) => [r.scenario, r.metric]),
    [
      ['A', 'events/s'],
      ['B 5,000 events/s', 'p50'],
      ['B 5,000 events/s', 'p99'],
    ],
  );
  const [a, p50, p99] = input.ratios as [
    (typeof input.ratios)[0],
    (typeof input.ratios)[0],
    (typeof input.ratios)[0],
  ];
  assert.equal(a.value, 55);
  assert.equal(a.ratio, 0.4, 'median of 0.4 and 0.6 (the missing one left out): the lower middle');
  assert.equal(a.meets, false);
  assert.equal(p50.meets, true);
  assert.equal(p99.value, 12, 'lower middle of 12 and 30');
  assert.equal(p99.meets, true);
  assert.deepEqual(input.curve, [
    { offered: 1_000, achieved: 1_000, p50: 1, p99: 5, p999: 9 },
    { offered: 5_000, achieved: 4_000, p50: 2, p99: 30, p999: 60 },
  ]);
});

test('reportInputFrom refuses something that is not a results object', () => {
  assert.throws(() => reportInputFrom({ date: 'x' }), /runs/);
});

const INPUT: BenchReportInput = reportInputFrom(RESULTS);

test('the summary has the run, a row per target with its verdict, and both plots', () => {
  const md = renderSummary(INPUT, '/somewhere/bench/results/2026-11-30T10-00-00Z.json');
  assert.ok(md.startsWith(SUMMARY_START) && md.endsWith(SUMMARY_END));
  assert.ok(md.includes('2026-11-30 10:00:00 UTC'));
  assert.ok(md.includes('`bench/results/2026-11-30T10-00-00Z.json`'));
  assert.ok(md.includes('| scenario | metric | target | median | baseline | ratio | met? |'));
  assert.ok(
    md.includes('| A | events/s | ≥ 0.50× baseline | 55.0 events/s | 100 events/s | 0.40× | ❌ no |'),
    md,
  );
  assert.ok(
    md.includes('| B 5,000 events/s | p99 | ≤ 15.0 ms | 12.0 ms | (the limit) | 0.80× | ✅ yes |'),
    md,
  );
  assert.ok(md.includes('](bench/latency.svg)') && md.includes('](bench/ratios.svg)'));
});

test('the per-stage CPU table holds the median of the runs per stage and request shape', () => {
  const stage = (ingest: number, persister: number, fanout: number) => ({
    eventsPerRequest: 1,
    delivered: 1000,
    processCpuUsPerEvent: { ingest, persister, fanout },
    cpuUsPerEvent: { broker: 0, nats: 20, postgres: 40, bench: 60 },
  });
  const input = reportInputFrom({
    ...RESULTS,
    runs: [
      { stages: { one: stage(50, 80, 30) } },
      { stages: { one: stage(70, 60, 40) } },
      { stages: { one: stage(60, 70, 35) } },
    ],
  });
  assert.deepEqual(input.stages, [
    {
      shape: 'one',
      eventsPerRequest: 1,
      ingest: 60,
      persister: 70,
      fanout: 35,
      nats: 20,
      postgres: 40,
      loadGenerators: 60,
    },
  ]);
  const md = renderSummary(input, '/somewhere/bench/results/x.json');
  assert.ok(md.includes('| 1.00 | 60.0 | 70.0 | 35.0 | 165 | 20.0 | 40.0 | 60.0 |'), md);
  assert.equal(reportInputFrom(RESULTS).stages, undefined, 'a run without `stages` has no table');
});

test('the floor table sets the broker beside the bare parts of the same run, medians of the runs that measured them', () => {
  const l = (p50: number, p99: number) => ({ p50, p99, p999: p99 + 1 });
  const run = (broker: number, floor: number) => ({
    latency: [
      { rate: 1000, e2eLatency: l(1, 2) },
      { rate: 5000, e2eLatency: l(broker, broker * 4) },
    ],
    persisted: { ackLatency: l(broker * 2, broker * 5) },
    stages: {
      one: { processCpuUsPerEvent: { ingest: broker * 3, persister: broker * 2, fanout: broker } },
      hundred: { processCpuUsPerEvent: { ingest: broker, persister: broker, fanout: broker } },
    },
    pg: { eventsPerS: 100_000 },
    grpc: { cpuUsPerEvent: { broker: 2 } },
    fullSpeed: { e2eEventsPerS: broker * 1000 },
    floorFullSpeed: { e2eEventsPerS: floor * 10_000, cpuUsPerEvent: { broker: floor } },
    floor: { rate: 5000, e2eLatency: l(floor, floor * 3), cpuUsPerEvent: { broker: floor * 7, nats: 99 } },
    floorReceipts: { rate: 5000, receiptLatency: l(floor - 1, floor * 2) },
    floorGrpc: { rate: 5000, cpuUsPerEvent: { broker: floor * 2, nats: 0 } },
    floorIngest: { rate: 5000, cpuUsPerEvent: { broker: floor * 3, nats: 0 } },
  });
  const input = reportInputFrom({
    ...RESULTS,
    runs: [
      run(20, 5),
      run(10, 6),
      run(30, 4),
      // Measured no floor: left out of both columns, though it has scenarios 3 and 8 and `stages`.
      {
        latency: [{ rate: 5000, e2eLatency: l(99, 99) }],
        persisted: { ackLatency: l(1, 1) },
        stages: { one: { processCpuUsPerEvent: { ingest: 999, persister: 999, fanout: 999 } } },
      },
    ],
  });
  assert.deepEqual(
    input.floor?.map((f) => [f.metric, f.broker, f.floor]),
    [
      ['scenario 3, send → WebSocket p50 ms', 20, 5],
      ['scenario 3, send → WebSocket p99 ms', 80, 15],
      ['scenario 3, send → WebSocket p99.9 ms', 81, 16],
      ['scenario 8, PERSISTED ack p50 ms (B-path: commit receipt)', 40, 4],
      ['scenario 8, PERSISTED ack p99 ms (B-path: commit receipt)', 100, 10],
      ['ingest CPU µs/event, 1 event/request (B-grpc-acks: bare gRPC server)', 60, 10],
      ['ingest CPU µs/event, 1 event/request (B-ingest: bare gRPC server + JetStream publish)', 60, 15],
      ['persister + fan-out CPU µs/event, 1 event/request (B-path: relay)', 60, 35],
      ['broker CPU µs/event, 1 event/request (B-ingest + B-path relay)', 120, 50],
      ['scenario 1, e2e events/s (B-path at full speed)', 20_000, 50_000],
      ['scenario 1, e2e ÷ B-pg of the run (target ≥ 0.5)', 0.2, 0.5],
      ['persister + fan-out CPU µs/event, 100 events/request (B-path relay at full speed)', 40, 5],
      ['broker CPU µs/event, 100 events/request (B-grpc + B-path relay at full speed)', 60, 7],
    ],
  );
  const md = renderSummary(input, '/somewhere/bench/results/x.json');
  assert.ok(md.includes('| scenario 3, send → WebSocket p50 ms | 20.0 | 5.00 | 4.00× |'), md);
  assert.ok(
    md.includes('| broker CPU µs/event, 1 event/request (B-ingest + B-path relay) | 120 | 50.0 | 2.40× |'),
    md,
  );
  assert.equal(reportInputFrom(RESULTS).floor, undefined, 'a run without a floor has no table');
});

test('the linger table sets the Publisher beside raw requests at the rates it measured, medians of the runs', () => {
  const l = (p50: number) => ({ p50, p99: p50 * 3, p999: p50 * 4 });
  const fixed = (rate: number, p50: number, perRequest: number, cpu: number, linger?: number) => ({
    rate,
    ...(linger === undefined ? {} : { linger }),
    e2eLatency: l(p50),
    meanEventsPerRequest: perRequest,
    cpuUsPerEvent: { broker: cpu },
  });
  const run = (k: number) => ({
    // 1,000 events/s has no Publisher measurement: not in the table.
    latency: [fixed(1000, 1, 1, 300), fixed(5000, 10 * k, 1, 120)],
    linger: [
      fixed(5000, 11 * k, 1.1, 130, 0),
      fixed(5000, 20 * k, 1.2, 140, 5),
      fixed(10000, 60 * k, 2.5, 80, 0),
    ],
  });
  const input = reportInputFrom({ ...RESULTS, runs: [run(1), run(3), run(2)] });
  assert.deepEqual(
    input.linger?.map((r) => [r.rate, r.linger, r.eventsPerRequest, r.p50, r.p99, r.p999, r.brokerCpu]),
    [
      [5000, undefined, 1, 20, 60, 80, 120],
      [5000, 0, 1.1, 22, 66, 88, 130],
      [5000, 5, 1.2, 40, 120, 160, 140],
      [10000, 0, 2.5, 120, 360, 480, 80],
    ],
  );
  const md = renderSummary(input, '/somewhere/bench/results/x.json');
  assert.ok(md.includes('| 5,000 | raw requests (scenario 3) | 1.00 | 20.0 / 60.0 / 80.0 | 120 |'), md);
  assert.ok(md.includes('| 5,000 | Publisher, no linger | 1.10 | 22.0 / 66.0 / 88.0 | 130 |'), md);
  assert.ok(md.includes('| 5,000 | Publisher, linger 5 ms | 1.20 | 40.0 / 120 / 160 | 140 |'), md);
  assert.equal(reportInputFrom(RESULTS).linger, undefined, 'a run without `linger` has no table');
});

test("the floor's curve sets scenario 3 beside B-path at each offered rate, medians of the runs", () => {
  const point = (offered: number, achieved: number, p50: number) => ({
    offered,
    achieved,
    p50,
    p99: p50 * 4,
    p999: p50 * 5,
  });
  const run = (k: number) => ({
    curve: [point(1000, 1000, 4 * k), point(5000, 4990, 15 * k), point(20000, 14_000, 2000 * k)],
    // The floor went on to 10,000 events/s, which the broker's curve has not measured, and stopped there.
    floorCurve: [point(1000, 1000, 2 * k), point(5000, 5000, 6 * k), point(10000, 9000 + k, 40 * k)],
  });
  const input = reportInputFrom({ ...RESULTS, runs: [run(1), run(3), run(2)] });
  assert.deepEqual(input.floorCurve, [point(1000, 1000, 4), point(5000, 5000, 12), point(10000, 9002, 80)]);
  const md = renderSummary(input, '/somewhere/bench/results/x.json');
  assert.ok(md.includes('| 1,000 | 1,000 | 8.00 / 32.0 / 40.0 | 1,000 | 4.00 / 16.0 / 20.0 | 2.00× |'), md);
  assert.ok(md.includes('| 5,000 | 4,990 | 30.0 / 120 / 150 | 5,000 | 12.0 / 48.0 / 60.0 | 2.50× |'), md);
  assert.ok(md.includes('| 10,000 | — | — | 9,002 | 80.0 / 320 / 400 | — |'), md);
  assert.ok(md.includes('| 20,000 | 14,000 | 4,000 / 16,000 / 20,000 | — | — | — |'), md);
  assert.equal(reportInputFrom(RESULTS).floorCurve, undefined, 'a run without `floorCurve` has no table');
  assert.ok(!renderSummary(reportInputFrom(RESULTS), 'x.json').includes('floor delivered'));
});

const DOC = '# Benchmarks\n\nIntro line one,\nline two.\n\nIn short:\n\n- a finding\n\n## Running\n\nprose\n';

test('without markers, the block goes after the intro paragraph and the prose stays', () => {
  const out = replaceSummaryBlock(DOC, `${SUMMARY_START}\nnew\n${SUMMARY_END}`);
  assert.equal(
    out,
    `# Benchmarks\n\nIntro line one,\nline two.\n\n${SUMMARY_START}\nnew\n${SUMMARY_END}\n\nIn short:\n\n- a finding\n\n## Running\n\nprose\n`,
  );
});

test('with markers, only the block between them is replaced, every time', () => {
  const once = replaceSummaryBlock(DOC, `${SUMMARY_START}\nfirst\n${SUMMARY_END}`);
  const twice = replaceSummaryBlock(once, `${SUMMARY_START}\nsecond\n${SUMMARY_END}`);
  assert.equal(twice, once.replace('first', 'second'));
  assert.throws(() => replaceSummaryBlock(`${DOC}${SUMMARY_END}\n`, 'x'), /only one/);
});

test('writeDocsReport writes both plots and the block, leaving the rest of the page', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-docs-'));
  try {
    writeFileSync(path.join(dir, 'benchmarks.md'), DOC);
    const written = writeDocsReport(INPUT, 'bench/results/x.json', dir);
    assert.deepEqual(
      written.map((f) => path.relative(dir, f)),
      [path.join('bench', 'latency.svg'), path.join('bench', 'ratios.svg'), 'benchmarks.md'],
    );
    assert.match(readFileSync(path.join(dir, 'bench', 'ratios.svg'), 'utf8'), /^<svg /);
    const doc = readFileSync(path.join(dir, 'benchmarks.md'), 'utf8');
    assert.ok(doc.startsWith('# Benchmarks\n\nIntro line one,\nline two.\n\n<!-- bench:summary:start -->'));
    assert.ok(
      doc.endsWith('<!-- bench:summary:end -->\n\nIn short:\n\n- a finding\n\n## Running\n\nprose\n'),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
