// Authentication and authorization against real servers: every transport refuses a
// missing, invalid or expired token with the documented code, a token scoped to thread A
// never reads thread B, publish and read are separate rights, an expiring token ends the
// connection, and the browser origin allow-list holds.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { type JWTPayload, SignJWT } from 'jose';
import WebSocket from 'ws';
import { type Event, IngestClient } from '../src/client/ingest-client.js';
import { type ServerFrame, WsConnection } from '../src/client/ws-subscriber.js';
import { CLOSE_TOKEN_EXPIRED } from '../src/fanout/ws/connection.js';
import type { SubscribeResponse__Output } from '../src/gen/runstream/v1/SubscribeResponse.js';
import type { ProtoGrpcType as SubscriberProto } from '../src/gen/subscriber.js';
import { HistoryClient } from '../src/history/client.js';
import { loadProto } from '../src/proto.js';
import { randomName, type Stack, startStack, threadRows } from './helpers/stack.js';

const SECRET = 'integration-test-secret-of-at-least-32-bytes';
const APP_ORIGIN = 'https://app.example.com';

/** An HS256 token; `expSec` from now (negative = already expired). */
function token(claims: JWTPayload, expSec = 300): Promise<string> {
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256' })
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + expSec)
    .sign(new TextEncoder().encode(SECRET));
}

function events(
  threadId: string,
  n: number,
  opts: { runId?: string; userId?: string; from?: number } = {},
): Event[] {
  const from = opts.from ?? 1;
  return Array.from({ length: n }, (_, k) => ({
    thread_id: threadId,
    run_id: opts.runId ?? 'run-1',
    event_id: `e${from + k}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    user_id: opts.userId ?? '',
    content_json: JSON.stringify({ n: from + k }),
    metadata_json: '{}',
  }));
}

interface Refusal {
  status: number;
  code: string;
  challenge: string | undefined;
}

/** Tries a WebSocket upgrade that should be refused; resolves with the HTTP answer. */
function refusedUpgrade(url: string, opts: { headers?: Record<string, string>; origin?: string } = {}) {
  return new Promise<Refusal>((resolve, reject) => {
    const ws = new WebSocket(url, { perMessageDeflate: false, ...opts });
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => {
        body += d.toString();
      });
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          code: (JSON.parse(body) as { error: { code: string } }).error.code,
          challenge: res.headers['www-authenticate'],
        }),
      );
    });
    ws.on('open', () => {
      ws.close();
      reject(new Error('the upgrade was accepted'));
    });
    ws.on('error', reject);
  });
}

async function getJson(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { headers });
  const body = (await res.json()) as Record<string, unknown> & { error?: { code: string } };
  return { status: res.status, body, headers: res.headers };
}

/** The gRPC status code a call failed with. */
async function grpcCode(p: Promise<unknown>): Promise<grpc.status> {
  try {
    await p;
  } catch (err) {
    return (err as grpc.ServiceError).code;
  }
  throw new Error('the call succeeded');
}

/** Reads an SSE response until `done(text)` holds; returns what was read. */
async function readSse(res: Response, done: (text: string) => boolean): Promise<string> {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (!done(text)) {
    const { value, done: over } = await reader.read();
    if (over) break;
    text += decoder.decode(value, { stream: true });
  }
  await reader.cancel();
  return text;
}

interface SubscribeOutcome {
  messages: SubscribeResponse__Output[];
  status: grpc.StatusObject | undefined;
}

/** A gRPC Subscribe call, read until its `live` marker or its end. */
function grpcSubscribe(target: string, threadId: string, jwt?: string): Promise<SubscribeOutcome> {
  const proto = loadProto().proto as unknown as SubscriberProto;
  const client = new proto.runstream.v1.Subscriber(target, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  if (jwt !== undefined) md.set('authorization', `Bearer ${jwt}`);
  const call = client.Subscribe({ thread_id: threadId, after_seq: 0 }, md);
  const out: SubscribeOutcome = { messages: [], status: undefined };
  return new Promise((resolve) => {
    const finish = () => {
      call.cancel();
      client.close();
      resolve(out);
    };
    call.on('data', (m: SubscribeResponse__Output) => {
      out.messages.push(m);
      if (m.live) finish();
    });
    call.on('error', () => undefined);
    call.on('status', (st: grpc.StatusObject) => {
      out.status ??= st;
      finish();
    });
  });
}

const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
const subscribed = (f: ServerFrame, id: string) => (f.type === 'live' || f.type === 'error') && f.id === id;

describe('authentication on (HS256), origins restricted', () => {
  let stack: Stack;
  let admin: IngestClient;
  before(async () => {
    stack = await startStack({
      jwtSecret: SECRET,
      jwtClockToleranceMs: 0,
      allowedOrigins: [APP_ORIGIN],
    });
    admin = new IngestClient(stack.grpcTarget, {
      token: await token({ sub: 'admin', threads: '*', scope: 'read publish cancel' }),
    });
  });
  after(async () => {
    admin?.close();
    await stack?.[Symbol.asyncDispose]();
  });

  test('/healthz and /readyz stay open', async () => {
    assert.equal((await getJson(`${stack.httpUrl}/healthz`)).status, 200);
    assert.equal((await getJson(`${stack.httpUrl}/readyz`)).status, 200);
  });

  test('WebSocket upgrade: missing, invalid or expired token → 401; foreign origin → 403', async () => {
    const good = await token({ threads: '*' });
    const wrongKey = await new SignJWT({ threads: '*' })
      .setProtectedHeader({ alg: 'HS256' })
      .sign(new TextEncoder().encode(`${SECRET}-but-another-one`));
    const cases: [string, Parameters<typeof refusedUpgrade>[1], number, string][] = [
      ['no token', {}, 401, 'unauthenticated'],
      ['garbage', { headers: bearer('garbage') }, 401, 'unauthenticated'],
      ['another key', { headers: bearer(wrongKey) }, 401, 'unauthenticated'],
      ['expired', { headers: bearer(await token({ threads: '*' }, -10)) }, 401, 'token_expired'],
      [
        'foreign origin',
        { headers: bearer(good), origin: 'https://evil.example.com' },
        403,
        'origin_not_allowed',
      ],
    ];
    for (const [what, opts, status, code] of cases) {
      const r = await refusedUpgrade(stack.wsUrl, opts);
      assert.equal(r.status, status, what);
      assert.equal(r.code, code, what);
      if (status === 401) assert.match(r.challenge ?? '', /^Bearer /, `${what}: WWW-Authenticate`);
    }
    // The same valid token opens from the allowed origin, and from a non-browser (no Origin).
    const fromApp = await WsConnection.open(stack.wsUrl, { token: good, origin: APP_ORIGIN });
    await fromApp.close();
    const fromBackend = await WsConnection.open(stack.wsUrl, { token: good });
    await fromBackend.close();
  });

  test('a token for thread A cannot read thread B over WebSocket (header or access_token)', async () => {
    const a = randomName('ta-');
    const b = randomName('tb-');
    await admin.publish([...events(a, 3), ...events(b, 3)], 'PERSISTED');
    const onlyA = await token({ sub: 'reader', threads: [a] });

    for (const ws of [
      await WsConnection.open(stack.wsUrl, { token: onlyA }),
      // Browsers cannot set headers on a WebSocket: the token rides in the query.
      await WsConnection.open(`${stack.wsUrl}?access_token=${encodeURIComponent(onlyA)}`, {
        origin: APP_ORIGIN,
      }),
    ]) {
      ws.subscribe('b', b);
      ws.subscribe('a', a);
      const refused = await ws.waitFor((f) => subscribed(f, 'b'));
      assert.equal(refused.type, 'error');
      assert.equal(refused.type === 'error' && refused.code, 'permission_denied');
      await ws.waitFor((f) => f.type === 'live' && f.id === 'a');
      assert.deepEqual(
        ws.events('a').map((e) => e.seq),
        [1, 2, 3],
      );
      assert.ok(
        ws.frames.every((f) => f.type !== 'event' || f.event.thread_id === a),
        'nothing of thread B was sent',
      );
      await ws.close();
    }

    // A token without the read right reads nothing, even for its own thread.
    const publishOnly = await WsConnection.open(stack.wsUrl, {
      token: await token({ threads: [a], scope: 'publish' }),
    });
    publishOnly.subscribe('a', a);
    const f = await publishOnly.waitFor((x) => subscribed(x, 'a'));
    assert.equal(f.type === 'error' && f.code, 'permission_denied');
    await publishOnly.close();
  });

  test('a prefix pattern covers exactly the threads it names', async () => {
    const team = randomName('team-');
    const mine = `${team}-one`;
    const theirs = randomName('team-');
    await admin.publish([...events(mine, 1), ...events(theirs, 1)], 'PERSISTED');
    const ws = await WsConnection.open(stack.wsUrl, { token: await token({ threads: [`${team}-*`] }) });
    ws.subscribe('mine', mine);
    ws.subscribe('theirs', theirs);
    assert.equal((await ws.waitFor((f) => subscribed(f, 'mine'))).type, 'live');
    const refused = await ws.waitFor((f) => subscribed(f, 'theirs'));
    assert.equal(refused.type === 'error' && refused.code, 'permission_denied');
    await ws.close();
  });

  test('HTTP events: 401 without a valid token, 403 for another thread or origin, 200 for its own', async () => {
    const a = randomName('ta-');
    const b = randomName('tb-');
    await admin.publish([...events(a, 2), ...events(b, 2)], 'PERSISTED');
    const onlyA = await token({ threads: [a] });
    const url = (t: string) => `${stack.httpUrl}/v1/threads/${t}/events`;

    const none = await getJson(url(a));
    assert.equal(none.status, 401);
    assert.equal(none.body.error?.code, 'unauthenticated');
    assert.match(none.headers.get('www-authenticate') ?? '', /^Bearer /);
    assert.equal((await getJson(url(a), bearer('x.y.z'))).status, 401);
    const expired = await getJson(url(a), bearer(await token({ threads: [a] }, -10)));
    assert.equal(expired.status, 401);
    assert.equal(expired.body.error?.code, 'token_expired');

    const other = await getJson(url(b), bearer(onlyA));
    assert.equal(other.status, 403);
    assert.equal(other.body.error?.code, 'permission_denied');

    const own = await getJson(url(a), bearer(onlyA));
    assert.equal(own.status, 200);
    assert.deepEqual(
      (own.body.events as { seq: number }[]).map((e) => e.seq),
      [1, 2],
    );
    const viaQuery = await getJson(`${url(a)}?access_token=${encodeURIComponent(onlyA)}`);
    assert.equal(viaQuery.status, 200);

    const foreign = await getJson(url(a), { ...bearer(onlyA), origin: 'https://evil.example.com' });
    assert.equal(foreign.status, 403);
    assert.equal(foreign.body.error?.code, 'origin_not_allowed');
    const fromApp = await getJson(url(a), { ...bearer(onlyA), origin: APP_ORIGIN });
    assert.equal(fromApp.status, 200);
    assert.equal(fromApp.headers.get('access-control-allow-origin'), APP_ORIGIN);
  });

  test('CORS preflight from an allowed origin is answered; from another origin it is refused', async () => {
    const url = `${stack.httpUrl}/v1/threads/t1/events`;
    const preflight = (origin: string) =>
      fetch(url, {
        method: 'OPTIONS',
        headers: {
          origin,
          'access-control-request-method': 'GET',
          'access-control-request-headers': 'authorization',
        },
      });
    const ok = await preflight(APP_ORIGIN);
    assert.equal(ok.status, 204);
    assert.equal(ok.headers.get('access-control-allow-origin'), APP_ORIGIN);
    assert.match(ok.headers.get('access-control-allow-headers') ?? '', /authorization/);
    // Every method a route has: History's deletes and the cancel POSTs from a browser page too.
    assert.deepEqual((ok.headers.get('access-control-allow-methods') ?? '').split(/,\s*/).sort(), [
      'DELETE',
      'GET',
      'OPTIONS',
      'POST',
    ]);
    assert.equal((await preflight('https://evil.example.com')).status, 403);
  });

  test('SSE: 401 without a valid token, 403 for another thread or origin; a token for A streams A', async () => {
    const a = randomName('ta-');
    const b = randomName('tb-');
    await admin.publish([...events(a, 2), ...events(b, 2)], 'PERSISTED');
    const onlyA = await token({ threads: [a] });
    const url = (t: string) => `${stack.httpUrl}/v1/threads/${t}/stream`;
    const status = async (u: string, headers: Record<string, string> = {}) => {
      const res = await fetch(u, { headers });
      if (res.headers.get('content-type')?.startsWith('text/event-stream')) {
        await res.body?.cancel();
        return [res.status, 'stream opened'];
      }
      const body = (await res.json()) as { error: { code: string } };
      return [res.status, body.error.code];
    };
    assert.deepEqual(await status(url(a)), [401, 'unauthenticated']);
    assert.deepEqual(await status(url(a), bearer('x.y.z')), [401, 'unauthenticated']);
    assert.deepEqual(await status(url(a), bearer(await token({ threads: [a] }, -10))), [
      401,
      'token_expired',
    ]);
    assert.deepEqual(await status(url(b), bearer(onlyA)), [403, 'permission_denied']);
    assert.deepEqual(await status(url(a), { ...bearer(onlyA), origin: 'https://evil.example.com' }), [
      403,
      'origin_not_allowed',
    ]);

    // EventSource cannot set headers: the browser form of the token, from the allowed origin.
    const res = await fetch(`${url(a)}?access_token=${encodeURIComponent(onlyA)}`, {
      headers: { origin: APP_ORIGIN },
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    assert.equal(res.headers.get('access-control-allow-origin'), APP_ORIGIN);
    const text = await readSse(res, (t) => t.includes('id: 2\n'));
    assert.match(text, /id: 1\n/);
    assert.ok(!text.includes(b), 'nothing of thread B');
  });

  test('gRPC Subscribe: UNAUTHENTICATED without a valid token, PERMISSION_DENIED for another thread', async () => {
    const a = randomName('ta-');
    const b = randomName('tb-');
    await admin.publish([...events(a, 2), ...events(b, 2)], 'PERSISTED');
    const onlyA = await token({ threads: [a] });
    assert.equal((await grpcSubscribe(stack.grpcTarget, a)).status?.code, grpc.status.UNAUTHENTICATED);
    assert.equal(
      (await grpcSubscribe(stack.grpcTarget, a, 'garbage')).status?.code,
      grpc.status.UNAUTHENTICATED,
    );
    const expired = await token({ threads: [a] }, -10);
    assert.equal(
      (await grpcSubscribe(stack.grpcTarget, a, expired)).status?.code,
      grpc.status.UNAUTHENTICATED,
    );
    const other = await grpcSubscribe(stack.grpcTarget, b, onlyA);
    assert.equal(other.status?.code, grpc.status.PERMISSION_DENIED);
    assert.equal(other.messages.length, 0, 'nothing of thread B');
    const own = await grpcSubscribe(stack.grpcTarget, a, onlyA);
    assert.equal(own.status, undefined, 'the call was still open at its live marker');
    assert.deepEqual(
      own.messages.flatMap((m) => (m.event ? [Number(m.event.seq)] : [])),
      [1, 2],
    );
  });

  test('an expiring token ends a gRPC Subscribe call with UNAUTHENTICATED', async () => {
    const a = randomName('ta-');
    await admin.publish(events(a, 1), 'PERSISTED');
    const proto = loadProto().proto as unknown as SubscriberProto;
    const client = new proto.runstream.v1.Subscriber(stack.grpcTarget, grpc.credentials.createInsecure());
    try {
      const md = new grpc.Metadata();
      md.set('authorization', `Bearer ${await token({ threads: [a] }, 2)}`);
      const call = client.Subscribe({ thread_id: a }, md);
      call.on('data', () => undefined);
      call.on('error', () => undefined);
      const status = await new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
      assert.equal(status.code, grpc.status.UNAUTHENTICATED);
    } finally {
      client.close();
    }
  });

  test('an expiring token ends an SSE stream with a token_expired error', async () => {
    const a = randomName('ta-');
    await admin.publish(events(a, 1), 'PERSISTED');
    const res = await fetch(`${stack.httpUrl}/v1/threads/${a}/stream`, {
      headers: bearer(await token({ threads: [a] }, 2)),
    });
    assert.equal(res.status, 200);
    // Read to the end: the server ends the response when the token expires.
    const text = await readSse(res, () => false);
    assert.match(text, /id: 1\n/);
    assert.match(text, /token_expired/);
  });

  test('History over HTTP and gRPC: a token for thread A cannot read thread B', async () => {
    const a = randomName('ta-');
    const b = randomName('tb-');
    await admin.publish([...events(a, 2), ...events(b, 2)], 'PERSISTED');
    const onlyA = await token({ threads: [a] });
    for (const path of ['messages', 'runs', 'runs/run-1/events']) {
      const code = async (t: string, headers: Record<string, string>) =>
        (await fetch(`${stack.httpUrl}/v1/threads/${t}/${path}`, { headers })).status;
      assert.equal(await code(a, {}), 401, path);
      assert.equal(await code(b, bearer(onlyA)), 403, path);
      assert.equal(await code(a, bearer(onlyA)), 200, path);
    }
    const grpcCodeOf = async (c: HistoryClient, t: string) => {
      try {
        await c.listEvents({ thread_id: t });
        return grpc.status.OK;
      } catch (err) {
        return (err as grpc.ServiceError).code;
      } finally {
        c.close();
      }
    };
    assert.equal(await grpcCodeOf(new HistoryClient(stack.grpcTarget), a), grpc.status.UNAUTHENTICATED);
    assert.equal(
      await grpcCodeOf(new HistoryClient(stack.grpcTarget, onlyA), b),
      grpc.status.PERMISSION_DENIED,
    );
    assert.equal(await grpcCodeOf(new HistoryClient(stack.grpcTarget, onlyA), a), grpc.status.OK);
    // Deleting needs more than read.
    const del = await fetch(`${stack.httpUrl}/v1/threads/${a}`, { method: 'DELETE', headers: bearer(onlyA) });
    assert.equal(del.status, 403);
  });

  test('cancel needs the cancel right, over HTTP and WebSocket', async () => {
    const a = randomName('ta-');
    await admin.publish(events(a, 1, { runId: 'run-x' }), 'PERSISTED');
    const url = `${stack.httpUrl}/v1/threads/${a}/runs/run-x/cancel`;
    const post = (headers: Record<string, string>) => fetch(url, { method: 'POST', headers });
    assert.equal((await post({})).status, 401);
    assert.equal((await post(bearer(await token({ threads: [a] })))).status, 403, 'read only');
    assert.equal((await post(bearer(await token({ threads: ['other'], scope: 'cancel' })))).status, 403);
    const foreign = await post({
      ...bearer(await token({ threads: [a], scope: 'cancel' })),
      origin: 'https://evil.example.com',
    });
    assert.equal(foreign.status, 403, 'a page on another origin cannot make the browser cancel');

    const ws = await WsConnection.open(stack.wsUrl, { token: await token({ threads: [a] }) });
    ws.sendRaw({ type: 'cancel', id: 'c1', thread_id: a, run_id: 'run-x' });
    const refused = await ws.waitFor((f) => f.type === 'error' && f.id === 'c1');
    assert.equal(refused.type === 'error' && refused.code, 'permission_denied');
    await ws.close();

    assert.equal((await post(bearer(await token({ threads: [a], scope: 'read cancel' })))).status, 202);
  });

  test('gRPC Publish: UNAUTHENTICATED without a valid token, PERMISSION_DENIED outside its rights', async () => {
    const a = randomName('ta-');
    const b = randomName('tb-');
    const client = (t?: string) => new IngestClient(stack.grpcTarget, t === undefined ? {} : { token: t });
    const clients: IngestClient[] = [];
    const as = (t?: string) => {
      const c = client(t);
      clients.push(c);
      return c;
    };
    try {
      assert.equal(await grpcCode(as().publish(events(a, 1))), grpc.status.UNAUTHENTICATED);
      assert.equal(await grpcCode(as('garbage').publish(events(a, 1))), grpc.status.UNAUTHENTICATED);
      const expired = await token({ threads: '*', scope: 'publish' }, -10);
      assert.equal(await grpcCode(as(expired).publish(events(a, 1))), grpc.status.UNAUTHENTICATED);
      const readOnly = await token({ threads: '*' });
      assert.equal(await grpcCode(as(readOnly).publish(events(a, 1))), grpc.status.PERMISSION_DENIED);

      const publisherA = as(await token({ threads: [a], scope: 'publish' }));
      // One event for another thread refuses the whole request: nothing of it is stored.
      const mixed = [...events(a, 2), ...events(b, 1, { from: 3 })];
      const err = await publisherA.publish(mixed).catch((e: grpc.ServiceError) => e);
      assert.equal((err as grpc.ServiceError).code, grpc.status.PERMISSION_DENIED);
      assert.match((err as grpc.ServiceError).details, /events\[2\]\.thread_id/);
      assert.deepEqual(await threadRows(stack.db, b), []);

      const acks = await publisherA.publish(events(a, 2), 'PERSISTED');
      assert.deepEqual(
        acks.map((x) => x.seq),
        [1, 2],
      );
      assert.deepEqual(
        (await threadRows(stack.db, a)).map((r) => r.seq),
        [1, 2],
        'only the permitted request was stored',
      );

      // PublishStream: refused at once without a token, and per request outside its threads.
      const anon = as().openStream();
      await assert.rejects(
        anon.send(events(a, 1)),
        (e: grpc.ServiceError) => e.code === grpc.status.UNAUTHENTICATED,
      );
      const stream = publisherA.openStream();
      assert.equal((await stream.send(events(a, 1, { from: 3 }), 'PERSISTED'))[0]?.seq, 3);
      await assert.rejects(
        stream.send(events(b, 1, { from: 9 })),
        (e: grpc.ServiceError) => e.code === grpc.status.PERMISSION_DENIED,
      );
      assert.deepEqual(await threadRows(stack.db, b), []);
    } finally {
      for (const c of clients) c.close();
    }
  });

  test('an expiring token closes the WebSocket with 4001 and the cursors to resume from', async () => {
    const a = randomName('ta-');
    await admin.publish(events(a, 4), 'PERSISTED');
    const ws = await WsConnection.open(stack.wsUrl, { token: await token({ threads: [a] }, 2) });
    ws.subscribe('s', a);
    await ws.waitFor((f) => f.type === 'live' && f.id === 's');
    const closed = await ws.closed;
    assert.equal(closed.code, CLOSE_TOKEN_EXPIRED);
    assert.equal(closed.code, 4001, 'the documented close code');
    const last = ws.frames.at(-1);
    assert.equal(last?.type, 'error');
    assert.equal(last?.type === 'error' && last.code, 'token_expired');
    assert.deepEqual(last?.type === 'error' && last.cursors, { s: 4 });

    // Resuming with a fresh token from the cursor loses nothing.
    await admin.publish(events(a, 2, { from: 5 }), 'PERSISTED');
    const again = await WsConnection.open(stack.wsUrl, { token: await token({ threads: [a] }) });
    again.subscribe('s', a, 4);
    await again.waitFor((f) => f.type === 'live' && f.id === 's');
    assert.deepEqual(
      again.events('s').map((e) => e.seq),
      [5, 6],
    );
    await again.close();
  });

  test('an expiring token ends a PublishStream with UNAUTHENTICATED', async () => {
    const a = randomName('ta-');
    const c = new IngestClient(stack.grpcTarget, {
      token: await token({ threads: [a], scope: 'publish' }, 2),
    });
    try {
      const stream = c.openStream();
      assert.equal((await stream.send(events(a, 1), 'PERSISTED'))[0]?.seq, 1);
      const status = await new Promise<grpc.StatusObject>((resolve) => stream.call.on('status', resolve));
      assert.equal(status.code, grpc.status.UNAUTHENTICATED);
      assert.match(status.details, /expired/);
    } finally {
      c.close();
    }
  });

  test('a user-scoped token reads only its user’s events and publishes only as that user', async () => {
    const t = randomName('tu-');
    // Seqs 1..6 alternate between two users.
    await admin.publish(
      [1, 2, 3, 4, 5, 6].map((n) => ({
        ...(events(t, 1, { from: n })[0] as Event),
        user_id: n % 2 ? 'alice' : 'bob',
      })),
      'PERSISTED',
    );
    const alice = await token({ threads: [t], user_id: 'alice', scope: 'read publish' });

    const ws = await WsConnection.open(stack.wsUrl, { token: alice });
    ws.subscribe('s', t);
    const live = await ws.waitFor((f) => f.type === 'live' && f.id === 's');
    assert.deepEqual(
      ws.events('s').map((e) => [e.seq, e.user_id]),
      [
        [1, 'alice'],
        [3, 'alice'],
        [5, 'alice'],
      ],
    );
    assert.equal(live.type === 'live' && live.seq, 6, 'the cursor covers the skipped events');

    // Live: bob's event is skipped, alice's arrives.
    await admin.publish(
      [
        { ...(events(t, 1, { from: 7 })[0] as Event), user_id: 'bob' },
        { ...(events(t, 1, { from: 8 })[0] as Event), user_id: 'alice' },
      ],
      'PERSISTED',
    );
    await ws.waitFor((f) => f.type === 'event' && f.event.seq === 8);
    assert.deepEqual(
      ws.events('s').map((e) => e.seq),
      [1, 3, 5, 8],
    );
    await ws.close();

    const page = await getJson(`${stack.httpUrl}/v1/threads/${t}/events?limit=2`, bearer(alice));
    assert.deepEqual(
      (page.body.events as { seq: number }[]).map((e) => e.seq),
      [1, 3],
    );
    const rest = await getJson(
      `${stack.httpUrl}/v1/threads/${t}/events?after_seq=${page.body.next_after_seq}`,
      bearer(alice),
    );
    assert.deepEqual(
      (rest.body.events as { seq: number }[]).map((e) => e.seq),
      [5, 8],
    );
    assert.equal(rest.body.next_after_seq, 8);

    const asAlice = new IngestClient(stack.grpcTarget, { token: alice });
    try {
      const err = await asAlice
        .publish([{ ...(events(t, 1, { from: 20 })[0] as Event), user_id: 'bob' }])
        .catch((e: grpc.ServiceError) => e);
      assert.equal((err as grpc.ServiceError).code, grpc.status.PERMISSION_DENIED);
      await asAlice.publish([{ ...(events(t, 1, { from: 21 })[0] as Event), user_id: 'alice' }], 'PERSISTED');
    } finally {
      asAlice.close();
    }
  });
});

describe('open mode (no key configured)', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack();
  });
  after(async () => {
    await stack?.[Symbol.asyncDispose]();
  });

  test('works as before: no token on gRPC, WebSocket or HTTP, from any origin', async () => {
    const t = randomName('t-');
    await stack.client.publish(events(t, 3), 'PERSISTED');
    const ws = await WsConnection.open(stack.wsUrl, { origin: 'https://anywhere.example' });
    ws.subscribe('s', t);
    await ws.waitFor((f) => f.type === 'live' && f.id === 's');
    assert.deepEqual(
      ws.events('s').map((e) => e.seq),
      [1, 2, 3],
    );
    await ws.close();
    const page = await getJson(`${stack.httpUrl}/v1/threads/${t}/events`, {
      origin: 'https://anywhere.example',
    });
    assert.equal(page.status, 200);
    assert.equal((page.body.events as unknown[]).length, 3);
  });
});
