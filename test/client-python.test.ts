// The Python client package (clients/python, importable as `runstream`) against the real
// broker: pytest, from Debian's python3-pytest, runs clients/python/tests with the stack's
// addresses. Its publisher, resuming subscriber, History client, DeerFlow RunEventStore and
// LangChain callback are tested there; this test fails with pytest's report when any fails.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { freePort } from './helpers/proc.js';
import { type BrokerProcess, brokerConfig, spawnBroker, startServers } from './helpers/stack.js';
import { startTlsGrpcProxy } from './helpers/tls-proxy.js';

const PYTHON = '/usr/bin/python3';
const PACKAGE = fileURLToPath(new URL('../../clients/python/', import.meta.url));

function run(
  cmd: string,
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: PACKAGE,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => {
      output += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      output += d.toString();
    });
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code: code ?? 1, output }));
  });
}

test('the Python client package passes its pytest suite against a real broker', async (t) => {
  const check = await run(PYTHON, ['-c', 'import grpc, google.protobuf, websockets, pytest'], {});
  assert.equal(check.code, 0, `Debian's Python packages are missing (run make deps):\n${check.output}`);

  // The broker is a child process on fixed ports, so a test can have it killed and restarted:
  // POST RUNSTREAM_RESTART_URL kills it with SIGKILL, starts it again and answers once it is up.
  await using servers = await startServers();
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const config = brokerConfig(servers, { grpcPort, httpPort });
  let broker: BrokerProcess = await spawnBroker(config);
  const restarter = createServer((_req, res) => {
    void (async () => {
      await broker.kill();
      broker = await spawnBroker(config);
      res.writeHead(200).end('restarted');
    })().catch((err: unknown) => res.writeHead(500).end(String(err)));
  });
  await new Promise<void>((resolve) => restarter.listen(0, '127.0.0.1', resolve));
  t.after(async () => {
    await new Promise<void>((resolve) => restarter.close(() => resolve()));
    await broker.stop();
  });
  await using tls = await startTlsGrpcProxy(grpcPort);
  const env = {
    RUNSTREAM_GRPC: `127.0.0.1:${grpcPort}`,
    RUNSTREAM_GRPC_TLS: tls.target,
    RUNSTREAM_TLS_CA: tls.certPath,
    RUNSTREAM_HTTP: `http://127.0.0.1:${httpPort}`,
    RUNSTREAM_WS: `ws://127.0.0.1:${httpPort}/v1/ws`,
    RUNSTREAM_RESTART_URL: `http://127.0.0.1:${(restarter.address() as AddressInfo).port}/restart`,
    PYTHONPATH: PACKAGE,
    PYTHONDONTWRITEBYTECODE: '1',
    no_proxy: '*',
  };
  // Importable with PYTHONPATH alone, as the README says.
  const imported = await run(
    PYTHON,
    ['-c', 'import runstream, runstream.deerflow, runstream.langchain'],
    env,
  );
  assert.equal(imported.code, 0, imported.output);

  // `pip install ./clients/python` works offline (a copy, so the build leaves nothing in the tree).
  const tmp = mkdtempSync(join(tmpdir(), 'rs-pip-'));
  try {
    cpSync(PACKAGE, join(tmp, 'src'), { recursive: true, filter: (p) => !p.includes('__pycache__') });
    const pip = ['-m', 'pip', 'install', '-q', '--no-index', '--no-build-isolation', '--no-deps'];
    const installed = await run(PYTHON, [...pip, '--target', join(tmp, 'site'), join(tmp, 'src')], {});
    assert.equal(installed.code, 0, installed.output);
    const fromSite = await run(PYTHON, ['-c', 'import runstream.deerflow, runstream.v1.runstream_pb2'], {
      PYTHONPATH: join(tmp, 'site'),
    });
    assert.equal(fromSite.code, 0, fromSite.output);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }

  const result = await run(PYTHON, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests'], env);
  t.diagnostic(result.output.trim().split('\n').at(-1) ?? '');
  assert.equal(result.code, 0, result.output);
});
