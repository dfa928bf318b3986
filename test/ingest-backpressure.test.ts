// Ingest holds a bounded amount of work per stream and per node. A PublishStream whose
// producer never reads its acks stops being read (HTTP/2 flow control pushes back on the
// producer) instead of growing the broker; other producers go on; unary requests past the
// node's in-flight byte budget are refused with RESOURCE_EXHAUSTED. The broker runs as a
// child process so that its memory is its own.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { type Event, IngestClient } from '../src/client/ingest-client.js';
import { loadProto } from '../src/proto.js';
import { tokenEvent } from './helpers/events.js';
import { brokerConfig, randomName, spawnBroker, startServers } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m?.[1] ?? 0) / 1024;
}

const CONTENT = JSON.stringify('x'.repeat(64 * 1024));

test('a PublishStream that never reads its acks is paused, not buffered: the broker stays bounded', async () => {
  await using servers = await startServers({ own: true });
  const broker = await spawnBroker(brokerConfig(servers));
  const pid = broker.child.pid as number;
  const client = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  try {
    const t = randomName('t-');
    // Warm up (JIT, pools, the thread's feeds) before taking the baseline.
    for (let i = 0; i < 20; i++)
      await client.publish([{ ...tokenEvent(t, -1 - i), content_json: CONTENT }], 'ACCEPTED');
    const base = rssMiB(pid);

    // A raw HTTP/2 client that never reads: grpc-js's own client keeps reading into memory
    // even when paused, so it cannot make the broker wait.
    const session = http2.connect(`http://127.0.0.1:${broker.grpcPort}`);
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
    let blockedAt = 0;
    for (let i = 0; i < 6000; i++) {
      const message = serialize({
        events: [{ ...tokenEvent(t, i), content_json: CONTENT }],
        ack: 'PERSISTED',
      });
      const frame = Buffer.alloc(5 + message.length);
      frame.writeUInt32BE(message.length, 1);
      message.copy(frame, 5);
      offered += frame.length;
      if (!stream.write(frame)) {
        // The producer's buffer is full: if the broker does not read more within 2 s, it is
        // holding the producer off.
        const drained = await Promise.race([
          new Promise<boolean>((r) => stream.once('drain', () => r(true))),
          new Promise<boolean>((r) => setTimeout(() => r(false), 2_000)),
        ]);
        if (!drained) {
          blockedAt = i;
          break;
        }
      }
    }
    const held = rssMiB(pid);
    assert.ok(
      blockedAt > 0,
      `the broker read all ${offered >> 20} MiB offered without acks being read (RSS ${Math.round(base)} → ${Math.round(held)} MiB)`,
    );
    assert.ok(
      held - base < 200,
      `broker RSS grew ${Math.round(held - base)} MiB (${Math.round(base)} → ${Math.round(held)}) ` +
        `for ${offered >> 20} MiB offered`,
    );

    // Another producer is served meanwhile.
    const other = randomName('t-');
    const [ack] = await client.publish([tokenEvent(other, 1)], 'PERSISTED');
    assert.equal(ack?.seq, 1);

    // Cancelled, the stream's work is released: the node takes as much again.
    stream.close(http2.constants.NGHTTP2_CANCEL);
    session.close();
    await waitFor(
      async () =>
        (await client.publish([{ ...tokenEvent(other, 2), content_json: CONTENT }], 'ACCEPTED')).length === 1,
      { what: 'publishing after the cancel' },
    );
    assert.equal(broker.child.exitCode, null);
  } finally {
    client.close();
    await broker.stop();
  }
});

test('unary requests past the node budget of in-flight bytes are refused with RESOURCE_EXHAUSTED', async () => {
  await using servers = await startServers();
  // A budget of 2 MiB: three concurrent 1 MiB requests cannot all be held.
  const broker = await spawnBroker(brokerConfig(servers), {
    RS_INGEST_MAX_INFLIGHT_BYTES: String(2 * 1024 * 1024),
  });
  const client = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  try {
    const t = randomName('t-');
    const big = (i: number): Event[] =>
      Array.from({ length: 4 }, (_, k) => ({
        ...tokenEvent(t, i * 10 + k),
        content_json: JSON.stringify('y'.repeat(250 * 1024)),
      }));
    const results = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) => client.publish(big(i), 'PERSISTED')),
    );
    const refused = results.filter(
      (r) =>
        r.status === 'rejected' && (r.reason as grpc.ServiceError).code === grpc.status.RESOURCE_EXHAUSTED,
    );
    const ok = results.filter((r) => r.status === 'fulfilled');
    assert.ok(refused.length > 0, 'some requests are refused while the budget is held');
    assert.ok(ok.length > 0, 'the budget still admits requests');
    assert.equal(refused.length + ok.length, results.length, 'every request is either stored or refused');
    const reason = (refused[0] as PromiseRejectedResult).reason as grpc.ServiceError;
    assert.match(reason.details, /RS_INGEST_MAX_INFLIGHT_BYTES/);
    // Released once answered: a request of the same size is admitted afterwards.
    const acks = await client.publish(big(99), 'PERSISTED');
    assert.equal(acks.length, 4);
  } finally {
    client.close();
    await broker.stop();
  }
});
