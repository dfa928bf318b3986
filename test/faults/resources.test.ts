// Resources stay bounded under abuse while normal traffic goes on: a PublishStream whose
// producer never reads its acks, and subscribe/unsubscribe churn (back to back, and
// sockets closed right after subscribing). Normal traffic loses nothing; the broker's
// RSS and its NATS subscriptions come back to where they were.
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type * as grpc from '@grpc/grpc-js';
import WebSocket from 'ws';
import { loadProto } from '../../src/proto.js';
import { waitFor } from '../helpers/wait.js';
import { type FaultBroker, runRow } from './harness.js';

const BIG_CONTENT = JSON.stringify('x'.repeat(64 * 1024));
/** Growth the broker may show while a stream that never reads is held (its budgets are ~tens of MiB). */
const HELD_BOUND_MIB = 200;

test('a producer that never reads its acks: held at a bound, other producers lose nothing', async () => {
  await runRow({
    row: 'producer never reads acks',
    injects:
      'a raw HTTP/2 PublishStream that writes 64 KiB events (PERSISTED) and never reads a response, until the broker stops reading; then cancelled',
    ack: 'PERSISTED',
    async inject(ctx) {
      const before = ctx.broker.rssMiB();
      const session = http2.connect(`http://${ctx.broker.grpcTarget}`);
      session.on('error', () => undefined);
      const stream = session.request({
        ':method': 'POST',
        ':path': '/runstream.v1.Ingest/PublishStream',
        'content-type': 'application/grpc',
        te: 'trailers',
      });
      stream.on('error', () => undefined);
      stream.pause();
      const ingest = loadProto().packageDefinition['runstream.v1.Ingest'] as grpc.ServiceDefinition;
      const serialize = ingest.PublishStream?.requestSerialize as (v: unknown) => Buffer;
      let offered = 0;
      let blocked = false;
      for (let i = 0; i < 20_000 && !blocked; i++) {
        const message = serialize({
          events: [
            {
              thread_id: 'never-reads',
              run_id: 'r',
              event_id: `n${i}`,
              event_type: 'ai_chunk',
              category: 'MESSAGE',
              content_json: BIG_CONTENT,
            },
          ],
          ack: 'PERSISTED',
        });
        const frame = Buffer.alloc(5 + message.length);
        frame.writeUInt32BE(message.length, 1);
        message.copy(frame, 5);
        offered += frame.length;
        if (!stream.write(frame)) {
          blocked = !(await Promise.race([
            new Promise<boolean>((r) => stream.once('drain', () => r(true))),
            sleep(3_000).then(() => false),
          ]));
        }
        if (i % 100 === 0) ctx.peak(ctx.broker.rssMiB());
      }
      const held = ctx.broker.rssMiB();
      ctx.peak(held);
      assert.ok(!stream.closed, `the broker ended the stream (${stream.rstCode ?? 'no RST'})`);
      assert.ok(blocked, `the broker read all ${offered >> 20} MiB offered without the acks being read`);
      assert.ok(
        held - before < HELD_BOUND_MIB,
        `broker RSS grew ${Math.round(held - before)} MiB (${before} → ${held}) for ${offered >> 20} MiB offered`,
      );
      ctx.note(
        `held after ${offered >> 20} MiB offered; RSS ${Math.round(before)} → ${Math.round(held)} MiB while held`,
      );
      await sleep(2_000); // normal traffic meanwhile
      stream.close(http2.constants.NGHTTP2_CANCEL);
      session.close();
      ctx.cleared();
    },
  });
});

/** The broker's NATS subscriptions, from nats-server's /connz. */
async function natsSubscriptions(monitorUrl: string, broker: FaultBroker): Promise<number> {
  const res = await fetch(`${monitorUrl}/connz?subs=1&limit=1024`);
  const body = (await res.json()) as { connections: { name?: string; subscriptions: number }[] };
  const mine = body.connections.filter((c) => c.name === `runstream-${broker.pid}`);
  assert.equal(mine.length, 1, 'one NATS connection of the broker');
  return mine[0]?.subscriptions ?? -1;
}

test('subscribe/unsubscribe churn under load: no NATS subscription left behind, RSS back, nothing lost', async () => {
  await runRow({
    row: 'subscribe/unsubscribe churn',
    injects:
      '5,000 subscribe+unsubscribe pairs back to back on one socket over 40 threads, and 200 sockets closed right after 5 subscribes each',
    ack: 'ACCEPTED',
    async inject(ctx) {
      const monitor = ctx.servers.nats.monitorUrl as string;
      const baseSubs = await natsSubscriptions(monitor, ctx.broker);
      const before = ctx.broker.rssMiB();
      const threads = [...ctx.load.o.threads, ...Array.from({ length: 36 }, (_, k) => `churn-${k}`)];
      const ws = new WebSocket(ctx.broker.wsUrl, { perMessageDeflate: false });
      await new Promise((r, j) => ws.once('open', r).once('error', j));
      let unsubscribed = 0;
      ws.on('message', (d) => {
        if ((JSON.parse(d.toString()) as { type: string }).type === 'unsubscribed') unsubscribed++;
      });
      const N = 5_000;
      for (let i = 0; i < N; i++) {
        ws.send(JSON.stringify({ type: 'subscribe', id: `s${i}`, thread_id: threads[i % threads.length] }));
        ws.send(JSON.stringify({ type: 'unsubscribe', id: `s${i}` }));
        if (i % 500 === 0) ctx.peak(ctx.broker.rssMiB());
      }
      await waitFor(() => unsubscribed === N, { timeoutMs: 120_000, what: `${N} unsubscribed frames` });
      for (let round = 0; round < 10; round++) {
        const socks = await Promise.all(
          Array.from(
            { length: 20 },
            () =>
              new Promise<WebSocket>((r, j) => {
                const s = new WebSocket(ctx.broker.wsUrl, { perMessageDeflate: false });
                s.once('open', () => r(s)).once('error', j);
              }),
          ),
        );
        socks.forEach((s, k) => {
          for (let j = 0; j < 5; j++) {
            s.send(
              JSON.stringify({
                type: 'subscribe',
                id: `c${j}`,
                thread_id: threads[(k + j) % threads.length],
              }),
            );
          }
          s.terminate();
        });
        ctx.peak(ctx.broker.rssMiB());
      }
      ws.close();
      let subs = -1;
      await waitFor(
        async () => {
          subs = await natsSubscriptions(monitor, ctx.broker);
          return subs === baseSubs;
        },
        { timeoutMs: 60_000, what: 'the broker back to its NATS subscriptions' },
      ).catch(() => assert.equal(subs, baseSubs, 'NATS subscriptions left behind by the churn'));
      const after = ctx.broker.rssMiB();
      ctx.note(
        `NATS subscriptions ${baseSubs} before, ${subs} after; RSS ${before} → ${after} MiB right after the churn`,
      );
      assert.ok(after - before < 100, `broker RSS grew ${Math.round(after - before)} MiB over the churn`);
      ctx.cleared();
    },
  });
});
