// Invariant 4: an event acknowledged to a producer is never lost by a broker crash.
// The broker runs as its own process and is killed with SIGKILL twice while a producer
// streams with PERSISTED acks; the producer resends what was not acked, as a client must.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IngestClient } from '../src/client/ingest-client.js';
import { tokenEvent } from './helpers/events.js';
import {
  type BrokerProcess,
  brokerConfig,
  expectGapFree,
  randomName,
  spawnBroker,
  startServers,
  threadRows,
} from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

const TOTAL = 1200;
const BATCH = 10;
const WINDOW = 4;

test('kill -9 the broker twice while a producer streams PERSISTED: every acked event stored once, seq gap-free', async () => {
  await using servers = await startServers();
  const config = brokerConfig(servers);
  const t = randomName('t-');

  let broker: BrokerProcess = await spawnBroker(config);
  let up: Promise<void> = Promise.resolve();
  const acked = new Map<string, number>();
  let kills = 0;

  const produce = async (): Promise<void> => {
    let next = 0; // first batch start not yet acked
    while (next < TOTAL) {
      await up;
      const client = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
      const stream = client.openStream();
      const inflight: { start: number; done: Promise<unknown> }[] = [];
      let sent = next;
      try {
        while (next < TOTAL) {
          while (inflight.length < WINDOW && sent < TOTAL) {
            const start = sent;
            const batch = Array.from({ length: Math.min(BATCH, TOTAL - start) }, (_, k) =>
              tokenEvent(t, start + k),
            );
            inflight.push({
              start,
              done: stream.send(batch, 'PERSISTED').then((acks) => {
                for (const a of acks) acked.set(a.event_id, a.seq);
              }),
            });
            sent += batch.length;
          }
          await inflight[0]?.done;
          inflight.shift();
          next = inflight[0]?.start ?? sent;
        }
        await stream.end();
      } catch {
        // The broker died: everything from `next` on is resent, with the same event_ids.
        for (const f of inflight) f.done.catch(() => undefined);
        await new Promise((r) => setTimeout(r, 50));
      } finally {
        client.close();
      }
    }
  };

  const killer = async (): Promise<void> => {
    for (const threshold of [300, 700]) {
      await waitFor(() => acked.size >= threshold, { timeoutMs: 60_000, what: `${threshold} acks` });
      let restarted!: () => void;
      up = new Promise((r) => {
        restarted = r;
      });
      await broker.kill();
      kills++;
      broker = await spawnBroker(config);
      restarted();
    }
  };

  await Promise.all([produce(), killer()]);
  await broker.stop();
  assert.equal(kills, 2);

  const rows = await threadRows(servers.db, t);
  // Stored exactly once, nothing missing, no gap.
  assert.equal(expectGapFree(rows.map((r) => r.seq)), TOTAL);
  assert.equal(new Set(rows.map((r) => r.event_id)).size, TOTAL);
  // Every acked event is there, with the seq its ack named.
  const bySeq = new Map(rows.map((r) => [r.event_id, r.seq]));
  for (const [id, seq] of acked) assert.equal(bySeq.get(id), seq, `acked ${id}`);
  assert.equal(acked.size, TOTAL);
  // Send order survived the crashes.
  assert.deepEqual(
    rows.map((r) => (r.content as { i: number }).i),
    Array.from({ length: TOTAL }, (_, i) => i),
  );
});
