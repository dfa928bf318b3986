import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { postgresTimings, startNatsServer, startPostgres, waitFor } from './helpers/index.js';

async function query<T extends pg.QueryResultRow>(url: string, sql: string, params: unknown[] = []) {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<T>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

const ms = (t0: number) => `${(performance.now() - t0).toFixed(0)} ms`;

test('waitFor returns the first truthy value and times out descriptively', async () => {
  let n = 0;
  assert.equal(await waitFor(() => (++n >= 3 ? n : undefined), { intervalMs: 1 }), 3);
  await assert.rejects(
    waitFor(() => false, { timeoutMs: 50, intervalMs: 10, what: 'the impossible' }),
    /Timed out after \d+ ms \(\d+ attempts\) waiting for the impossible/,
  );
  await assert.rejects(
    waitFor(
      () => {
        throw new Error('boom');
      },
      { timeoutMs: 30, intervalMs: 10 },
    ),
    /last error: boom/,
  );
});

test('nats-server: JetStream on, survives kill -9 + restart on the same port', async (t) => {
  let t0 = performance.now();
  await using nats = await startNatsServer({ useEnv: false });
  t.diagnostic(`nats-server start: ${ms(t0)}`);
  assert.equal(nats.external, false);
  assert.match(nats.url, /^nats:\/\/127\.0\.0\.1:\d+$/);
  assert.equal(nats.url, `nats://127.0.0.1:${nats.port}`);

  const nc = await connect({ servers: nats.url, reconnectTimeWait: 100, maxReconnectAttempts: -1 });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'SELFTEST', subjects: ['selftest.>'] });
    const js = jetstream(nc);
    await js.publish('selftest.a', 'hello');
    assert.equal((await jsm.streams.info('SELFTEST')).state.messages, 1);

    const port = nats.port;
    t0 = performance.now();
    await nats.kill();
    t.diagnostic(`nats-server kill -9: ${ms(t0)}`);
    t0 = performance.now();
    await nats.restart();
    t.diagnostic(`nats-server restart: ${ms(t0)}`);
    assert.equal(nats.port, port, 'restart must reuse the port');

    // The original connection reconnects to the same URL (nats.js rejects flush() while disconnected, so poll);
    // the stream and its message survived.
    await waitFor(() => nc.flush().then(() => true), { timeoutMs: 10_000, what: 'NATS client reconnect' });
    const info = await (await jetstreamManager(nc)).streams.info('SELFTEST');
    assert.equal(info.state.messages, 1);
    const msg = await (await jetstreamManager(nc)).streams.getMessage('SELFTEST', { seq: 1 });
    assert.equal(msg?.string(), 'hello');
  } finally {
    await nc.close();
  }

  await nats.stop();
  await nats.stop(); // idempotent
  await assert.rejects(connect({ servers: nats.url, reconnect: false, timeout: 500 }));
});

test('nats-server: NATS_URL gives an external handle', async () => {
  await using real = await startNatsServer({ useEnv: false });
  const saved = process.env.NATS_URL;
  process.env.NATS_URL = real.url;
  try {
    await using ext = await startNatsServer();
    assert.equal(ext.external, true);
    assert.equal(ext.url, real.url);
    assert.equal(ext.port, real.port);
    await assert.rejects(ext.kill(), /NATS_URL/);
    await assert.rejects(ext.restart(), /NATS_URL/);
    await ext.stop(); // no-op
    const nc = await connect({ servers: ext.url });
    await nc.close();
  } finally {
    if (saved === undefined) delete process.env.NATS_URL;
    else process.env.NATS_URL = saved;
  }
});

test('postgres: select 1, data survives kill -9 + restart', async (t) => {
  let t0 = performance.now();
  await using pgh = await startPostgres({ useEnv: false });
  t.diagnostic(`postgres first start (incl. template initdb): ${ms(t0)}`);
  assert.equal(pgh.external, false);
  assert.match(pgh.url, /^postgres:\/\/postgres@127\.0\.0\.1:\d+\/rs_test_[0-9a-f]{12}$/);
  assert.equal(pgh.adminUrl, `postgres://postgres@127.0.0.1:${pgh.port}/postgres`);

  assert.deepEqual(await query(pgh.url, 'select 1 as one'), [{ one: 1 }]);
  await query(pgh.url, 'create table t (id int primary key, v text)');
  await query(pgh.url, `insert into t values (1, 'survives')`);

  // A client that is connected while the server dies must not crash the process.
  const held = new pg.Client({ connectionString: pgh.url });
  held.on('error', () => {});
  await held.connect();

  const port = pgh.port;
  t0 = performance.now();
  await pgh.kill();
  t.diagnostic(`postgres kill -9 (group): ${ms(t0)}`);
  await held.end().catch(() => {});
  t0 = performance.now();
  await pgh.restart(); // stale postmaster.pid left by the crash
  t.diagnostic(`postgres restart after kill (crash recovery): ${ms(t0)}`);
  assert.equal(pgh.port, port);
  assert.deepEqual(await query(pgh.url, 'select v from t where id = 1'), [{ v: 'survives' }]);

  const other = await pgh.createDatabase();
  assert.notEqual(other, pgh.url);
  assert.deepEqual(
    await query(other, `select count(*)::int as n from pg_tables where schemaname = 'public'`),
    [{ n: 0 }],
  );

  t0 = performance.now();
  await pgh.stop();
  t.diagnostic(`postgres fast shutdown: ${ms(t0)}`);
  await pgh.stop(); // idempotent
  await pgh.restart(); // clean restart also works
  assert.deepEqual(await query(pgh.url, 'select count(*)::int as n from t'), [{ n: 1 }]);
});

test('postgres: more clusters reuse the template; dispose removes the data dir', async (t) => {
  const t0 = performance.now();
  const [a, b] = await Promise.all([startPostgres({ useEnv: false }), startPostgres({ useEnv: false })]);
  t.diagnostic(`2 more clusters in parallel: ${ms(t0)}`);
  assert.notEqual(a.port, b.port);
  await Promise.all(
    [a, b].map(async (h) => assert.deepEqual(await query(h.url, 'select 1 as x'), [{ x: 1 }])),
  );
  const dataDirs = (
    await query<{ d: string }>(a.adminUrl, `select current_setting('data_directory') as d`)
  ).map((r) => r.d);
  await a[Symbol.asyncDispose]();
  await b[Symbol.asyncDispose]();
  for (const d of dataDirs) assert.equal(existsSync(d), false, `${d} removed`);
  t.diagnostic(
    `postgres timings: ${JSON.stringify(postgresTimings(), (_k, v) => (typeof v === 'number' ? Math.round(v) : v))}`,
  );
});

test('postgres: kill -9 then dispose leaks nothing (no SysV segment, no data dir)', async () => {
  const h = await startPostgres({ useEnv: false });
  const [row] = await query<{ d: string }>(h.adminUrl, `select current_setting('data_directory') as d`);
  const dataDir = row?.d ?? assert.fail('no data_directory');
  const shmid = readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[6]?.trim().split(/\s+/)[1];
  assert.match(shmid ?? '', /^\d+$/);
  const segments = () =>
    readFileSync('/proc/sysvipc/shm', 'utf8')
      .split('\n')
      .slice(1)
      .map((l) => l.trim().split(/\s+/)[1]);
  assert.ok(segments().includes(shmid));
  await h.kill();
  assert.ok(segments().includes(shmid), 'a SIGKILLed postmaster leaves its segment behind');
  await h[Symbol.asyncDispose]();
  assert.ok(!segments().includes(shmid), 'dispose released it');
  assert.equal(existsSync(dataDir), false);
});

test('postgres: DATABASE_URL gives an external handle with its own database', async () => {
  await using real = await startPostgres({ useEnv: false });
  const saved = process.env.DATABASE_URL;
  process.env.DATABASE_URL = real.adminUrl;
  let extUrl: string;
  try {
    await using ext = await startPostgres();
    extUrl = ext.url;
    assert.equal(ext.external, true);
    assert.equal(ext.port, real.port);
    assert.match(
      ext.url,
      new RegExp(`^postgres://postgres@127\\.0\\.0\\.1:${real.port}/rs_test_[0-9a-f]{12}$`),
    );
    assert.deepEqual(await query(ext.url, 'select 1 as one'), [{ one: 1 }]);
    const extra = await ext.createDatabase();
    await query(extra, 'select 1');
    await assert.rejects(ext.kill(), /DATABASE_URL/);
    await assert.rejects(ext.restart(), /DATABASE_URL/);
  } finally {
    if (saved === undefined) delete process.env.DATABASE_URL;
    else process.env.DATABASE_URL = saved;
  }
  // Disposing the external handle dropped its databases.
  const names = await query<{ datname: string }>(
    real.adminUrl,
    `select datname from pg_database where datname like 'rs_test_%'`,
  );
  assert.deepEqual(
    names.map((r) => r.datname),
    [new URL(real.url).pathname.slice(1)],
    `only the spawned server's own db remains (external was ${extUrl})`,
  );
});

test('nats + postgres side by side', async (t) => {
  const t0 = performance.now();
  await using nats = await startNatsServer({ useEnv: false });
  await using db = await startPostgres({ useEnv: false });
  t.diagnostic(`nats + postgres (warm template) sequential start: ${ms(t0)}`);
  const nc = await connect({ servers: nats.url });
  await nc.close();
  assert.deepEqual(await query(db.url, 'select 1 as one'), [{ one: 1 }]);
});
