// The contract is polyglot: a Python client built from proto/ with the system's
// python3-grpcio publishes through both RPCs, and its events are stored and readable.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { randomName, startStack, threadRows } from './helpers/stack.js';

const run = promisify(execFile);
const PYTHON = '/usr/bin/python3';
const CLIENT = fileURLToPath(new URL('../../clients/python/runstream_publish.py', import.meta.url));

async function python(args: string[]): Promise<Record<string, unknown>> {
  const { stdout } = await run(PYTHON, [CLIENT, ...args], { timeout: 60_000 });
  return JSON.parse(stdout) as Record<string, unknown>;
}

test('a Python client publishes through the proto, unary and streaming, with both ack levels', async (t) => {
  // `make deps` installs python3-grpcio, python3-protobuf and protobuf-compiler; say so if absent.
  assert.ok(existsSync(PYTHON), `${PYTHON} is missing: run make deps`);
  try {
    await run(PYTHON, ['-c', 'import grpc, google.protobuf']);
  } catch {
    assert.fail('python3-grpcio / python3-protobuf are not installed: run `make deps`');
  }

  await using stack = await startStack();
  const thread = randomName('py-');

  const unary = (await python([
    '--target',
    stack.grpcTarget,
    '--thread',
    thread,
    '--run',
    'run-py',
    '--count',
    '25',
    '--batch',
    '10',
    '--ack',
    'persisted',
  ])) as { acks: { event_id: string; seq: number; duplicate: boolean }[] };
  assert.deepEqual(
    unary.acks.map((a) => [a.event_id, a.seq, a.duplicate]),
    Array.from({ length: 25 }, (_, i) => [`py-${i + 1}`, i + 1, false]),
  );

  // The same ids again over PublishStream: all duplicates, same seqs, nothing new stored.
  const again = (await python([
    '--target',
    stack.grpcTarget,
    '--thread',
    thread,
    '--run',
    'run-py',
    '--count',
    '30',
    '--batch',
    '7',
    '--stream',
    '--ack',
    'persisted',
  ])) as { acks: { event_id: string; seq: number; duplicate: boolean }[] };
  assert.deepEqual(
    again.acks.map((a) => [a.seq, a.duplicate]),
    Array.from({ length: 30 }, (_, i) => [i + 1, i < 25]),
  );

  const rows = await threadRows(stack.db, thread);
  assert.equal(rows.length, 30);
  assert.match(JSON.stringify(rows[0]?.content), /你好/);

  const invalid = (await python([
    '--target',
    stack.grpcTarget,
    '--thread',
    thread,
    '--run',
    'run-py',
    '--invalid',
  ])) as {
    error: { code: string; details: string };
  };
  assert.equal(invalid.error.code, 'INVALID_ARGUMENT');
  assert.match(invalid.error.details, /events\[0\]\.content_json/);
  assert.equal((await threadRows(stack.db, thread)).length, 30);
  t.diagnostic(`python client stored ${rows.length} events`);
});
