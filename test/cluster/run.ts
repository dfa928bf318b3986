/**
 * `make test-cluster`: runs test/cluster/*.test.js (not part of `make test`) on a 3-node
 * nats-server cluster with a fresh results file, then prints the table of figures
 * (test/faults/report.ts renders it).
 *
 *   RS_CLUSTER_ONLY   a substring: run only the files whose name contains it
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readResults, renderSection } from '../faults/report.js';

const here = dirname(fileURLToPath(import.meta.url));
const results = join(here, '..', '..', 'cluster-results.jsonl');
const only = process.env.RS_CLUSTER_ONLY ?? '';
const files = readdirSync(here)
  .filter((f) => f.endsWith('.test.js') && f.includes(only))
  .sort()
  .map((f) => join(here, f));
rmSync(results, { force: true });
const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', '--test-timeout=600000', ...files], {
  stdio: 'inherit',
  env: { ...process.env, RS_FAULTS_RESULTS: results },
});
process.stdout.write(`\nCluster suite figures (${results}):\n\n${renderSection(readResults(results))}\n`);
process.exit(r.status ?? 1);
