/** The benchmark's table: one row per (scenario, metric), the median of its runs and every run. */
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { median } from './stats.js';

export const RESULTS_DIR = fileURLToPath(new URL('../../../bench/results/', import.meta.url));

/** The machine a run measured, for its results file. */
export function machineInfo(versions: object, loadavgStart: number[], loadavgEnd: number[]): object {
  return {
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model,
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    ...versions,
    loadavgStart,
    loadavgEnd,
  };
}

/** Writes `bench/results/<date><tag>.json` and returns its path. */
export function writeResults(stamp: string, tag: string, body: object): string {
  mkdirSync(RESULTS_DIR, { recursive: true });
  const file = `${RESULTS_DIR}${stamp.replace(/:/g, '-')}${tag}.json`;
  // NaN and Infinity (an empty measurement) become null rather than invalid JSON.
  const finite = (_: string, value: unknown): unknown =>
    typeof value === 'number' && !Number.isFinite(value) ? null : value;
  writeFileSync(file, `${JSON.stringify(body, finite, 2)}\n`);
  return file;
}

export interface Row {
  readonly scenario: string;
  readonly metric: string;
  /** One value per run (NaN where that run has none). */
  readonly values: readonly number[];
  /** Digits after the point when printed. */
  readonly digits: number;
}

export interface SummaryRow extends Row {
  readonly median: number;
}

export function summarizeRows(rows: readonly Row[]): SummaryRow[] {
  return rows.map((r) => ({ ...r, median: median(r.values) }));
}

export function fmt(value: number, digits: number): string {
  if (!Number.isFinite(value)) return '—';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** A plain-text table (also valid as the body of a Markdown table with `markdown`). */
export function renderTable(rows: readonly SummaryRow[], markdown = false): string {
  const header = ['scenario', 'metric', 'median', 'runs'];
  const body = rows.map((r) => [
    r.scenario,
    r.metric,
    fmt(r.median, r.digits),
    r.values.map((v) => fmt(v, r.digits)).join(' / '),
  ]);
  if (markdown) {
    const line = (cells: string[]) => `| ${cells.join(' | ')} |`;
    return [line(header), line(['---', '---', '---:', '---:']), ...body.map(line)].join('\n');
  }
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => (b[i] as string).length)));
  const pad = (cells: string[]) =>
    cells
      .map((c, i) => (i >= 2 ? c.padStart(widths[i] as number) : c.padEnd(widths[i] as number)))
      .join('  ');
  return [pad(header), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(pad)].join('\n');
}
