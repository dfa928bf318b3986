// nats-server fails under load: SIGTERM (an orchestrator's restart) and SIGKILL, each
// followed by a start on the same port and store. The broker stays up and reconnects;
// publishes in flight are issued again; the live subscriber catches up to the head.
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { AckLevel } from '../../src/client/ingest-client.js';
import { runRow } from './harness.js';

for (const ack of ['ACCEPTED', 'PERSISTED'] as const satisfies readonly AckLevel[]) {
  test(`NATS SIGTERM restart under load (${ack}): the broker recovers by itself, nothing lost`, async () => {
    await runRow({
      row: 'NATS SIGTERM restart ×2',
      injects: 'SIGTERM nats-server, start it again on the same port and store (twice)',
      ack,
      async inject(ctx) {
        for (let n = 0; n < 2; n++) {
          await ctx.servers.nats.restart();
          ctx.cleared();
          await sleep(3_000);
        }
      },
    });
  });

  test(`NATS SIGKILL, down 2 s, restart under load (${ack}): the broker recovers by itself, nothing lost`, async () => {
    await runRow({
      row: 'NATS SIGKILL, down 2 s',
      injects: 'SIGKILL nats-server, leave it down 2 s, start it on the same port and store',
      ack,
      async inject(ctx) {
        await ctx.servers.nats.kill();
        await sleep(2_000);
        await ctx.servers.nats.restart();
        ctx.cleared();
      },
    });
  });
}
