/**
 * Renders the fault suite's results file (one JSON row per line, written by the rows) as
 * the markdown table in docs/reliability.md, so no figure is typed by hand.
 *
 *   node dist/test/faults/report.js                      prints the table
 *   node dist/test/faults/report.js --update FILE.md     replaces the table between the
 *                                                        `faults-table` markers in FILE.md
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { RowResult } from './checker.js';
import { RESULTS_PATH } from './harness.js';

export const TABLE_START = '<!-- faults-table:start -->';
export const TABLE_END = '<!-- faults-table:end -->';

export function readResults(path: string): RowResult[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as RowResult);
}

const int = (n: number): string => n.toLocaleString('en-US');

function ms(values: readonly number[]): string {
  if (values.length === 0) return '–';
  if (values.length > 4) {
    const worst = Math.max(...values);
    return `max ${worst >= 10_000 ? `${(worst / 1000).toFixed(1)} s` : `${worst} ms`} over ${values.length}`;
  }
  return values
    .map((v) => (v < 0 ? 'none' : v >= 10_000 ? `${(v / 1000).toFixed(1)} s` : `${v} ms`))
    .join(', ');
}

function rss(r: RowResult): string {
  if (r.rssBeforeMiB === undefined || r.rssAfterMiB === undefined) return '–';
  const pct = r.rssBeforeMiB > 0 ? ((r.rssAfterMiB - r.rssBeforeMiB) / r.rssBeforeMiB) * 100 : 0;
  const peak = r.rssPeakMiB === undefined ? '' : ` (peak ${Math.round(r.rssPeakMiB)})`;
  return `${Math.round(r.rssBeforeMiB)} → ${Math.round(r.rssAfterMiB)} (${pct >= 0 ? '+' : ''}${pct.toFixed(0)}%)${peak}`;
}

export function renderTable(rows: readonly RowResult[]): string {
  const head =
    '| row | ack | acked | stored | delivered live | lost | dup | gaps | out of order | acks back after | live back after | broker RSS MiB before → after | s |\n' +
    '|---|---|--:|--:|--:|--:|--:|--:|--:|---|---|---|--:|';
  const lines = rows.map(
    (r) =>
      `| ${r.row} | ${r.ack} | ${int(r.acked)} | ${int(r.stored)} | ${int(r.delivered)} | ${r.faults.lost} | ` +
      `${r.faults.duplicated} | ${r.faults.gaps} | ${r.faults.outOfOrder} | ${ms(r.ackRecoveryMs)} | ` +
      `${ms(r.deliveryRecoveryMs)} | ${rss(r)} | ${r.seconds} |`,
  );
  const notes = rows
    .filter((r) => r.notes)
    .map((r) => `- **${r.row}** (${r.ack}): ${r.notes}`)
    .join('\n');
  return `${head}\n${lines.join('\n')}\n${notes === '' ? '' : `\n${notes}\n`}`;
}

/** What each row injects, once per row name. */
export function renderInjections(rows: readonly RowResult[]): string {
  const seen = new Map<string, RowResult[]>();
  for (const r of rows) seen.set(r.row, [...(seen.get(r.row) ?? []), r]);
  const lines = [...seen].map(
    ([row, rs]) => `| ${row} | ${[...new Set(rs.map((r) => r.ack))].join(', ')} | ${rs[0]?.injects ?? ''} |`,
  );
  return `| row | ack levels | injects |\n|---|---|---|\n${lines.join('\n')}\n`;
}

/** The generated part of docs/reliability.md. */
export function renderSection(rows: readonly RowResult[]): string {
  return `\n${renderInjections(rows)}\n${renderTable(rows)}`;
}

function main(): void {
  const rows = readResults(RESULTS_PATH);
  const table = renderSection(rows);
  const at = process.argv.indexOf('--update');
  if (at < 0) {
    process.stdout.write(table);
    return;
  }
  const file = process.argv[at + 1];
  if (!file) throw new Error('--update needs a file');
  const doc = readFileSync(file, 'utf8');
  const start = doc.indexOf(TABLE_START);
  const end = doc.indexOf(TABLE_END);
  if (start < 0 || end < start) throw new Error(`${file} has no ${TABLE_START} … ${TABLE_END} markers`);
  writeFileSync(file, `${doc.slice(0, start + TABLE_START.length)}\n${table}${doc.slice(end)}`);
  process.stdout.write(`updated ${file} from ${RESULTS_PATH} (${rows.length} rows)\n`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
