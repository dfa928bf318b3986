/**
 * Renders the docs report again from a saved results file, without rerunning the bench:
 * `node dist/bench/docs-report.js bench/results/<date>.json` rewrites docs/bench/*.svg and
 * the generated block of docs/benchmarks.md (see bench/lib/docs-report.ts).
 */
import { writeDocsReportFromFile } from './lib/docs-report.js';

const file = process.argv[2];
if (!file || process.argv.length > 3) {
  process.stderr.write('usage: node dist/bench/docs-report.js <bench/results/DATE.json>\n');
  process.exit(2);
}
for (const written of writeDocsReportFromFile(file)) process.stdout.write(`wrote ${written}\n`);
