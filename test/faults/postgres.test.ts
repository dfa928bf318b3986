// Postgres fails under load: a fast restart (`pg_ctl -m fast`: SIGINT), an immediate one
// (`-m immediate`: SIGQUIT, crash recovery at start) and pg_terminate_backend of every
// broker connection. The broker stays up, retries, and loses nothing; PERSISTED acks
// resume by themselves.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { runRow } from './harness.js';

test('Postgres pg_ctl -m fast restart under load: nothing lost, the broker recovers by itself', async () => {
  await runRow({
    row: 'Postgres restart -m fast',
    injects: 'pg_ctl -m fast (SIGINT to the postmaster), start again on the same port',
    ack: 'PERSISTED',
    async inject(ctx) {
      await ctx.servers.pg.restart('fast');
      ctx.cleared();
    },
  });
});

test('Postgres pg_ctl -m immediate restart under load: nothing lost, the broker recovers by itself', async () => {
  await runRow({
    row: 'Postgres restart -m immediate',
    injects: 'pg_ctl -m immediate (SIGQUIT: no checkpoint, WAL recovery at start), start again',
    ack: 'PERSISTED',
    async inject(ctx) {
      await ctx.servers.pg.restart('immediate');
      ctx.cleared();
    },
  });
});

test('pg_terminate_backend of the broker connections under load: nothing lost, the broker recovers', async () => {
  await runRow({
    row: 'pg_terminate_backend ×5',
    injects: "pg_terminate_backend of every backend with application_name 'runstream', 5 times, 1 s apart",
    ack: 'PERSISTED',
    async inject(ctx) {
      for (let n = 0; n < 5; n++) {
        const { rows } = await ctx.servers.db.query<{ n: string }>(
          `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity
            WHERE application_name = 'runstream' AND pid <> pg_backend_pid()`,
        );
        assert.ok(Number(rows[0]?.n) > 0, 'the broker had connections to end');
        ctx.cleared();
        await sleep(1_000);
      }
    },
  });
});

test('the broker (re)started while Postgres is down: it serves, waits for Postgres, and loses nothing', async () => {
  await runRow({
    row: 'broker started with Postgres down',
    injects:
      'stop Postgres, kill -9 the broker and start it again while Postgres is down; 3 s later start Postgres',
    ack: 'ACCEPTED',
    brokerReplaced: true,
    async inject(ctx) {
      await ctx.servers.pg.stop();
      await ctx.broker.kill();
      await ctx.broker.restart(); // resolves once the broker serves, Postgres or not
      const ready = await fetch(`${ctx.broker.httpUrl}/readyz`);
      assert.equal(ready.status, 503, 'not ready without Postgres');
      await sleep(3_000);
      await ctx.servers.pg.restart();
      ctx.cleared();
    },
  });
});
