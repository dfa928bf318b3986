// A broker that starts while Postgres is down does not exit: it serves, says it is not
// ready, takes ACCEPTED events into the log, and once Postgres is up applies its
// migrations, reports ready, and stores everything, gap-free.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IngestClient } from '../src/client/ingest-client.js';
import { tokenEvent } from './helpers/events.js';
import {
  brokerConfig,
  expectGapFree,
  randomName,
  spawnBroker,
  startServers,
  threadRows,
} from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

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
