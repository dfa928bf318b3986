// Invariant 6: invalid input is refused with a clear error naming the field, and nothing
// of it is stored — neither in Postgres nor in the JetStream log.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { Event } from '../src/client/ingest-client.js';
import { logMessageCount, randomName, type Stack, startStack } from './helpers/stack.js';

let stack: Stack;
before(async () => {
  stack = await startStack({ maxContentBytes: 4096, maxEventsPerRequest: 100 });
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

function good(threadId: string, i = 0): Event {
  return {
    thread_id: threadId,
    run_id: 'run-1',
    event_id: `ok-${i}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: '{"content":"hi"}',
    metadata_json: '{"id":"m1"}',
  };
}

async function logMessages(): Promise<number> {
  const nc = await connect({ servers: stack.servers.nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    return await logMessageCount(jsm, stack.config);
  } finally {
    await nc.close();
  }
}

const CASES: [string, (e: Event) => Event | Event[], RegExp][] = [
  ['missing thread_id', (e) => ({ ...e, thread_id: '' }), /events\[1\]\.thread_id: is required/],
  ['thread_id with a dot', (e) => ({ ...e, thread_id: 'a.b' }), /events\[1\]\.thread_id: must match/],
  ['thread_id too long', (e) => ({ ...e, thread_id: 'x'.repeat(129) }), /events\[1\]\.thread_id/],
  ['missing run_id', (e) => ({ ...e, run_id: '' }), /events\[1\]\.run_id: is required/],
  ['run_id with a wildcard', (e) => ({ ...e, run_id: 'r*' }), /events\[1\]\.run_id/],
  ['event_id with a space', (e) => ({ ...e, event_id: 'a b' }), /events\[1\]\.event_id/],
  ['user_id with a slash', (e) => ({ ...e, user_id: 'u/1' }), /events\[1\]\.user_id/],
  ['missing event_type', (e) => ({ ...e, event_type: '' }), /events\[1\]\.event_type: is required/],
  ['event_type with a newline', (e) => ({ ...e, event_type: 'a\nb' }), /events\[1\]\.event_type/],
  ['event_type too long', (e) => ({ ...e, event_type: 'x'.repeat(65) }), /events\[1\]\.event_type/],
  ['category unset', (e) => ({ ...e, category: 'CATEGORY_UNSPECIFIED' }), /events\[1\]\.category/],
  ['category out of range', (e) => ({ ...e, category: 9 as unknown as 'MESSAGE' }), /events\[1\]\.category/],
  [
    'content not JSON',
    (e) => ({ ...e, content_json: '{nope' }),
    /events\[1\]\.content_json: is not valid JSON/,
  ],
  ['content empty', (e) => ({ ...e, content_json: '' }), /events\[1\]\.content_json: is required/],
  [
    'content NaN',
    (e) => ({ ...e, content_json: '{"x": NaN}' }),
    /events\[1\]\.content_json: is not valid JSON/,
  ],
  ['content Infinity', (e) => ({ ...e, content_json: 'Infinity' }), /events\[1\]\.content_json/],
  [
    'content with a number past a double (1e999999)',
    (e) => ({ ...e, content_json: '{"x":1e999999}' }),
    /events\[1\]\.content_json: holds a number beyond the range of a double/,
  ],
  [
    'content with a negative number past a double, deep in an array',
    (e) => ({ ...e, content_json: '[1,[2,{"y":[-1.5E+400]}]]' }),
    /events\[1\]\.content_json: holds a number beyond the range of a double/,
  ],
  [
    'content with a 400-digit integer',
    (e) => ({ ...e, content_json: `{"n":${'9'.repeat(400)}}` }),
    /events\[1\]\.content_json: holds a number beyond the range of a double/,
  ],
  [
    'content with 301 digits and a 1-digit exponent',
    (e) => ({ ...e, content_json: `{"n":1${'0'.repeat(300)}e9}` }),
    /events\[1\]\.content_json: holds a number beyond the range of a double/,
  ],
  [
    'metadata with a number past a double',
    (e) => ({ ...e, metadata_json: '{"n":2e308}' }),
    /events\[1\]\.metadata_json: holds a number beyond the range of a double/,
  ],
  [
    'content with \\u0000',
    (e) => ({ ...e, content_json: '{"x":"a\\u0000b"}' }),
    /events\[1\]\.content_json: .*\\u0000/,
  ],
  [
    'content with a lone surrogate',
    (e) => ({ ...e, content_json: '"\\ud800"' }),
    /events\[1\]\.content_json: .*surrogate/,
  ],
  [
    'content nested deeper than RS_MAX_JSON_DEPTH',
    (e) => ({ ...e, content_json: `${'['.repeat(600)}${']'.repeat(600)}` }),
    /events\[1\]\.content_json: nests deeper than 512 levels/,
  ],
  [
    'metadata nested deeper than RS_MAX_JSON_DEPTH',
    (e) => ({ ...e, metadata_json: `${'{"a":'.repeat(600)}1${'}'.repeat(600)}` }),
    /events\[1\]\.metadata_json: nests deeper than 512 levels/,
  ],
  [
    'deep nesting around a \\u escape',
    (e) => ({ ...e, content_json: `${'['.repeat(600)}"\\u0041"${']'.repeat(600)}` }),
    /events\[1\]\.content_json: nests deeper/,
  ],
  [
    'a high surrogate escape before a plain character',
    (e) => ({ ...e, content_json: '"\\ud800x"' }),
    /events\[1\]\.content_json: .*surrogate/,
  ],
  [
    'a low surrogate escape alone',
    (e) => ({ ...e, content_json: '{"k":"\\udc00"}' }),
    /events\[1\]\.content_json: .*surrogate/,
  ],
  [
    'a surrogate escape in metadata',
    (e) => ({ ...e, metadata_json: '{"\\ud800":1}' }),
    /events\[1\]\.metadata_json: .*surrogate/,
  ],
  [
    'content too big',
    (e) => ({ ...e, content_json: JSON.stringify('x'.repeat(5000)) }),
    /events\[1\]\.content_json: is \d+ bytes; the limit is 4096/,
  ],
  [
    'metadata an array',
    (e) => ({ ...e, metadata_json: '[1]' }),
    /events\[1\]\.metadata_json: must be a JSON object/,
  ],
  [
    'metadata not JSON',
    (e) => ({ ...e, metadata_json: '{' }),
    /events\[1\]\.metadata_json: is not valid JSON/,
  ],
  ['seq set by the producer', (e) => ({ ...e, seq: 5 }), /events\[1\]\.seq: is assigned by the broker/],
  [
    'offset set by the producer',
    (e) => ({ ...e, offset: 5 }),
    /events\[1\]\.offset: is assigned by the broker/,
  ],
  [
    'created_at before 1970',
    (e) => ({ ...e, created_at: { seconds: -5, nanos: 0 } }),
    /events\[1\]\.created_at/,
  ],
  [
    'created_at with bad nanos',
    (e) => ({ ...e, created_at: { seconds: 5, nanos: 2e9 } }),
    /events\[1\]\.created_at: nanos/,
  ],
];

for (const [name, mutate, message] of CASES) {
  test(`refused: ${name}`, async () => {
    const t = randomName('t-');
    const bad = mutate({ ...good(t, 1) }) as Event;
    const before = await logMessages();
    await assert.rejects(
      stack.client.publish([good(t, 0), bad, good(t, 2)], 'PERSISTED'),
      (err: { code: number; details: string }) => {
        assert.equal(err.code, status.INVALID_ARGUMENT);
        assert.match(err.details, message);
        return true;
      },
    );
    // The good events of the request were not stored either: the request is refused whole.
    assert.equal(await logMessages(), before, 'nothing reached the log');
    const rows = await stack.db.query('SELECT count(*)::int AS n FROM run_events WHERE thread_id = $1', [t]);
    assert.equal(rows.rows[0].n, 0);
  });
}

test('refused: an empty request, too many events, an unknown ack level', async () => {
  const t = randomName('t-');
  const before = await logMessages();
  const expectInvalid = (p: Promise<unknown>, re: RegExp) =>
    assert.rejects(
      p,
      (err: { code: number; details: string }) =>
        err.code === status.INVALID_ARGUMENT && re.test(err.details),
    );
  await expectInvalid(stack.client.publish([]), /^events: at least one/);
  await expectInvalid(
    stack.client.publish(Array.from({ length: 101 }, (_, i) => good(t, i))),
    /^events: 101 events in one request; the limit is 100/,
  );
  await expectInvalid(
    new Promise((resolve, reject) =>
      stack.client.raw.Publish({ events: [good(t)], ack: 7 as unknown as 'ACCEPTED' }, (err, res) =>
        err ? reject(err) : resolve(res),
      ),
    ),
    /^ack: unknown ack level/,
  );
  assert.equal(await logMessages(), before);
});

test('on PublishStream a bad request ends the stream with INVALID_ARGUMENT naming the request and field', async () => {
  const t = randomName('t-');
  const stream = stack.client.openStream();
  const ok = await stream.send([good(t, 0)], 'PERSISTED');
  assert.equal(ok[0]?.seq, 1);
  await assert.rejects(
    stream.send([{ ...good(t, 1), content_json: 'nope' }]),
    (err: { code: number; details: string }) => {
      assert.equal(err.code, status.INVALID_ARGUMENT);
      assert.match(err.details, /^request 1: events\[0\]\.content_json/);
      return true;
    },
  );
  const rows = await stack.db.query('SELECT event_id FROM run_events WHERE thread_id = $1', [t]);
  assert.deepEqual(
    rows.rows.map((r) => r.event_id),
    ['ok-0'],
  );
});

test('numbers a double holds, or only more precisely than it can, are kept as written', async () => {
  const t = randomName('t-');
  // Each is accepted and returned as its text; only a magnitude past a double's is refused.
  const content =
    '{"max":1.7976931348623157e308,"exp":1e308,"tiny":1e-999999,"id":123456789012345678901234567890,' +
    `"zeros":1${'0'.repeat(300)},"fraction":0.${'0'.repeat(400)}1,"text":"1e999999 and ${'9'.repeat(400)}"}`;
  await stack.client.publish([{ ...good(t), content_json: content }], 'PERSISTED');
  const rows = await stack.db.query('SELECT content::text AS c FROM run_events WHERE thread_id = $1', [t]);
  assert.equal(rows.rows[0]?.c, content);
});

test('missing event_id: the broker assigns a time-ordered UUIDv7', async () => {
  const t = randomName('t-');
  const acks = await stack.client.publish(
    [
      { ...good(t), event_id: '' },
      { ...good(t), event_id: '' },
    ],
    'PERSISTED',
  );
  const [a, b] = acks.map((x) => x.event_id) as [string, string];
  assert.match(a, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.ok(a < b, 'ids sort in creation order');
  assert.deepEqual(
    acks.map((x) => x.seq),
    [1, 2],
  );
});

test('a producer timestamp is kept (millisecond precision)', async () => {
  const t = randomName('t-');
  await stack.client.publish(
    [{ ...good(t), created_at: { seconds: 1_700_000_000, nanos: 123_456_789 } }],
    'PERSISTED',
  );
  const res = await fetch(`${stack.httpUrl}/v1/threads/${t}/events`);
  const body = (await res.json()) as { events: { created_at: string }[] };
  assert.equal(body.events[0]?.created_at, '2023-11-14T22:13:20.123Z');
});
