// Whole HTTP answers (History pages, long-poll answers) that clients do not read are
// bounded per node: while answers not yet taken hold RS_HTTP_MAX_UNSENT_BYTES, new
// requests are refused with 429 (the probes still answer), and an answer not taken
// within RS_HTTP_WRITE_TIMEOUT_MS has its socket destroyed, which frees its bytes.
// Real broker, nats-server and Postgres.
import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import type { Event } from '../src/client/ingest-client.js';
import { randomName, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

test('answers a client never reads hold the node’s budget at most: then 429, until the write timeout lets them go', async () => {
  await using stack = await startStack({
    httpMaxUnsentBytes: 12 * 1024 * 1024,
    httpWriteTimeoutMs: 2000,
    maxPageBytes: 64 * 1024 * 1024,
  });
  const t = randomName('unsent-');
  // One page of 100 events of 240 KB: 24 MB, far more than the kernel takes for a client
  // that does not read. In CJK text, 3 bytes a character: 8 M characters, under the budget
  // of 12 MiB were characters counted instead of bytes.
  const pad = '中'.repeat(80_000);
  for (let i = 0; i < 100; i += 10) {
    const batch: Event[] = Array.from({ length: 10 }, (_, k) => ({
      thread_id: t,
      run_id: 'r',
      event_id: `e${i + k}`,
      event_type: 'ai_chunk',
      category: 'MESSAGE',
      content_json: JSON.stringify({ pad }),
    }));
    await stack.client.publish(batch, 'PERSISTED');
  }
  const raw = net.connect(stack.broker.httpPort, '127.0.0.1');
  raw.on('error', () => undefined);
  const gone = new Promise((r) => raw.once('close', r));
  await new Promise((r) => raw.once('connect', r));
  raw.pause();
  raw.write(`GET /v1/threads/${t}/events?limit=100 HTTP/1.1\r\nHost: x\r\n\r\n`);

  const small = `${stack.httpUrl}/v1/threads/${t}/events?limit=1`;
  const refused = await waitFor(
    async () => {
      const r = await fetch(small);
      const body = await r.text();
      return r.status === 429 ? body : false;
    },
    { timeoutMs: 30_000, what: 'a 429 while the unread page holds the budget' },
  );
  assert.match(refused, /resource_exhausted/);
  assert.match(refused, /not yet read/);
  // The probes answer whatever the budget.
  assert.equal((await fetch(`${stack.httpUrl}/healthz`)).status, 200);
  // The unread answer's socket is destroyed at the write timeout; the node answers again.
  await waitFor(
    async () => {
      const r = await fetch(small);
      await r.body?.cancel();
      return r.status === 200;
    },
    { timeoutMs: 30_000, what: 'answers again once the unread page is let go' },
  );
  // What reached the client before its socket was destroyed is less than the page.
  let got = 0;
  raw.on('data', (b: Buffer) => {
    got += b.length;
  });
  raw.resume();
  await gone;
  assert.ok(got < 100 * 240_000, `${got} bytes of the page reached the client`);
});
