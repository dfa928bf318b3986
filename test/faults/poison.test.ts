// A poison event under load: events that pass ingest's (here loosened) validation but
// that Postgres refuses ("stack depth limit exceeded") arrive on one thread among steady
// traffic on others. Each goes to dead_letters with a notice in its place; no thread
// stalls, nothing else is lost, seq stays gap-free.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { runRow } from './harness.js';

const POISON_EVERY = 97;

test('poison events under load go to dead_letters and block no thread', async () => {
  await runRow({
    row: 'poison events',
    injects: `every ${POISON_EVERY}th event of one thread of 4 nests 20,000 deep (RS_TEST_LOOSEN_VALIDATION=json-depth lets it in; Postgres refuses it)`,
    ack: 'PERSISTED',
    brokerEnv: { RS_TEST_LOOSEN_VALIDATION: 'json-depth' },
    poison: (k, i) => k === 0 && i % POISON_EVERY === 5,
    async inject() {
      await sleep(6_000);
    },
    async verify(ctx, reports) {
      const [poisoned, ...others] = reports;
      const acked = ctx.load.acked.get(poisoned?.thread as string) as Map<string, unknown>;
      const sent = [...acked.keys()].filter((id) => id.startsWith('p'));
      assert.ok(sent.length >= 3, `poison events were sent (${sent.length})`);
      assert.equal(poisoned?.rejected, sent.length, 'each poison event has its notice');
      const { rows } = await ctx.servers.db.query<{ event_id: string; sqlstate: string }>(
        'SELECT event_id, sqlstate FROM dead_letters WHERE thread_id = $1 ORDER BY event_id',
        [poisoned?.thread],
      );
      assert.deepEqual(rows.map((r) => r.event_id).sort(), [...sent].sort(), 'each is dead-lettered once');
      assert.ok(rows.every((r) => r.sqlstate === '54001'));
      for (const r of others) assert.equal(r.rejected, 0, 'other threads untouched');
      ctx.note(`${sent.length} poison events dead-lettered`);
    },
  });
});
