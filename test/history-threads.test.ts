// GET /v1/threads: the threads with runs, in id order, paged by `after`; counts from the
// runs; a token sees only the threads it may read (ids and prefixes) and, user-scoped, only
// its user's; bad input is refused naming the parameter; a deleted thread is gone.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SignJWT } from 'jose';
import type { Event } from '../src/client/ingest-client.js';
import { IngestClient } from '../src/client/ingest-client.js';
import { tokenEvent } from './helpers/events.js';
import { type Stack, startStack } from './helpers/stack.js';

interface ThreadJson {
  thread_id: string;
  head_seq: number;
  run_count: number;
  event_count: number;
  message_count: number;
  started_at: string;
  updated_at: string;
  last_run_id: string;
  last_run_status: string;
}
interface Page {
  threads: ThreadJson[];
  next_after: string | null;
  has_more: boolean;
}

async function get<T>(url: string, token?: string): Promise<{ status: number; body: T }> {
  const res = await fetch(url, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, body: (await res.json()) as T };
}

const end = (thread: string, run: string, i: number, status = 'success'): Event =>
  tokenEvent(thread, i, {
    run_id: run,
    event_type: 'run_end',
    category: 'LIFECYCLE',
    content_json: JSON.stringify({ status }),
  });

describe('an open broker', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack();
    // t-a: two runs (the second still running); t_b: one ended run of user u1; t-c: one of u2.
    await stack.client.publish(
      [
        tokenEvent('t-a', 1, { run_id: 'r1' }),
        end('t-a', 'r1', 2),
        tokenEvent('t-a', 3, { run_id: 'r2' }),
        tokenEvent('t_b', 1, { run_id: 'rb', user_id: 'u1' }),
        end('t_b', 'rb', 2, 'error'),
        tokenEvent('t-c', 1, { run_id: 'rc', user_id: 'u2' }),
      ],
      'PERSISTED',
    );
  });
  after(async () => {
    await stack[Symbol.asyncDispose]();
  });

  test('lists every thread with its counts and latest run, in id order', async () => {
    const { status, body } = await get<Page>(`${stack.httpUrl}/v1/threads`);
    assert.equal(status, 200);
    assert.deepEqual(
      body.threads.map((t) => [
        t.thread_id,
        t.head_seq,
        t.run_count,
        t.event_count,
        t.last_run_id,
        t.last_run_status,
      ]),
      [
        ['t-a', 3, 2, 3, 'r2', 'running'],
        ['t-c', 1, 1, 1, 'rc', 'running'],
        ['t_b', 2, 1, 2, 'rb', 'error'],
      ],
    );
    assert.equal(body.has_more, false);
    const a = body.threads[0] as ThreadJson;
    assert.equal(a.message_count, 2);
    assert.match(a.started_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.ok(a.updated_at >= a.started_at);
  });

  test('pages by after; a user_id scopes the list to that user', async () => {
    const first = await get<Page>(`${stack.httpUrl}/v1/threads?limit=2`);
    assert.deepEqual(
      first.body.threads.map((t) => t.thread_id),
      ['t-a', 't-c'],
    );
    assert.equal(first.body.has_more, true);
    assert.equal(first.body.next_after, 't-c');
    const second = await get<Page>(`${stack.httpUrl}/v1/threads?limit=2&after=t-c`);
    assert.deepEqual(
      second.body.threads.map((t) => t.thread_id),
      ['t_b'],
    );
    assert.equal(second.body.has_more, false);
    assert.equal(second.body.next_after, 't_b');
    const u1 = await get<Page>(`${stack.httpUrl}/v1/threads?user_id=u1`);
    assert.deepEqual(
      u1.body.threads.map((t) => t.thread_id),
      ['t_b'],
    );
  });

  test('bad parameters are refused, named', async () => {
    for (const [query, name] of [
      ['limit=0', 'limit'],
      ['limit=x', 'limit'],
      ['after=a%20b', 'after'],
      ['user_id=..', 'user_id'],
      ['aftr=t-a', 'aftr'],
    ] as const) {
      const r = await get<{ error: { code: string; message: string } }>(
        `${stack.httpUrl}/v1/threads?${query}`,
      );
      assert.equal(r.status, 400, query);
      assert.equal(r.body.error.code, 'invalid_argument', query);
      assert.match(r.body.error.message, new RegExp(`^${name}\\b`), query);
    }
    const post = await fetch(`${stack.httpUrl}/v1/threads`, { method: 'POST' });
    assert.equal(post.status, 405);
  });

  test('a deleted thread is no longer listed', async () => {
    await stack.client.publish([tokenEvent('t-gone', 1)], 'PERSISTED');
    const before = await get<Page>(`${stack.httpUrl}/v1/threads`);
    assert.ok(before.body.threads.some((t) => t.thread_id === 't-gone'));
    assert.equal((await fetch(`${stack.httpUrl}/v1/threads/t-gone`, { method: 'DELETE' })).status, 200);
    const afterDelete = await get<Page>(`${stack.httpUrl}/v1/threads`);
    assert.ok(!afterDelete.body.threads.some((t) => t.thread_id === 't-gone'));
  });
});

describe('a broker with authentication', () => {
  const SECRET = 'threads-test-secret-of-at-least-32-bytes';
  let stack: Stack;
  const token = (claims: Record<string, unknown>) =>
    new SignJWT(claims)
      .setProtectedHeader({ alg: 'HS256' })
      .setExpirationTime('5m')
      .sign(new TextEncoder().encode(SECRET));
  before(async () => {
    stack = await startStack({ jwtSecret: SECRET });
    const publisher = new IngestClient(stack.grpcTarget, {
      token: await token({ threads: '*', scope: 'publish' }),
    });
    try {
      await publisher.publish(
        [
          tokenEvent('q_1', 1, { user_id: 'u1' }),
          tokenEvent('qx1', 1, { user_id: 'u1' }),
          tokenEvent('q_2', 1, { user_id: 'u2' }),
          tokenEvent('exact', 1),
        ],
        'PERSISTED',
      );
    } finally {
      publisher.close();
    }
  });
  after(async () => {
    await stack[Symbol.asyncDispose]();
  });

  const ids = async (claims: Record<string, unknown>, query = '') => {
    const r = await get<Page>(`${stack.httpUrl}/v1/threads${query}`, await token(claims));
    assert.equal(r.status, 200);
    return r.body.threads.map((t) => t.thread_id);
  };

  test('a token lists only the threads it may read, and only its user when scoped', async () => {
    assert.deepEqual(await ids({ threads: '*' }), ['exact', 'q_1', 'q_2', 'qx1']);
    // "_" in a prefix is a literal underscore, not LIKE's any-character.
    assert.deepEqual(await ids({ threads: ['q_*', 'exact'] }), ['exact', 'q_1', 'q_2']);
    assert.deepEqual(await ids({ threads: 'q_*', user_id: 'u1' }), ['q_1']);
    assert.deepEqual(await ids({ threads: '*', scope: 'publish' }), []);
    assert.deepEqual(await ids({ threads: [] }), []);
    const widened = await get<{ error: { code: string } }>(
      `${stack.httpUrl}/v1/threads?user_id=u2`,
      await token({ threads: '*', user_id: 'u1' }),
    );
    assert.equal(widened.status, 403);
    assert.equal((await fetch(`${stack.httpUrl}/v1/threads`)).status, 401);
  });
});

test("a user's list gives a shared thread's whole head, not that user's last seq", async () => {
  await using stack = await startStack();
  // Run s1 (seqs 1-2) is user u3's, run s2 (seq 3) user u4's: u3's list shows the thread at 3.
  await stack.client.publish(
    [
      tokenEvent('t-s', 1, { run_id: 's1', user_id: 'u3' }),
      tokenEvent('t-s', 2, { run_id: 's1', user_id: 'u3' }),
      tokenEvent('t-s', 3, { run_id: 's2', user_id: 'u4' }),
    ],
    'PERSISTED',
  );
  const u3 = await get<Page>(`${stack.httpUrl}/v1/threads?user_id=u3`);
  assert.deepEqual(
    u3.body.threads.map((t) => [t.thread_id, t.head_seq]),
    [['t-s', 3]],
  );
});
