// A string field whose bytes are not UTF-8 (proto3 requires UTF-8) is refused, naming the
// field, on every gRPC method: decoded leniently it would come out with U+FFFD in place of
// the bytes, and the broker would store and acknowledge an event other than the one sent.
// A U+FFFD sent as such is UTF-8 and is stored as sent. Real broker, nats-server, Postgres.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { lenField, message, varintField } from './helpers/protobuf-bytes.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

let stack: Stack;
let client: grpc.Client;
before(async () => {
  stack = await startStack();
  client = new grpc.Client(stack.grpcTarget, grpc.credentials.createInsecure());
});
after(async () => {
  client.close();
  await stack[Symbol.asyncDispose]();
});

const identity = (b: Buffer): Buffer => b;

function unary(path: string, request: Buffer): Promise<{ code: number; details: string }> {
  return new Promise((resolve) => {
    client.makeUnaryRequest(path, identity, identity, request, new grpc.Metadata(), {}, (err) =>
      resolve({ code: err?.code ?? grpc.status.OK, details: err?.details ?? '' }),
    );
  });
}

/** An Event's bytes: thread, run, type, category MESSAGE, content, event id. */
function event(thread: string, eventId: string, content: Buffer): Buffer {
  return message(
    lenField(1, thread),
    lenField(2, 'r'),
    lenField(3, 'ai_chunk'),
    varintField(4, 1),
    lenField(5, content),
    lenField(7, eventId),
  );
}

const publish = (...events: Buffer[]): Buffer =>
  message(...events.map((e) => lenField(1, e)), varintField(2, 2 /* PERSISTED */));

const NOT_UTF8: readonly [string, Buffer][] = [
  ['a lone surrogate as a client encodes it (CESU)', Buffer.from([0x22, 0x61, 0xed, 0xa0, 0x80, 0x62, 0x22])],
  ['a stray continuation byte', Buffer.from([0x22, 0x80, 0x22])],
  ['a truncated sequence', Buffer.from([0x22, 0xe4, 0xb8, 0x22])],
  ['an overlong encoding', Buffer.from([0x22, 0xc0, 0xa2, 0x22])],
];

test('Publish: content_json bytes that are not UTF-8 are refused, naming the event and the field; nothing is stored', async () => {
  const t = randomName('utf8-');
  for (const [name, content] of NOT_UTF8) {
    const ok = event(t, `good-${name}`, Buffer.from('"fine"'));
    const bad = event(t, `bad-${name}`, content);
    const answer = await unary('/runstream.v1.Ingest/Publish', publish(ok, bad));
    assert.equal(answer.code, grpc.status.INVALID_ARGUMENT, name);
    assert.match(answer.details, /^events\[1\]\.content_json: is not valid UTF-8$/, name);
  }
  const { rows } = await stack.db.query('SELECT count(*)::int AS n FROM run_events WHERE thread_id = $1', [
    t,
  ]);
  assert.equal(rows[0].n, 0, 'the requests were refused whole');
});

test('a string field that is not UTF-8 is named wherever it is: thread_id, a nested field, another service', async () => {
  const t = randomName('utf8-');
  const badThread = message(
    lenField(1, Buffer.from([0x74, 0xff])),
    lenField(2, 'r'),
    lenField(3, 'ai_chunk'),
    varintField(4, 1),
    lenField(5, '"x"'),
  );
  const a = await unary(
    '/runstream.v1.Ingest/Publish',
    publish(event(t, 'e0', Buffer.from('{}')), badThread),
  );
  assert.equal(a.code, grpc.status.INVALID_ARGUMENT);
  assert.match(a.details, /^events\[1\]\.thread_id: is not valid UTF-8$/);
  // History's ListEvents: thread_id is field 1.
  const h = await unary('/runstream.v1.History/ListEvents', message(lenField(1, Buffer.from([0xc3]))));
  assert.equal(h.code, grpc.status.INVALID_ARGUMENT);
  assert.match(h.details, /^thread_id: is not valid UTF-8$/);
});

test('a U+FFFD sent as such is UTF-8: stored and read back as sent', async () => {
  const t = randomName('utf8-');
  const content = '{"text":"a\uFFFDb"}';
  const answer = await unary('/runstream.v1.Ingest/Publish', publish(event(t, 'e0', Buffer.from(content))));
  assert.equal(answer.code, grpc.status.OK, answer.details);
  const { rows } = await stack.db.query('SELECT content::text AS c FROM run_events WHERE thread_id = $1', [
    t,
  ]);
  assert.equal(rows.length, 1);
  assert.deepEqual(JSON.parse(rows[0].c as string), { text: 'a\uFFFDb' });
});

test('PublishStream: the refusal names the request, as the stream names any refused request', async () => {
  const t = randomName('utf8-');
  const status = await new Promise<grpc.StatusObject>((resolve) => {
    const call = client.makeBidiStreamRequest('/runstream.v1.Ingest/PublishStream', identity, identity);
    call.on('data', () => undefined);
    call.on('error', () => undefined);
    call.on('status', resolve);
    call.write(publish(event(t, 'e0', Buffer.from('{}'))));
    call.write(publish(event(t, 'e1', Buffer.from([0x22, 0xff, 0x22]))));
    call.end();
  });
  assert.equal(status.code, grpc.status.INVALID_ARGUMENT);
  assert.match(status.details, /^request 1: events\[0\]\.content_json: is not valid UTF-8$/);
});

test('PublishStream: the requests before a malformed one are answered first, each of its events stored once', async () => {
  const t = randomName('utf8-');
  const good = 40;
  const bad: [string, Buffer, RegExp][] = [
    [
      'not-utf8',
      publish(event(t, 'bad', Buffer.from([0x22, 0xff, 0x22]))),
      /^request 40: events\[0\]\.content_json: is not valid UTF-8$/,
    ],
    ['not-protobuf', Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]), /^request message: not a valid/],
  ];
  for (const [name, message, details] of bad) {
    const acks: number[] = [];
    const status = await new Promise<grpc.StatusObject>((resolve) => {
      const call = client.makeBidiStreamRequest('/runstream.v1.Ingest/PublishStream', identity, identity);
      call.on('data', () => acks.push(acks.length));
      call.on('error', () => undefined);
      call.on('status', resolve);
      for (let i = 0; i < good; i++) call.write(publish(event(t, `${name}-${i}`, Buffer.from('{}'))));
      call.write(message);
      call.end();
    });
    assert.equal(status.code, grpc.status.INVALID_ARGUMENT, name);
    assert.match(status.details, details, name);
    assert.equal(acks.length, good, `${name}: every request before it answered`);
  }
  const { rows } = await stack.db.query('SELECT event_id FROM run_events WHERE thread_id = $1', [t]);
  assert.equal(rows.length, 2 * good);
});
