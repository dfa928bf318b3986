/**
 * The benchmark's report in the docs: after a full run, `make bench` writes
 * docs/bench/latency.svg and docs/bench/ratios.svg and replaces the generated block of
 * docs/benchmarks.md (between the bench:summary markers) with the run's date, machine,
 * results file, a table of every target with its baseline and ratio, the CPU per event of
 * each stage (when the run measured `stages`), and the two plots.
 * Everything outside the markers is hand-written prose and is left as it is.
 *
 * The input is the object bench/run.ts writes to bench/results/<date>.json, read through
 * `reportInputFrom`, so a saved results file can be rendered again (bench/docs-report.ts).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Ratio } from './ratio.js';
import { fmt } from './report.js';
import { median } from './stats.js';
import { type CurvePoint, latencyChart, type RatioBar, ratioChart } from './svg.js';

export const DOCS_DIR = fileURLToPath(new URL('../../../docs/', import.meta.url));
export const SUMMARY_START = '<!-- bench:summary:start -->';
export const SUMMARY_END = '<!-- bench:summary:end -->';

/**
 * One target of issue 5 (the `ratio` of a scenario result, see bench/lib/ratio.ts) with the
 * scenario and metric it belongs to; figures are medians of the runs.
 */
export interface RatioRow extends Ratio {
  readonly scenario: string;
  /** What was measured, e.g. `e2e events/s` or `p99`. */
  readonly metric: string;
}

export interface BenchReportInput {
  /** The run's ISO date, e.g. 2026-11-30T07:38:50Z. */
  readonly date: string;
  readonly quick: boolean;
  /** One line: cores, CPU, memory, Node and server versions. */
  readonly machine: string;
  /** How many runs each figure is the median of. */
  readonly runs: number;
  readonly ratios: readonly RatioRow[];
  readonly curve?: readonly CurvePoint[];
  /** B-path's curve: the bare parts at scenario 3's rates (medians of the runs per offered rate). */
  readonly floorCurve?: readonly CurvePoint[];
  /** CPU µs per delivered event by stage, one broker process per stage (medians of the runs). */
  readonly stages?: readonly StageRow[];
  /** Scenarios 3 and 8, and CPU per event, beside the bare parts under the same load (medians of the runs). */
  readonly floor?: readonly FloorRow[];
  /** Scenario 3's load through the client library's Publisher, beside raw requests (`linger`; medians). */
  readonly linger?: readonly LingerRow[];
}

/** One producer at one offered rate: scenario 3's raw requests, or the client's Publisher with a linger. */
export interface LingerRow {
  readonly rate: number;
  /** The Publisher's linger, ms; undefined for scenario 3's raw requests. */
  readonly linger: number | undefined;
  readonly eventsPerRequest: number;
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  readonly brokerCpu: number;
}

/**
 * Per offered rate that `linger` measured: scenario 3's raw requests at that rate (when the run
 * has them), then the Publisher at each linger, medians of the runs.
 */
function lingerRows(runs: readonly Json[]): LingerRow[] {
  const groups = new Map<string, { rate: number; linger: number | undefined; found: Json[] }>();
  const add = (x: Json, linger: number | undefined) => {
    const key = `${num(x.rate)}\u0000${linger ?? 'raw'}`;
    const g = groups.get(key) ?? { rate: num(x.rate), linger, found: [] };
    g.found.push(x);
    groups.set(key, g);
  };
  const measured = runs.flatMap((r) => (Array.isArray(r.linger) ? r.linger.filter(isObject) : []));
  if (measured.length === 0) return [];
  const rates = new Set(measured.map((x) => num(x.rate)));
  for (const r of runs) {
    for (const x of Array.isArray(r.latency) ? r.latency.filter(isObject) : []) {
      if (rates.has(num(x.rate))) add(x, undefined);
    }
  }
  for (const x of measured) add(x, num(x.linger));
  return [...groups.values()]
    .sort((a, b) => a.rate - b.rate || (a.linger ?? -1) - (b.linger ?? -1))
    .map(({ rate, linger, found }) => {
      const med = (f: (x: Json) => unknown) => median(found.map((x) => num(f(x))));
      return {
        rate,
        linger,
        eventsPerRequest: med((x) => x.meanEventsPerRequest),
        p50: med((x) => latencyOf(x, 'e2eLatency')?.p50),
        p99: med((x) => latencyOf(x, 'e2eLatency')?.p99),
        p999: med((x) => latencyOf(x, 'e2eLatency')?.p999),
        brokerCpu: med((x) => (isObject(x.cpuUsPerEvent) ? x.cpuUsPerEvent.broker : undefined)),
      };
    });
}

/** One figure of the broker beside the same figure of the bare parts (ms, or CPU µs per event). */
export interface FloorRow {
  readonly metric: string;
  readonly broker: number;
  readonly floor: number;
}

/** One request shape of the `stages` measurement: µs of CPU per delivered event. */
export interface StageRow {
  /** `one` (1 event/request, scenario 3's load) or `hundred` (100 events/request, full speed). */
  readonly shape: string;
  readonly eventsPerRequest: number;
  readonly ingest: number;
  readonly persister: number;
  readonly fanout: number;
  readonly nats: number;
  readonly postgres: number;
  readonly loadGenerators: number;
}

const STAGE_SHAPES = ['one', 'hundred'] as const;

function stageRows(runs: readonly Json[]): StageRow[] {
  const rows: StageRow[] = [];
  for (const shape of STAGE_SHAPES) {
    const found = runs.flatMap((r) => {
      const st = isObject(r.stages) ? r.stages[shape] : undefined;
      return isObject(st) ? [st] : [];
    });
    if (found.length === 0) continue;
    const med = (f: (st: Json) => unknown) => median(found.map((st) => num(f(st))));
    const proc = (st: Json, name: string) =>
      isObject(st.processCpuUsPerEvent) ? st.processCpuUsPerEvent[name] : undefined;
    const role = (st: Json, name: string) =>
      isObject(st.cpuUsPerEvent) ? st.cpuUsPerEvent[name] : undefined;
    rows.push({
      shape,
      eventsPerRequest: med((st) => st.eventsPerRequest),
      ingest: med((st) => proc(st, 'ingest')),
      persister: med((st) => proc(st, 'persister')),
      fanout: med((st) => proc(st, 'fanout')),
      nats: med((st) => role(st, 'nats')),
      postgres: med((st) => role(st, 'postgres')),
      loadGenerators: med((st) => role(st, 'bench')),
    });
  }
  return rows;
}

/**
 * The figures compared with their floor, the bare parts under the same load in the same run:
 * the broker's latency beside B-path's (`floor`: scenario 3's load; `floorReceipts`: with
 * commit receipts, scenario 8's), and the broker's CPU per event at one event per request
 * (`stages`) beside what the bare gRPC server (`floorGrpc`, B-grpc-acks) and B-path's relay
 * spend on the same load; and at full speed, 100 events a request, scenario 1's e2e
 * throughput beside B-path's (`floorFullSpeed`), both also as a share of B-pg, and the broker's
 * CPU per event beside B-grpc's server plus B-path's relay at full speed.
 */
const FLOOR_FIGURES: readonly (readonly [string, (r: Json) => unknown, (r: Json) => unknown])[] = [
  [
    'scenario 3, send → WebSocket p50 ms',
    (r) => targetLatency(r)?.p50,
    (r) => floorLatency(r, 'floor', 'e2eLatency')?.p50,
  ],
  [
    'scenario 3, send → WebSocket p99 ms',
    (r) => targetLatency(r)?.p99,
    (r) => floorLatency(r, 'floor', 'e2eLatency')?.p99,
  ],
  [
    'scenario 3, send → WebSocket p99.9 ms',
    (r) => targetLatency(r)?.p999,
    (r) => floorLatency(r, 'floor', 'e2eLatency')?.p999,
  ],
  [
    'scenario 8, PERSISTED ack p50 ms (B-path: commit receipt)',
    (r) => (isObject(r.persisted) ? latencyOf(r.persisted, 'ackLatency')?.p50 : undefined),
    (r) => floorLatency(r, 'floorReceipts', 'receiptLatency')?.p50,
  ],
  [
    'scenario 8, PERSISTED ack p99 ms (B-path: commit receipt)',
    (r) => (isObject(r.persisted) ? latencyOf(r.persisted, 'ackLatency')?.p99 : undefined),
    (r) => floorLatency(r, 'floorReceipts', 'receiptLatency')?.p99,
  ],
  [
    'ingest CPU µs/event, 1 event/request (B-grpc-acks: bare gRPC server)',
    (r) => stageCpu(r, ['ingest']),
    (r) => floorCpu(r, 'floorGrpc'),
  ],
  [
    'ingest CPU µs/event, 1 event/request (B-ingest: bare gRPC server + JetStream publish)',
    (r) => stageCpu(r, ['ingest']),
    (r) => floorCpu(r, 'floorIngest'),
  ],
  [
    'persister + fan-out CPU µs/event, 1 event/request (B-path: relay)',
    (r) => stageCpu(r, ['persister', 'fanout']),
    (r) => floorCpu(r, 'floor'),
  ],
  [
    'broker CPU µs/event, 1 event/request (B-ingest + B-path relay)',
    (r) => stageCpu(r, ['ingest', 'persister', 'fanout']),
    (r) => num(floorCpu(r, 'floorIngest')) + num(floorCpu(r, 'floor')),
  ],
  [
    'scenario 1, e2e events/s (B-path at full speed)',
    (r) => e2eOf(r, 'fullSpeed'),
    (r) => e2eOf(r, 'floorFullSpeed'),
  ],
  [
    'scenario 1, e2e ÷ B-pg of the run (target ≥ 0.5)',
    (r) => num(e2eOf(r, 'fullSpeed')) / pgOf(r),
    (r) => num(e2eOf(r, 'floorFullSpeed')) / pgOf(r),
  ],
  [
    'persister + fan-out CPU µs/event, 100 events/request (B-path relay at full speed)',
    (r) => stageCpu(r, ['persister', 'fanout'], 'hundred'),
    (r) => floorCpu(r, 'floorFullSpeed'),
  ],
  [
    'broker CPU µs/event, 100 events/request (B-grpc + B-path relay at full speed)',
    (r) => stageCpu(r, ['ingest', 'persister', 'fanout'], 'hundred'),
    (r) => num(floorCpu(r, 'grpc')) + num(floorCpu(r, 'floorFullSpeed')),
  ],
];

function e2eOf(run: Json, which: string): unknown {
  const f = run[which];
  return isObject(f) ? f.e2eEventsPerS : undefined;
}

function pgOf(run: Json): number {
  return isObject(run.pg) ? num(run.pg.eventsPerS) : Number.NaN;
}

/** CPU µs per event of the named stages together, `stages` at one event per request (or 100). */
function stageCpu(run: Json, names: readonly string[], shape: 'one' | 'hundred' = 'one'): number | undefined {
  const at = isObject(run.stages) && isObject(run.stages[shape]) ? run.stages[shape] : undefined;
  const per = at && isObject(at.processCpuUsPerEvent) ? at.processCpuUsPerEvent : undefined;
  return per && names.reduce((sum, n) => sum + num(per[n]), 0);
}

/** The bare server's (or relay's) CPU µs per event in a floor measurement: its `broker` role. */
function floorCpu(run: Json, which: string): unknown {
  const f = run[which];
  return isObject(f) && isObject(f.cpuUsPerEvent) ? f.cpuUsPerEvent.broker : undefined;
}

function floorLatency(run: Json, which: string, field: string): Json | undefined {
  const f = run[which];
  return isObject(f) ? latencyOf(f, field) : undefined;
}

function latencyOf(o: Json, field: string): Json | undefined {
  const l = o[field];
  return isObject(l) ? l : undefined;
}

/** Scenario 3 at B-path's rate (the target rate). */
function targetLatency(run: Json): Json | undefined {
  const floor = isObject(run.floor) ? run.floor : undefined;
  if (!floor || !Array.isArray(run.latency)) return undefined;
  const at = run.latency.find((l) => isObject(l) && l.rate === floor.rate);
  return isObject(at) ? latencyOf(at, 'e2eLatency') : undefined;
}

function floorRows(runs: readonly Json[]): FloorRow[] {
  const measured = runs.filter(
    (r) =>
      isObject(r.floor) ||
      isObject(r.floorReceipts) ||
      isObject(r.floorGrpc) ||
      isObject(r.floorIngest) ||
      isObject(r.floorFullSpeed),
  );
  if (measured.length === 0) return [];
  return FLOOR_FIGURES.map(([metric, broker, floor]) => ({
    metric,
    broker: median(measured.map((r) => num(broker(r)))),
    floor: median(measured.map((r) => num(floor(r)))),
  }));
}

/** An absolute limit (RSS, latency): divided by the limit itself, met at or below 1. */
function isAbsolute(row: RatioRow): boolean {
  return row.better === 'lower' && row.target === 1;
}

export function ratioBar(row: RatioRow): RatioBar {
  return {
    scenario: row.scenario,
    metric: row.metric,
    ratio: row.ratio,
    threshold: row.target,
    better: row.better,
    meets: row.meets,
    detail: `${number(row.value)} ${row.unit} vs ${isAbsolute(row) ? 'limit' : 'baseline'} ${number(row.baseline)} ${row.unit}`,
  };
}

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** JSON writes NaN as null: both read back as NaN. */
function num(v: unknown): number {
  return typeof v === 'number' ? v : Number.NaN;
}

function isRatio(v: unknown): v is Json {
  return isObject(v) && 'ratio' in v && 'target' in v && (v.better === 'higher' || v.better === 'lower');
}

interface Found {
  readonly scenario: string;
  readonly metric: string;
  readonly ratio: Json;
}

/**
 * Every `ratio` in one run's results: a result `{ ..., ratio }` under the run's key for its
 * scenario (an array of them is told apart by `rate`), or `ratios: { metric: ratio }` for a
 * scenario with several targets. The scenario is named by the result's `scenario` field if
 * it has one, else by its key.
 */
function ratiosOfRun(run: Json): Found[] {
  const found: Found[] = [];
  for (const [key, entry] of Object.entries(run)) {
    for (const result of Array.isArray(entry) ? entry : [entry]) {
      if (!isObject(result)) continue;
      const scenario =
        typeof result.scenario === 'string'
          ? result.scenario
          : typeof result.rate === 'number'
            ? `${key} ${fmt(result.rate, 0)} events/s`
            : key;
      if (isRatio(result.ratio)) {
        const metric = typeof result.metric === 'string' ? result.metric : String(result.ratio.unit);
        found.push({ scenario, metric, ratio: result.ratio });
      }
      if (isObject(result.ratios)) {
        for (const [metric, ratio] of Object.entries(result.ratios)) {
          if (isRatio(ratio)) found.push({ scenario, metric, ratio });
        }
      }
    }
  }
  return found;
}

function isCurvePoint(v: unknown): v is Json {
  return isObject(v) && typeof v.offered === 'number';
}

/** One point per offered rate, each figure the median of the runs' points at that rate. */
function mediansByOffered(points: readonly Json[]): CurvePoint[] {
  const byOffered = new Map<number, Json[]>();
  for (const p of points) {
    const offered = p.offered as number;
    byOffered.set(offered, [...(byOffered.get(offered) ?? []), p]);
  }
  return [...byOffered.entries()]
    .sort(([a], [b]) => a - b)
    .map(([offered, ps]): CurvePoint => {
      const med = (field: string) => median(ps.map((p) => num(p[field])));
      return { offered, achieved: med('achieved'), p50: med('p50'), p99: med('p99'), p999: med('p999') };
    });
}

/** A run's latency curve: `curve` on the run or on one of its results. */
function curveOfRun(run: Json): Json[] {
  const holders = [run, ...Object.values(run).flatMap((e) => (Array.isArray(e) ? e : [e]))];
  const curve = holders.find((h) => isObject(h) && Array.isArray(h.curve)) as Json | undefined;
  return ((curve?.curve as unknown[]) ?? []).filter(isCurvePoint);
}

function machineLine(m: unknown): string {
  if (!isObject(m)) return 'unknown';
  const load = (l: unknown) => (Array.isArray(l) ? num(l[0]).toFixed(2) : '?');
  return (
    `${m.cpus} × ${m.cpuModel}, ${m.memoryGiB} GiB, Node ${m.node}, ${m.natsServer}, ${m.postgres}, ` +
    `load average ${load(m.loadavgStart)} → ${load(m.loadavgEnd)}`
  );
}

/**
 * The report's input from the object bench/run.ts writes to bench/results/<date>.json (or
 * that object before it is written): per target and per offered rate, the median of the runs.
 */
export function reportInputFrom(results: unknown): BenchReportInput {
  if (!isObject(results) || !Array.isArray(results.runs)) {
    throw new Error('not a bench/run.ts results object: no `runs` array');
  }
  const runs = results.runs.filter(isObject);

  const targets = new Map<string, Found[]>();
  for (const f of runs.flatMap(ratiosOfRun)) {
    const key = `${f.scenario}\u0000${f.metric}`;
    targets.set(key, [...(targets.get(key) ?? []), f]);
  }
  const ratios = [...targets.values()].map((found): RatioRow => {
    const first = (found[0] as Found).ratio;
    const med = (field: string) => median(found.map((f) => num(f.ratio[field])));
    const better = first.better === 'lower' ? 'lower' : 'higher';
    const target = num(first.target);
    const ratio = med('ratio');
    return {
      scenario: (found[0] as Found).scenario,
      metric: (found[0] as Found).metric,
      value: med('value'),
      baseline: med('baseline'),
      ratio,
      target,
      unit: String(first.unit ?? ''),
      better,
      // The median ratio decides, not a vote of the runs.
      meets: Number.isFinite(ratio) && (better === 'higher' ? ratio >= target : ratio <= target),
    };
  });

  const curve = mediansByOffered(runs.flatMap(curveOfRun));
  const floorCurve = mediansByOffered(
    runs.flatMap((r) => (Array.isArray(r.floorCurve) ? r.floorCurve.filter(isCurvePoint) : [])),
  );

  const stages = stageRows(runs);
  const floor = floorRows(runs);
  const linger = lingerRows(runs);
  return {
    date: String(results.date),
    quick: results.mode === 'quick',
    machine: machineLine(results.machine),
    runs: runs.length,
    ratios,
    ...(curve.length > 0 ? { curve } : {}),
    ...(floorCurve.length > 0 ? { floorCurve } : {}),
    ...(stages.length > 0 ? { stages } : {}),
    ...(floor.length > 0 ? { floor } : {}),
    ...(linger.length > 0 ? { linger } : {}),
  };
}

/** A figure with as many digits as it needs to be read: 61,755 · 12.3 · 0.08. */
function number(v: number): string {
  if (!Number.isFinite(v)) return '—';
  const a = Math.abs(v);
  return fmt(v, a >= 100 ? 0 : a >= 10 ? 1 : 2);
}

function targetText(row: RatioRow): string {
  if (isAbsolute(row)) return `≤ ${number(row.baseline)} ${row.unit}`;
  return `${row.better === 'higher' ? '≥' : '≤'} ${number(row.target)}× baseline`;
}

/** The Markdown between the markers. Image paths are relative to docs/. */
export function renderSummary(input: BenchReportInput, resultsFile: string): string {
  const when = input.date.replace('T', ' ').replace(/Z$/, ' UTC');
  const kind = input.quick ? 'quick run' : 'full run';
  const lines = [
    SUMMARY_START,
    '<!-- Generated by `make bench` (bench/lib/docs-report.ts); edits between these markers are overwritten. -->',
    '',
    `**Latest ${kind}: ${when}**, every figure the median of ${input.runs} run(s).`,
    '',
    `- Machine: ${input.machine}.`,
    `- Results: \`bench/results/${path.basename(resultsFile)}\`.`,
    '',
  ];
  if (input.ratios.length === 0) {
    lines.push('This run measured no targets.');
  } else {
    const cell = (s: string) => s.replaceAll('|', '\\|');
    lines.push('| scenario | metric | target | median | baseline | ratio | met? |');
    lines.push('| --- | --- | --- | ---: | ---: | ---: | --- |');
    for (const r of input.ratios) {
      lines.push(
        `| ${cell(r.scenario)} | ${cell(r.metric)} | ${targetText(r)} | ${number(r.value)} ${r.unit} | ` +
          `${isAbsolute(r) ? '(the limit)' : `${number(r.baseline)} ${r.unit}`} | ${number(r.ratio)}× | ${r.meets ? '✅ yes' : '❌ no'} |`,
      );
    }
  }
  if (input.stages && input.stages.length > 0) {
    lines.push(
      '',
      'CPU per delivered event, µs, each stage in a broker process of its own (`stages`):',
      '',
      '| events/request | ingest | persister | fan-out | broker (sum) | nats-server | Postgres | load generators |',
      '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    );
    for (const s of input.stages) {
      lines.push(
        `| ${number(s.eventsPerRequest)} | ${number(s.ingest)} | ${number(s.persister)} | ${number(s.fanout)} | ` +
          `${number(s.ingest + s.persister + s.fanout)} | ${number(s.nats)} | ${number(s.postgres)} | ${number(s.loadGenerators)} |`,
      );
    }
  }
  if (input.floor && input.floor.length > 0) {
    lines.push(
      '',
      "Against the floor of the parts, in the same run: B-path sends scenario 3's load through the same",
      'processes and servers with the bare clients alone (`bench/loadgen/path-floor.ts`), and at full',
      "speed scenario 1's; B-grpc-acks sends scenario 3's load to a bare grpc-js server that answers each",
      "request's acks at once (`bench/loadgen/grpc-acks-server.ts`), and B-ingest to the same server",
      "publishing each request to JetStream with bare nats.js before it answers. The broker's CPU is `stages`:",
      '',
      '| figure | broker | floor (bare parts) | broker ÷ floor |',
      '| --- | ---: | ---: | ---: |',
    );
    for (const f of input.floor) {
      lines.push(
        `| ${f.metric} | ${number(f.broker)} | ${number(f.floor)} | ${number(f.broker / f.floor)}× |`,
      );
    }
  }
  if (input.curve && input.curve.length > 0 && input.floorCurve && input.floorCurve.length > 0) {
    lines.push(
      '',
      "Scenario 3's curve beside B-path's, the same load through the bare parts at each offered rate",
      "(send → WebSocket ms; B-path's curve ends at twice the target's rate, or where it fell behind):",
      '',
      '| offered events/s | broker delivered events/s | broker p50 / p99 / p99.9 | floor delivered events/s | floor p50 / p99 / p99.9 | broker ÷ floor, p50 |',
      '| ---: | ---: | ---: | ---: | ---: | ---: |',
    );
    const rates = [...new Set([...input.curve, ...input.floorCurve].map((p) => p.offered))].sort(
      (a, b) => a - b,
    );
    const cells = (p: CurvePoint | undefined) =>
      p ? [number(p.achieved), `${number(p.p50)} / ${number(p.p99)} / ${number(p.p999)}`] : ['—', '—'];
    for (const rate of rates) {
      const b = input.curve.find((p) => p.offered === rate);
      const f = input.floorCurve.find((p) => p.offered === rate);
      const ratio = b && f ? `${number(b.p50 / f.p50)}×` : '—';
      lines.push(`| ${number(rate)} | ${[...cells(b), ...cells(f), ratio].join(' | ')} |`);
    }
  }
  if (input.linger && input.linger.length > 0) {
    lines.push(
      '',
      "Scenario 3's load handed event by event to the client library's `Publisher` (`linger`), beside",
      "scenario 3's raw requests of the same run. Not a target: the targets are for producers that send",
      'each token as it comes.',
      '',
      '| offered events/s | producer | events/request | send → WebSocket p50 / p99 / p99.9 ms | broker CPU µs/event |',
      '| ---: | --- | ---: | ---: | ---: |',
    );
    for (const l of input.linger) {
      const who =
        l.linger === undefined
          ? 'raw requests (scenario 3)'
          : `Publisher, ${l.linger > 0 ? `linger ${l.linger} ms` : 'no linger'}`;
      lines.push(
        `| ${number(l.rate)} | ${who} | ${number(l.eventsPerRequest)} | ${number(l.p50)} / ${number(l.p99)} / ` +
          `${number(l.p999)} | ${number(l.brokerCpu)} |`,
      );
    }
  }
  lines.push(
    '',
    '![Latency percentiles vs offered rate](bench/latency.svg)',
    '',
    '![Throughput per scenario vs its baseline](bench/ratios.svg)',
    SUMMARY_END,
  );
  return lines.join('\n');
}

/**
 * `doc` with the block between the markers replaced by `block` (which carries the markers).
 * Without markers, the block goes after the intro paragraph (the first paragraph after the title).
 */
export function replaceSummaryBlock(doc: string, block: string): string {
  const start = doc.indexOf(SUMMARY_START);
  const end = doc.indexOf(SUMMARY_END);
  if (start >= 0 && end > start) return doc.slice(0, start) + block + doc.slice(end + SUMMARY_END.length);
  if (start >= 0 || end >= 0) {
    throw new Error(
      `docs/benchmarks.md has only one of ${SUMMARY_START} and ${SUMMARY_END}, or in the wrong order`,
    );
  }
  const lines = doc.split('\n');
  let i = lines.findIndex((l) => l.startsWith('# '));
  if (i < 0) return `${block}\n\n${doc}`;
  i++;
  while (i < lines.length && lines[i]?.trim() === '') i++;
  while (i < lines.length && lines[i]?.trim() !== '') i++;
  return [...lines.slice(0, i), '', block, ...lines.slice(i)].join('\n');
}

/** Writes the plots and the summary block; returns the files written. */
export function writeDocsReport(input: BenchReportInput, resultsFile: string, docsDir = DOCS_DIR): string[] {
  const plotDir = path.join(docsDir, 'bench');
  mkdirSync(plotDir, { recursive: true });
  const latency = path.join(plotDir, 'latency.svg');
  const ratios = path.join(plotDir, 'ratios.svg');
  const doc = path.join(docsDir, 'benchmarks.md');
  const subtitle = `${input.quick ? 'quick' : 'full'} run ${input.date}, median of ${input.runs} run(s)`;
  writeFileSync(latency, latencyChart(input.curve ?? [], { subtitle }, undefined, input.floorCurve ?? []));
  writeFileSync(ratios, ratioChart(input.ratios.map(ratioBar), { subtitle }));
  writeFileSync(doc, replaceSummaryBlock(readFileSync(doc, 'utf8'), renderSummary(input, resultsFile)));
  return [latency, ratios, doc];
}

/** The report of a saved results file (bench/results/<date>.json); returns the files written. */
export function writeDocsReportFromFile(resultsFile: string, docsDir = DOCS_DIR): string[] {
  const input = reportInputFrom(JSON.parse(readFileSync(resultsFile, 'utf8')));
  return writeDocsReport(input, resultsFile, docsDir);
}
