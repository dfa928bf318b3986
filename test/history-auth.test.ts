// User scoping and authorization of History on both transports, with authentication on:
// a token scoped to a user reads and deletes only that user's events whatever it asks
// for, a read-only token cannot delete, a token for thread A cannot read thread B, and no
// token is refused.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { type JWTPayload, SignJWT } from 'jose';
import { IngestClient } from '../src/client/ingest-client.js';
import { WsConnection } from '../src/client/ws-subscriber.js';
import { HistoryClient } from '../src/history/client.js';
import { ev, http } from './helpers/history.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

const SECRET = 'history-test-secret-of-at-least-32-bytes!';

function token(claims: JWTPayload): Promise<string> {
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256' })
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + 600)
    .sign(new TextEncoder().encode(SECRET));
}

let stack: Stack;
let admin: string;
let alice: string;
let reader: string;
let T: string;
let A: string;

before(async () => {
  stack = await startStack({ jwtSecret: SECRET });
  admin = await token({ sub: 'admin', threads: '*', scope: 'read publish' });
  alice = await token({ sub: 'alice', threads: '*', user_id: 'alice', scope: 'read publish' });
  reader = await token({ sub: 'reader', threads: '*', scope: 'read' });
  T = randomName('shared-');
  A = randomName('alice-');
  const ingest = new IngestClient(stack.grpcTarget, { token: admin });
  await ingest.publish(
    [
      ev(T, 'ra', 1, { type: 'human_message', user: 'alice', metadata: { id: 'h1' } }),
      ev(T, 'ra', 2, { user: 'alice' }),
      ev(T, 'rb', 1, { type: 'human_message', user: 'bob', metadata: { id: 'h2' } }),
      ev(T, 'rb', 2, { user: 'bob' }),
      ev(T, 'rb', 3, { user: 'bob' }),
      ev(A, 'r', 1, { user: 'alice' }),
    ],
    'PERSISTED',
  );
  ingest.close();
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

test('a user-scoped token reads only its user’s events, runs, counts and chat, on both transports', async () => {
  const h = new HistoryClient(stack.grpcTarget, alice);
  try {
    const page = await h.listEvents({ thread_id: T });
    assert.deepEqual(
      page.events.map((e) => [e.seq, e.user_id]),
      [
        [1, 'alice'],
        [2, 'alice'],
      ],
    );
    assert.equal(await h.countMessages({ thread_id: T }), 2);
    assert.deepEqual(
      (await h.listRuns({ thread_id: T })).runs.map((r) => r.run_id),
      ['ra'],
    );
    await assert.rejects(h.getRun({ thread_id: T, run_id: 'rb' }), { code: grpc.status.NOT_FOUND });
    assert.deepEqual(
      (await h.listChatMessages({ thread_id: T })).messages.map((m) => m.id),
      ['h1', 'seq-2'],
    );
    // Asking for another user is refused, not silently narrowed.
    await assert.rejects(h.listEvents({ thread_id: T, user_id: 'bob' }), {
      code: grpc.status.PERMISSION_DENIED,
    });
    await assert.rejects(h.countMessages({ thread_id: T, user_id: 'bob' }), {
      code: grpc.status.PERMISSION_DENIED,
    });
  } finally {
    h.close();
  }
  const e = await http<{ events: { user_id: string }[] }>(`${stack.httpUrl}/v1/threads/${T}/events`, {
    token: alice,
  });
  assert.deepEqual(
    e.body.events.map((x) => x.user_id),
    ['alice', 'alice'],
  );
  const c = await http<{ count: number }>(`${stack.httpUrl}/v1/threads/${T}/messages/count`, {
    token: alice,
  });
  assert.equal(c.body.count, 2);
  const other = await http<{ error: { code: string } }>(
    `${stack.httpUrl}/v1/threads/${T}/messages?user_id=bob`,
    {
      token: alice,
    },
  );
  assert.deepEqual([other.status, other.body.error.code], [403, 'permission_denied']);
  // The admin token is not scoped: it sees everyone, or the user it asks for.
  const all = await http<{ events: unknown[] }>(`${stack.httpUrl}/v1/threads/${T}/events`, { token: admin });
  assert.equal(all.body.events.length, 5);
  const bobs = await http<{ events: unknown[] }>(`${stack.httpUrl}/v1/threads/${T}/events?user_id=bob`, {
    token: admin,
  });
  assert.equal(bobs.body.events.length, 3);
});

test('deletes: a scoped token deletes only what is wholly its user’s; a read-only token cannot delete', async () => {
  const shared = await http<{ error: { code: string } }>(`${stack.httpUrl}/v1/threads/${T}`, {
    method: 'DELETE',
    token: alice,
  });
  assert.deepEqual([shared.status, shared.body.error.code], [403, 'permission_denied']);
  const ro = new HistoryClient(stack.grpcTarget, reader);
  try {
    await assert.rejects(ro.deleteThread({ thread_id: A }), { code: grpc.status.PERMISSION_DENIED });
  } finally {
    ro.close();
  }
  const h = new HistoryClient(stack.grpcTarget, alice);
  try {
    assert.equal((await h.deleteRun({ thread_id: T, run_id: 'ra' })).deleted_events, 2);
    assert.equal((await h.deleteThread({ thread_id: A })).deleted_events, 1);
  } finally {
    h.close();
  }
  const left = await http<{ events: { run_id: string }[] }>(`${stack.httpUrl}/v1/threads/${T}/events`, {
    token: admin,
  });
  assert.deepEqual(
    left.body.events.map((x) => x.run_id),
    ['rb', 'rb', 'rb'],
  );
});

test('a token for one thread cannot read another; no token is refused', async () => {
  const onlyA = await token({ threads: [A], scope: 'read' });
  const denied = await http<{ error: { code: string } }>(`${stack.httpUrl}/v1/threads/${T}/runs`, {
    token: onlyA,
  });
  assert.deepEqual([denied.status, denied.body.error.code], [403, 'permission_denied']);
  const h = new HistoryClient(stack.grpcTarget, onlyA);
  try {
    await assert.rejects(h.listEvents({ thread_id: T }), { code: grpc.status.PERMISSION_DENIED });
    assert.equal((await h.listEvents({ thread_id: A })).events.length, 0);
  } finally {
    h.close();
  }
  const none = await http<{ error: { code: string } }>(`${stack.httpUrl}/v1/threads/${T}/events`);
  assert.deepEqual([none.status, none.body.error.code], [401, 'unauthenticated']);
  const anon = new HistoryClient(stack.grpcTarget);
  try {
    await assert.rejects(anon.countMessages({ thread_id: T }), { code: grpc.status.UNAUTHENTICATED });
  } finally {
    anon.close();
  }
});

test('the LangGraph run routes apply the user scope too: another user’s run is not found, its events never streamed', async () => {
  const X = randomName('lg-');
  const ingest = new IngestClient(stack.grpcTarget, { token: admin });
  await ingest.publish(
    [ev(X, 'ra', 1, { user: 'alice' }), ev(X, 'rb', 1, { user: 'bob' }), ev(X, 'rb', 2, { user: 'bob' })],
    'PERSISTED',
  );
  ingest.close();
  const asAlice = { authorization: `Bearer ${alice}` };
  // Her own run: its status.
  const mine = await fetch(`${stack.httpUrl}/threads/${X}/runs/ra`, { headers: asAlice });
  assert.equal(mine.status, 200);
  // Bob's run of the same thread: 404, as History's GetRun says, with nothing of it told.
  const bobs = await fetch(`${stack.httpUrl}/threads/${X}/runs/rb`, { headers: asAlice });
  assert.equal(bobs.status, 404);
  const body = await bobs.text();
  assert.doesNotMatch(body, /assistant_id|status/);
  const history = await http(`${stack.httpUrl}/v1/threads/${X}/runs/rb`, { token: alice });
  assert.equal(history.status, 404);
  // Nor can she join it from its start (Last-Event-ID -1 replays the run whole).
  const join = await fetch(`${stack.httpUrl}/threads/${X}/runs/rb/stream`, {
    headers: { ...asAlice, 'last-event-id': '-1' },
  });
  assert.equal(join.status, 404);
  await join.body?.cancel();
  // The admin sees Bob's run.
  const admins = await fetch(`${stack.httpUrl}/threads/${X}/runs/rb`, {
    headers: { authorization: `Bearer ${admin}` },
  });
  assert.equal(admins.status, 200);
});

test('run ends and cancels apply the user scope: another user’s ended run never ends her subscription, and she cannot cancel it', async () => {
  const X = randomName('end-');
  const ingest = new IngestClient(stack.grpcTarget, { token: admin });
  const life = (run: string, i: number, type: string, user: string) =>
    ev(X, run, i, { type, category: 'LIFECYCLE', user });
  await ingest.publish(
    [
      life('rb', 1, 'run_start', 'bob'),
      life('rb', 2, 'end', 'bob'),
      life('rc', 1, 'run_start', 'bob'),
      ev(X, 'ra', 1, { user: 'alice' }),
    ],
    'PERSISTED',
  );
  ingest.close();
  const canCancel = await token({ sub: 'alice', threads: '*', user_id: 'alice', scope: 'read cancel' });
  const c = await WsConnection.open(stack.wsUrl, { token: canCancel });
  try {
    // From the start and from past Bob's end: her run subscription goes live; no `end`
    // tells her Bob's run ended (nor how), as History's GetRun gives her 404.
    c.sendRaw({ type: 'subscribe', id: 'a', thread_id: X, run_id: 'rb', after_seq: 0 });
    c.sendRaw({ type: 'subscribe', id: 'b', thread_id: X, run_id: 'rb', after_seq: 2 });
    await c.waitFor((f) => f.type === 'live' && f.id === 'a');
    await c.waitFor((f) => f.type === 'live' && f.id === 'b');
    assert.deepEqual(
      c.frames.filter((f) => f.type === 'end' || f.type === 'event'),
      [],
      'nothing of Bob’s run',
    );
    // Cancelling Bob's running run: 404 on HTTP and on the socket, and nothing stored.
    const res = await fetch(`${stack.httpUrl}/v1/threads/${X}/runs/rc/cancel`, {
      method: 'POST',
      headers: { authorization: `Bearer ${canCancel}` },
    });
    assert.equal(res.status, 404, await res.text());
    const lg = await fetch(`${stack.httpUrl}/threads/${X}/runs/rc/cancel`, {
      method: 'POST',
      headers: { authorization: `Bearer ${canCancel}` },
    });
    assert.equal(lg.status, 404);
    await lg.body?.cancel();
    c.sendRaw({ type: 'cancel', id: 'k', thread_id: X, run_id: 'rc' });
    const refused = await c.waitFor((f) => f.type === 'error' && f.id === 'k');
    assert.equal(refused.type === 'error' && refused.code, 'not_found');
  } finally {
    await c.close();
  }
  const rows = await http<{ events: { event_type: string }[] }>(`${stack.httpUrl}/v1/threads/${X}/events`, {
    token: admin,
  });
  assert.deepEqual(
    rows.body.events.map((e) => e.event_type).filter((t) => t === 'cancel_requested'),
    [],
  );
  // Her own run she may cancel.
  const own = await fetch(`${stack.httpUrl}/v1/threads/${X}/runs/ra/cancel`, {
    method: 'POST',
    headers: { authorization: `Bearer ${canCancel}` },
  });
  assert.equal(own.status, 202, await own.text());
});
