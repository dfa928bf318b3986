// A broker that starts while Postgres is down does not exit: it serves, says it is not
// ready, takes ACCEPTED events into the log, and once Postgres is up applies its
// migrations, reports ready, and stores everything, gap-free.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { IngestClient } from '../src/client/ingest-client.js';
import type { Config } from '../src/config.js';
import { tokenEvent } from './helpers/events.js';
import {
  brokerConfig,
  expectGapFree,
  MAIN_JS,
  randomName,
  spawnBroker,
  startServers,
  threadRows,
} from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

/** The environment of a broker process on these servers, on ports of its own choosing. */
function brokerEnv(config: Config): NodeJS.ProcessEnv {
  return {
    ...process.env,
    RS_HOST: '127.0.0.1',
    GRPC_PORT: '0',
    HTTP_PORT: '0',
    NATS_URL: config.natsUrl,
    DATABASE_URL: config.databaseUrl,
    RS_STREAM: config.streamName,
    RS_SUBJECT_PREFIX: config.subjectPrefix,
  };
}

test('started with Postgres down, the broker waits for it (not ready), then stores everything', async () => {
  await using servers = await startServers({ own: true });
  const config = brokerConfig(servers);
  await servers.pg.stop();
  const broker = await spawnBroker(config);
  const client = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  try {
    const readyz = async () => (await fetch(`http://127.0.0.1:${broker.httpPort}/readyz`)).status;
    assert.equal(await readyz(), 503, 'not ready without Postgres');
    const t = randomName('t-');
    await client.publish([tokenEvent(t, 0), tokenEvent(t, 1)], 'ACCEPTED');
    assert.equal(broker.child.exitCode, null, 'still running');

    await servers.pg.restart();
    await waitFor(async () => (await readyz()) === 200, {
      timeoutMs: 60_000,
      what: 'ready once Postgres is up',
    });
    const [ack] = await client.publish([tokenEvent(t, 2)], 'PERSISTED');
    assert.equal(ack?.seq, 3);
    const rows = await threadRows(servers.db, t);
    assert.equal(expectGapFree(rows.map((r) => r.seq)), 3);
    assert.deepEqual(
      rows.map((r) => r.event_id),
      ['e0', 'e1', 'e2'],
    );
  } finally {
    client.close();
    await broker.stop();
  }
});

test('a SIGTERM during start-up is kept: the broker starts, then shuts down gracefully (exit 0)', async () => {
  await using servers = await startServers({ own: true });
  const config = brokerConfig(servers);
  await servers.pg.stop();
  // With Postgres down, start-up waits for it for a few seconds before it serves: signal then.
  const child = spawn(process.execPath, [MAIN_JS], {
    env: { ...brokerEnv(config), LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  await waitFor(() => out.includes('postgres unreachable'), {
    timeoutMs: 30_000,
    what: 'start-up to wait for Postgres',
  });
  assert.ok(!out.includes('runstream started'), 'still starting');
  child.kill('SIGTERM');
  const { code, signal } = await exited;
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, out.slice(-2000));
  // By when each line was logged (pino's `time`), not where it landed in the pipe: on a loaded
  // machine a line that met a full stdout pipe has reached it after later ones.
  const lines = out
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { time: number; msg: string });
  const at = (msg: string): number => {
    const line = lines.find((l) => l.msg === msg);
    assert.ok(line, `"${msg}" logged: ${out.slice(-2000)}`);
    return line.time;
  };
  assert.ok(at('runstream started') <= at('shutting down'), out.slice(-2000));
  assert.ok(at('shutting down') <= at('runstream stopped'), out.slice(-2000));
  assert.ok(!lines.some((l) => l.msg.startsWith('migrations failed')), 'a shutdown is no failure');
});

test('a broker started and closed in-process leaves no timer that keeps the process running', async () => {
  await using servers = await startServers({ own: true });
  const config = brokerConfig(servers);
  // An embedding program (or a test) that closes its broker must be able to just end: the
  // timers that keep Node's event loop alive are listed by getActiveResourcesInfo() (sockets
  // too, but those are still finishing their close in that turn).
  const script = `
    const { startBroker } = await import(${JSON.stringify(new URL('../src/broker.js', import.meta.url).href)});
    const { loadConfig } = await import(${JSON.stringify(new URL('../src/config.js', import.meta.url).href)});
    const { createLogger } = await import(${JSON.stringify(new URL('../src/logger.js', import.meta.url).href)});
    const config = loadConfig(process.env);
    const broker = await startBroker(config, createLogger('warn'));
    await broker.close();
    console.log(JSON.stringify(process.getActiveResourcesInfo()));`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    env: brokerEnv(config),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  assert.equal(code, 0, out);
  const line = out.split('\n').find((l) => l.startsWith('['));
  assert.ok(line, `the resources were printed: ${out}`);
  const timers = (JSON.parse(line) as string[]).filter((r) => r === 'Timeout');
  assert.deepEqual(timers, [], 'no timer of the broker is left to keep the process running');
});
