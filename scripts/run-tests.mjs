#!/usr/bin/env node
// `npm test`: every compiled test file, named one by one. `node --test dist/test/` runs a
// directory on Node 20 but not on Node 22+, which read test arguments as glob patterns;
// named files work on all of them. Extra arguments (e.g. --test-name-pattern) pass through.
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

const dir = join(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '..', 'dist', 'test');
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.test.js'))
  .sort()
  .map((f) => join(dir, f));
const child = spawn(
  process.execPath,
  ['--test', '--test-concurrency=2', '--test-timeout=300000', ...process.argv.slice(2), ...files],
  { stdio: 'inherit' },
);
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
