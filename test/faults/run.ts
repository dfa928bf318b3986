/**
 * `make test-faults`: runs test/faults/*.test.js (not part of `make test`) with a fresh
 * results file, then prints the table of figures (report.ts).
 *
 *   RS_SOAK_SECONDS   length of the soak row (default 600)
 *   RS_FAULTS_ONLY    a substring: run only the files whose name contains it
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RESULTS_PATH } from './harness.js';
import { readResults, renderSection } from './report.js';

const here = dirname(fileURLToPath(import.meta.url));
const only = process.env.RS_FAULTS_ONLY ?? '';
const files = readdirSync(here)
  .filter((f) => f.endsWith('.test.js') && f.includes(only))
  .sort()
  .map((f) => join(here, f));
rmSync(RESULTS_PATH, { force: true });
const r = spawnSync(
  process.execPath,
  ['--test', '--test-concurrency=1', '--test-timeout=1500000', ...files],
  { stdio: 'inherit' },
);
process.stdout.write(
  `\nFault suite figures (${RESULTS_PATH}):\n\n${renderSection(readResults(RESULTS_PATH))}\n`,
);
process.exit(r.status ?? 1);
