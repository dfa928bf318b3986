/** The benchmark's table: one row per (scenario, metric), the median of its runs and every run. */
import { median } from './stats.js';

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
