// The broker itself fails: kill -9 (restarted on the same ports) and SIGSTOP / SIGCONT,
// under both ack levels, while producers publish and a subscriber listens. Every acked
// event is stored once, in send order, gap-free; the subscriber resumes from its cursor
// and ends up with exactly what is stored.
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { AckLevel } from '../../src/client/ingest-client.js';
import { runRow } from './harness.js';

for (const ack of ['ACCEPTED', 'PERSISTED'] as const satisfies readonly AckLevel[]) {
  test(`broker kill -9 under load (${ack}): nothing acked lost, nothing twice, no gap`, async () => {
    await runRow({
      row: `broker kill -9 ×2`,
      injects: 'SIGKILL the broker, restart it on the same ports (twice)',
      ack,
      brokerReplaced: true,
      async inject(ctx) {
        for (let n = 0; n < 2; n++) {
          await ctx.broker.kill();
          ctx.cleared(); // recovery includes the restart
          await sleep(500);
          await ctx.broker.restart();
          await sleep(3_000);
        }
      },
    });
  });

  test(`broker SIGSTOP 6 s then SIGCONT under load (${ack}): nothing acked lost, nothing twice, no gap`, async () => {
    await runRow({
      row: 'broker SIGSTOP 6 s',
      injects: "SIGSTOP the broker for 6 s (past the producers' 5 s deadline), then SIGCONT",
      ack,
      async inject(ctx) {
        ctx.broker.pause();
        await sleep(6_000);
        ctx.broker.resume();
        ctx.cleared();
      },
    });
  });
}
