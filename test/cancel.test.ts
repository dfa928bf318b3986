// Cancel back to the producer: a subscriber's request (WebSocket frame, HTTP POST, or a
// dropped connection that opted in with on_disconnect: "cancel") is stored as a
// `cancel_requested` lifecycle event and reaches the producer streaming that run on
// Ingest.PublishStream as a control message, across processes. A plain disconnect never cancels.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type Broker, startBroker } from '../src/broker.js';
import type { Control, Event, PublishStream } from '../src/client/ingest-client.js';
import type { WireEvent } from '../src/client/ws-subscriber.js';
import { WsConnection } from '../src/client/ws-subscriber.js';
import { createLogger } from '../src/logger.js';
import { brokerConfig, randomName, type Stack, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

let stack: Stack;
const streams: PublishStream[] = [];
before(async () => {
  stack = await startStack();
});
after(async () => {
  for (const s of streams) s.call.cancel();
  await stack[Symbol.asyncDispose]();
});

function ev(t: string, runId: string, id: string, extra: Partial<Event> = {}): Event {
  return {
    thread_id: t,
    run_id: runId,
    event_id: id,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ id }),
    ...extra,
  };
}

function openStream(): PublishStream {
  const s = stack.client.openStream();
  streams.push(s);
  return s;
}

/** The n-th control message (0-based) a stream receives. */
function nthControl(s: PublishStream, n: number): Promise<Control> {
  return waitFor(() => s.controls[n], { what: `control #${n}`, timeoutMs: 20_000 });
}

async function cancelRows(t: string, runId: string) {
  const { rows } = await stack.db.query<{ seq: number; event_id: string; user_id: string; content: unknown }>(
    `SELECT seq::int AS seq, event_id, user_id, content FROM run_events
     WHERE thread_id = $1 AND run_id = $2 AND category = 3 AND event_type = 'cancel_requested' ORDER BY seq`,
    [t, runId],
  );
  return rows;
}

function post(t: string, runId: string, body?: string) {
  return fetch(`${stack.httpUrl}/v1/threads/${t}/runs/${runId}/cancel`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body }),
  });
}

test('a WebSocket cancel frame reaches the streaming producer, is stored as cancel_requested and seen by subscribers', async () => {
  const t = randomName('t-');
  const producer = openStream();
  await producer.send([ev(t, 'run-1', 'e1'), ev(t, 'run-1', 'e2')], 'PERSISTED');

  const watcher = await stack.ws();
  watcher.sendRaw({ type: 'subscribe', id: 'w', thread_id: t, run_id: 'run-1' });
  await watcher.waitFor((f) => f.type === 'live' && f.id === 'w');

  const canceller = await stack.ws();
  canceller.cancel('c1', t, 'run-1', 'user pressed stop');
  const ack = await canceller.waitFor((f) => f.id === 'c1');
  assert.equal(ack.type, 'cancel_requested');
  assert.ok(ack.type === 'cancel_requested');
  assert.equal(ack.thread_id, t);
  assert.equal(ack.run_id, 'run-1');
  assert.ok(ack.offset > 0);

  const control = await nthControl(producer, 0);
  assert.deepEqual(control.cancel, {
    thread_id: t,
    run_id: 'run-1',
    reason: 'user pressed stop',
    event_id: ack.event_id,
    requested_by: '',
  });
  assert.equal(control.kind, 'cancel');

  // The control answered no request: the next request still gets its own acks.
  const acks = await producer.send([ev(t, 'run-1', 'e3')], 'PERSISTED');
  assert.deepEqual(
    acks.map((a) => a.event_id),
    ['e3'],
  );

  // Subscribers see the stored request as an ordinary lifecycle event of the run...
  const seen = (await watcher.waitFor(
    (f) => f.type === 'event' && f.id === 'w' && f.event.event_type === 'cancel_requested',
  )) as { event: WireEvent };
  assert.equal(seen.event.event_id, ack.event_id);
  assert.equal(seen.event.category, 'lifecycle');
  assert.equal(seen.event.offset, ack.offset);
  assert.deepEqual(seen.event.content, {
    reason: 'user pressed stop',
    source: 'websocket',
    requested_by: '',
  });
  assert.deepEqual(
    (await cancelRows(t, 'run-1')).map((r) => r.event_id),
    [ack.event_id],
  );
  // ...which does not end the run: the producer's own terminal event does.
  await producer.send([
    ev(t, 'run-1', 'e4', { event_type: 'cancelled', category: 'LIFECYCLE', content_json: 'null' }),
  ]);
  const end = await watcher.waitFor((f) => f.type === 'end' && f.id === 'w');
  assert.ok(end.type === 'end');
  assert.equal(end.seq, seen.event.seq + 2);
  // The ended run cannot be cancelled again.
  canceller.cancel('c2', t, 'run-1');
  const again = await canceller.waitFor((f) => f.id === 'c2');
  assert.equal(again.type === 'error' && again.code, 'run_ended');
});

test('HTTP POST cancel reaches the producer, and only the streams that published that run', async () => {
  const t = randomName('t-');
  const both = openStream();
  await both.send([ev(t, 'run-a', 'a1'), ev(t, 'run-b', 'b1')], 'PERSISTED');
  const other = openStream();
  await other.send([ev(t, 'run-c', 'c1')], 'PERSISTED');

  const res = await post(t, 'run-b', JSON.stringify({ reason: 'budget exceeded' }));
  assert.equal(res.status, 202);
  const receipt = (await res.json()) as {
    thread_id: string;
    run_id: string;
    event_id: string;
    offset: number;
  };
  assert.equal(receipt.thread_id, t);
  assert.equal(receipt.run_id, 'run-b');
  assert.ok(receipt.offset > 0);

  const first = await nthControl(both, 0);
  assert.equal(first.cancel?.run_id, 'run-b');
  assert.equal(first.cancel?.reason, 'budget exceeded');
  assert.equal(first.cancel?.event_id, receipt.event_id);

  // Controls of one requester arrive in order: `other` gets run-c's cancel as its first
  // control, so it never got run-b's; `both` gets run-a's next, so it never got run-c's.
  assert.equal((await post(t, 'run-c')).status, 202);
  const otherFirst = await nthControl(other, 0);
  assert.equal(otherFirst.cancel?.run_id, 'run-c');
  assert.equal(otherFirst.cancel?.reason, '');
  assert.equal((await post(t, 'run-a')).status, 202);
  assert.equal((await nthControl(both, 1)).cancel?.run_id, 'run-a');
  assert.equal(other.controls.length, 1);

  const stored = await cancelRows(t, 'run-b');
  assert.equal(stored.length, 1);
  assert.deepEqual(stored[0]?.content, { reason: 'budget exceeded', source: 'http', requested_by: '' });
});

test('cancel refusals: unknown run 404, ended run 409 with nothing stored, bad input 400, ws errors carry the request id', async () => {
  const t = randomName('t-');
  await stack.client.publish(
    [
      ev(t, 'done', 'd1'),
      ev(t, 'done', 'd2', { event_type: 'end', category: 'LIFECYCLE' }),
      ev(t, 'live', 'l1'),
    ],
    'PERSISTED',
  );
  const unknown = await post(t, 'nope');
  assert.equal(unknown.status, 404);
  assert.equal(((await unknown.json()) as { error: { code: string } }).error.code, 'not_found');

  const ended = await post(t, 'done');
  assert.equal(ended.status, 409);
  assert.equal(((await ended.json()) as { error: { code: string } }).error.code, 'run_ended');
  assert.equal((await cancelRows(t, 'done')).length, 0);

  const badJson = await post(t, 'live', '{not json');
  assert.equal(badJson.status, 400);
  const longReason = await post(t, 'live', JSON.stringify({ reason: 'x'.repeat(1025) }));
  assert.equal(longReason.status, 400);
  assert.match(((await longReason.json()) as { error: { message: string } }).error.message, /^reason: /);
  const notString = await post(t, 'live', JSON.stringify({ reason: 42 }));
  assert.equal(notString.status, 400);
  const badRun = await fetch(`${stack.httpUrl}/v1/threads/${t}/runs/a%20b/cancel`, { method: 'POST' });
  assert.equal(badRun.status, 400);
  assert.equal((await cancelRows(t, 'live')).length, 0);

  const ws = await stack.ws();
  ws.sendRaw({ type: 'cancel', id: 'x1', thread_id: t });
  ws.cancel('x2', t, 'nope');
  ws.sendRaw({ type: 'cancel', id: 'x3', thread_id: t, run_id: 'live', reason: ['not', 'text'] });
  const e1 = await ws.waitFor((f) => f.id === 'x1');
  assert.equal(e1.type === 'error' && e1.code, 'invalid_argument');
  assert.match(e1.type === 'error' ? e1.message : '', /^run_id: /);
  const e2 = await ws.waitFor((f) => f.id === 'x2');
  assert.equal(e2.type === 'error' && e2.code, 'not_found');
  const e3 = await ws.waitFor((f) => f.id === 'x3');
  assert.equal(e3.type === 'error' && e3.code, 'invalid_argument');
});

test('across processes: a cancel sent to another broker node reaches the producer streaming to this one', async () => {
  const config = brokerConfig(stack.servers, {
    roles: new Set(['fanout']),
    streamName: stack.config.streamName,
    subjectPrefix: stack.config.subjectPrefix,
  });
  const other: Broker = await startBroker(config, createLogger(config.logLevel));
  try {
    const t = randomName('t-');
    const producer = openStream();
    await producer.send([ev(t, 'run-1', 'e1')], 'PERSISTED');
    const ws = await WsConnection.open(`ws://127.0.0.1:${other.httpPort}/v1/ws`);
    try {
      ws.cancel('c', t, 'run-1', 'from node 2');
      const ack = await ws.waitFor((f) => f.id === 'c');
      assert.equal(ack.type, 'cancel_requested');
      const control = await nthControl(producer, 0);
      assert.equal(control.cancel?.reason, 'from node 2');
      assert.equal(control.cancel?.event_id, ack.type === 'cancel_requested' ? ack.event_id : '');
    } finally {
      await ws.close();
    }
  } finally {
    await other.close();
  }
});

test('on_disconnect "cancel": a dropped connection cancels the runs it opted in for, and nothing else', async () => {
  const t = randomName('t-');
  const producer = openStream();
  // r-plain: no option; r-unsub: opted in, then unsubscribed; r-ended: opted in, run ended;
  // r-cancel: opted in and active when the connection drops.
  await producer.send(
    ['r-plain', 'r-unsub', 'r-ended', 'r-cancel'].map((r) => ev(t, r, `${r}-1`)),
    'PERSISTED',
  );

  const ws = await stack.ws();
  const subscribe = (id: string, runId: string, extra: object = {}) =>
    ws.sendRaw({ type: 'subscribe', id, thread_id: t, run_id: runId, live_only: true, ...extra });
  subscribe('plain', 'r-plain');
  subscribe('unsub', 'r-unsub', { on_disconnect: 'cancel' });
  subscribe('ended', 'r-ended', { on_disconnect: 'cancel' });
  subscribe('cancel', 'r-cancel', { on_disconnect: 'cancel' });
  for (const id of ['plain', 'unsub', 'ended', 'cancel'])
    await ws.waitFor((f) => f.type === 'live' && f.id === id);
  ws.unsubscribe('unsub');
  await ws.waitFor((f) => f.type === 'unsubscribed' && f.id === 'unsub');
  await producer.send([ev(t, 'r-ended', 'r-ended-2', { event_type: 'end', category: 'LIFECYCLE' })]);
  await ws.waitFor((f) => f.type === 'end' && f.id === 'ended');

  // The option is checked: only a run can be cancelled, and only "cancel"/"none" exist.
  ws.sendRaw({ type: 'subscribe', id: 'bad1', thread_id: t, on_disconnect: 'cancel' });
  ws.sendRaw({ type: 'subscribe', id: 'bad2', thread_id: t, run_id: 'r-plain', on_disconnect: 'explode' });
  for (const id of ['bad1', 'bad2']) {
    const e = await ws.waitFor((f) => f.id === id);
    assert.equal(e.type === 'error' && e.code, 'invalid_argument');
    assert.match(e.type === 'error' ? e.message : '', /^on_disconnect: /);
  }

  // The client vanishes without a close handshake, as a crashed browser tab does.
  ws.ws.terminate();
  // Cancels of one connection are issued in subscription order, so had any earlier run been
  // cancelled, its control would have arrived first.
  const control = await nthControl(producer, 0);
  assert.equal(control.cancel?.run_id, 'r-cancel');
  assert.equal(control.cancel?.reason, 'subscriber disconnected');
  const stored = await waitFor(async () => {
    const rows = await cancelRows(t, 'r-cancel');
    return rows.length > 0 && rows;
  });
  assert.deepEqual(stored[0]?.content, {
    reason: 'subscriber disconnected',
    source: 'on_disconnect',
    requested_by: '',
  });
  for (const r of ['r-plain', 'r-unsub', 'r-ended']) assert.equal((await cancelRows(t, r)).length, 0, r);
});
