// A client that stops reading is cut off at the send-queue limit with a final frame
// naming where each subscription stopped, and resumes from there losing nothing.
import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { test } from 'node:test';
import type { Event } from '../src/client/ingest-client.js';
import { WsConnection } from '../src/client/ws-subscriber.js';
import { CLOSE_SLOW_CONSUMER } from '../src/fanout/ws/connection.js';
import { randomName, startStack } from './helpers/stack.js';

const N = 4000;
const PAD = 'x'.repeat(2000);

test('a client that stops reading is cut off with code 4008 and resumes with nothing lost', async () => {
  await using stack = await startStack({ wsMaxBufferedBytes: 256 * 1024 });
  const t = randomName('t-');
  const slow = await stack.ws();
  slow.subscribe('s', t);
  await slow.waitFor((f) => f.type === 'live');
  // Stop reading: the kernel buffers fill, then the broker's own queue.
  const socket = (slow.ws as unknown as { _socket: Socket })._socket;
  socket.pause();

  for (let i = 0; i < N; i += 500) {
    const batch: Event[] = Array.from({ length: 500 }, (_, k) => ({
      thread_id: t,
      run_id: 'run-1',
      event_id: `e${i + k}`,
      event_type: 'ai_chunk',
      category: 'MESSAGE',
      content_json: JSON.stringify({ i: i + k, pad: PAD }),
    }));
    await stack.client.publish(batch, 'PERSISTED');
  }
  await new Promise((r) => setTimeout(r, 500));
  socket.resume();
  const closed = await slow.closed;
  assert.equal(closed.code, CLOSE_SLOW_CONSUMER);
  const cut = slow.frames.find((f) => f.type === 'error' && f.code === 'slow_consumer');
  assert.ok(cut && cut.type === 'error', 'a final slow_consumer frame');
  const received = slow.events('s').map((e) => e.seq);
  assert.ok(received.length < N, 'it was cut off before the end');
  // The frame's cursor is what the client actually received before the cut.
  assert.equal(cut.cursors?.s, received.at(-1) ?? 0);
  assert.deepEqual(
    received,
    Array.from({ length: received.length }, (_, i) => i + 1),
  );

  // Resume from the cursor: exactly the rest.
  await using again = await WsConnection.open(stack.wsUrl);
  again.subscribe('s', t, cut.cursors?.s ?? 0);
  await again.waitFor((f) => f.type === 'live');
  assert.deepEqual(
    [...received, ...again.events('s').map((e) => e.seq)],
    Array.from({ length: N }, (_, i) => i + 1),
  );
});
