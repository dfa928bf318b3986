// Ingest reads a publish request and writes its answer with its own codec (src/ingest/wire.ts)
// where the message is the usual kind. What it decodes must equal what the contract's decoder
// (proto-loader, through the server's strict reader) gives for the same bytes, and what it
// writes must decode to what the contract's encoder would have sent; anything else it must
// leave to the contract's codec. Generated and mangled messages, both codecs side by side.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import type { Event__Output } from '../src/gen/runstream/v1/Event.js';
import type { EventAck } from '../src/gen/runstream/v1/EventAck.js';
import type { PublishResponse } from '../src/gen/runstream/v1/PublishResponse.js';
import { StrictReader } from '../src/grpc/strict-utf8.js';
import { validateEvents } from '../src/ingest/validate.js';
import { decodePublishRequest, encodePublishResponse } from '../src/ingest/wire.js';
import { loadProto } from '../src/proto.js';
import { fcParams } from './helpers/fuzz.js';
import { lenField, message, tag, varint, varintField, WIRE } from './helpers/protobuf-bytes.js';

interface Method {
  requestDeserialize(b: Buffer): unknown;
  responseSerialize(r: unknown): Buffer;
  responseDeserialize(b: Buffer): unknown;
}
const publish = (loadProto().packageDefinition['runstream.v1.Ingest'] as unknown as Record<string, Method>)
  .Publish as Method;

/** The contract's decoding, as the server does it; undefined where it refuses the message. */
function contract(bytes: Buffer): unknown {
  try {
    return publish.requestDeserialize(new StrictReader(bytes) as unknown as Buffer);
  } catch {
    return undefined;
  }
}

/** `n` as a varint of 6 bytes, longer than it needs to be (valid protobuf). */
function long6(n: number): Buffer {
  const b = Buffer.alloc(6);
  for (let i = 0; i < 5; i++) b[i] = ((n >>> (7 * i)) & 0x7f) | 0x80;
  b[5] = 0;
  return b;
}

const counts = { fast: 0, contract: 0 };

/** The property: the codec's answer, when it gives one, is the contract's. */
function sameAsContract(bytes: Buffer): void {
  const fast = decodePublishRequest(bytes);
  if (fast === undefined) {
    counts.contract++;
    return;
  }
  counts.fast++;
  const expected = contract(bytes);
  assert.notEqual(expected, undefined, 'the codec decoded a message the contract refuses');
  assert.deepStrictEqual(fast, expected);
}

// Strings as producers send them, and the ones the codec must leave alone (U+FFFD).
const texts = fc.oneof(
  fc.constantFrom(
    '',
    't-1',
    'run-1',
    'ai_chunk',
    '{}',
    '{"id":"m-1"}',
    'é',
    '日本語',
    '🙂',
    '\uFFFD',
    'x'.repeat(300),
  ),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 20 }),
);
const small = fc.integer({ min: 0, max: 2 ** 31 });
const number64 = fc.oneof(small, fc.constantFrom(2 ** 48, 2 ** 49, 2 ** 53, 2 ** 63), fc.constant(-1));

/** An Event's fields in any order, any of them repeated or left out, some unknown or mistyped. */
const eventField = fc.oneof(
  {
    weight: 10,
    arbitrary: fc.tuple(fc.constantFrom(1, 2, 3, 5, 6, 7, 9, 10, 11), texts).map(([f, s]) => lenField(f, s)),
  },
  { weight: 3, arbitrary: fc.integer({ min: 0, max: 5 }).map((v) => varintField(4, v)) },
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom(16, 17), number64).map(([f, v]) => varintField(f, v)) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(number64, number64, fc.boolean())
      .map(([s, n, both]) =>
        lenField(8, both ? message(varintField(1, s), varintField(2, n)) : varintField(2, n)),
      ),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom(varintField(99, 1), varintField(1, 3), lenField(4, 'x'), lenField(8, 'zz')),
  },
  {
    weight: 1,
    arbitrary: fc
      .tuple(fc.constantFrom(1, 5, 6), texts)
      .map(([f, s]) => message(long6((f << 3) | WIRE.len), long6(Buffer.byteLength(s)), Buffer.from(s))),
  },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 3 }).map((v) => message(tag(4, WIRE.varint), long6(v))) },
);
const eventBytes = fc.array(eventField, { maxLength: 14 }).map((fields) => message(...fields));
const requestBytes = fc
  .tuple(
    fc.array(eventBytes, { minLength: 0, maxLength: 6 }),
    fc.option(fc.integer({ min: 0, max: 4 }), { nil: undefined }),
    fc.boolean(),
  )
  .map(([events, ack, ackFirst]) => {
    const parts = events.map((e) => lenField(1, e));
    if (ack !== undefined) (ackFirst ? parts.unshift : parts.push).call(parts, varintField(2, ack));
    return message(...parts);
  });

test('a generated request decodes as the contract decodes it, or is left to the contract', () => {
  counts.fast = 0;
  counts.contract = 0;
  fc.assert(
    fc.property(requestBytes, (bytes) => sameAsContract(bytes)),
    fcParams(3000),
  );
  // Both ways are taken, so neither half of the property holds vacuously.
  assert.ok(counts.fast > 300, `decoded by the codec: ${counts.fast}`);
  assert.ok(counts.contract > 300, `left to the contract: ${counts.contract}`);
});

test('a mangled request (a byte changed, cut short, or inserted) decodes as the contract decodes it, or is left to it', () => {
  const mangled = fc
    .tuple(requestBytes, fc.nat(), fc.integer({ min: 0, max: 255 }), fc.constantFrom('flip', 'cut', 'insert'))
    .filter(([bytes]) => bytes.length > 0)
    .map(([bytes, at, byte, how]) => {
      const i = at % bytes.length;
      if (how === 'cut') return bytes.subarray(0, i);
      if (how === 'insert')
        return Buffer.concat([bytes.subarray(0, i), Buffer.from([byte]), bytes.subarray(i)]);
      const b = Buffer.from(bytes);
      b[i] = byte;
      return b;
    });
  fc.assert(
    fc.property(mangled, (bytes) => sameAsContract(bytes)),
    fcParams(3000),
  );
});

test('what the codec leaves to the contract: unknown fields and values, long numbers, possible non-UTF-8, truncation', () => {
  const ok = message(
    lenField(1, 't'),
    lenField(2, 'r'),
    lenField(3, 'ai_chunk'),
    varintField(4, 1),
    lenField(5, '1'),
  );
  assert.notEqual(decodePublishRequest(lenField(1, ok)), undefined);
  const cases: [string, Buffer][] = [
    ['an unknown field of the event', lenField(1, message(ok, varintField(99, 1)))],
    ['an unknown field of the request', message(lenField(1, ok), varintField(3, 1))],
    ['an unknown category', lenField(1, message(ok, varintField(4, 4)))],
    ['an unknown ack level', message(lenField(1, ok), varintField(2, 3))],
    ['a string field as a varint', lenField(1, message(ok, varintField(5, 1)))],
    ['a seq of 2^49', lenField(1, message(ok, varintField(16, 2 ** 49)))],
    ['a negative time', lenField(1, message(ok, lenField(8, varintField(1, -1))))],
    ['nanos past an int32', lenField(1, message(ok, lenField(8, varintField(2, 2 ** 31))))],
    ['a U+FFFD (maybe bytes that are not UTF-8)', lenField(1, message(ok, lenField(6, '{"a":"\uFFFD"}')))],
    ['bytes that are not UTF-8', lenField(1, message(ok, lenField(5, Buffer.from([0x22, 0xff, 0x22]))))],
    // protobufjs reads a 32-bit varint of more than 5 bytes as 10, skipping what follows unread.
    ['a 6-byte category', lenField(1, message(ok, tag(4, WIRE.varint), long6(1), lenField(5, '22')))],
    ['a 6-byte tag', lenField(1, message(long6((1 << 3) | WIRE.len), varint(2), Buffer.from('t2'), ok))],
    [
      'a 6-byte length',
      lenField(1, message(ok, tag(5, WIRE.len), long6(1), Buffer.from('2'), lenField(6, '{}'))),
    ],
    ['an event cut short', lenField(1, ok).subarray(0, 10)],
    ['a length past the end', Buffer.concat([varint((1 << 3) | WIRE.len), varint(100), ok])],
  ];
  for (const [name, bytes] of cases) assert.equal(decodePublishRequest(bytes), undefined, name);
});

test("a request's events share their strings where the bytes are the same, and only there", () => {
  const e = (thread: string, metadata: string) =>
    lenField(1, message(lenField(1, thread), lenField(2, 'run-1'), lenField(6, metadata), lenField(5, '1')));
  const decoded = decodePublishRequest(
    message(e('t-1', '{"id":"a"}'), e('t-1', '{"id":"a"}'), e('t-2', '{"id":"b"}'), e('t-2', '{"id":"a"}')),
  );
  assert.ok(decoded);
  assert.deepEqual(
    decoded.events.map((x) => [x.thread_id, x.run_id, x.metadata_json]),
    [
      ['t-1', 'run-1', '{"id":"a"}'],
      ['t-1', 'run-1', '{"id":"a"}'],
      ['t-2', 'run-1', '{"id":"b"}'],
      ['t-2', 'run-1', '{"id":"a"}'],
    ],
  );
});

const ack = fc.record(
  {
    event_id: texts,
    duplicate: fc.boolean(),
    seq: fc.oneof(small, fc.constant(Number.MAX_SAFE_INTEGER)),
    offset: fc.oneof(small, fc.constant(2 ** 40 + 3)),
    rejected: texts,
  },
  { requiredKeys: [] },
);

test('an answer of acks encodes to what the contract would send', () => {
  let encoded = 0;
  fc.assert(
    fc.property(fc.array(ack, { maxLength: 8 }), (acks) => {
      const response: PublishResponse = { acks: acks as EventAck[] };
      const bytes = encodePublishResponse(response);
      assert.ok(bytes, 'acks of the usual kind are encoded');
      encoded++;
      assert.deepStrictEqual(
        publish.responseDeserialize(bytes),
        publish.responseDeserialize(publish.responseSerialize(response)),
      );
    }),
    fcParams(2000),
  );
  assert.ok(encoded > 0);
});

test('an answer that is not acks alone is left to the contract', () => {
  const control = { cancel: { thread_id: 't', run_id: 'r', reason: '', event_id: 'e', user_id: '' } };
  assert.equal(encodePublishResponse({ acks: [], control }), undefined);
  assert.equal(encodePublishResponse({ acks: [{ event_id: 'e', seq: '5' }] }), undefined);
  assert.equal(encodePublishResponse({ acks: [{ event_id: 'e', offset: -1 }] }), undefined);
  assert.equal(encodePublishResponse({ acks: [{ event_id: 'e', offset: 2 ** 53 }] }), undefined);
  assert.deepEqual(encodePublishResponse({ acks: [] }), Buffer.alloc(0));
});

// validate.ts skips the checks of a field equal to the previous event's. Each case: two events
// that share the field's good value, then a third whose value differs and is bad.
const limits = { maxContentBytes: 4096, maxEventsPerRequest: 100, maxJsonDepth: 64 };
const good: Event__Output = {
  thread_id: 't-1',
  run_id: 'run-1',
  event_type: 'ai_chunk',
  category: 'MESSAGE',
  content_json: '1',
  metadata_json: '{"id":"m"}',
  event_id: '',
  created_at: null,
  user_id: 'u-1',
  category_name: '',
  created_at_text: '',
  seq: 0,
  offset: 0,
};

test('a field equal to the previous event’s is valid; one that differs is checked and refused by name', () => {
  const cases: [Partial<Event__Output>, RegExp][] = [
    [{ thread_id: 't.2' }, /events\[2\]\.thread_id/],
    [{ run_id: 'r*' }, /events\[2\]\.run_id/],
    [{ user_id: 'u/1' }, /events\[2\]\.user_id/],
    [{ event_type: 'a b' }, /events\[2\]\.event_type/],
    [{ metadata_json: '[1]' }, /events\[2\]\.metadata_json: must be a JSON object/],
    [{ metadata_json: `{"a":"${'x'.repeat(5000)}"}` }, /events\[2\]\.metadata_json: is \d+ bytes/],
    [{ category_name: 'Bad' }, /events\[2\]\.category_name/],
    [{ category: 'TRACE', category_name: 'message' }, /events\[2\]\.category/],
  ];
  for (const [bad, refusal] of cases) {
    assert.throws(() => validateEvents([good, { ...good }, { ...good, ...bad }], limits), refusal);
  }
  const records = validateEvents([good, { ...good }, { ...good, metadata_json: '{"id":"n"}' }], limits);
  assert.deepEqual(
    records.map((r) => [r.thread_id, r.category, r.metadata_json]),
    [
      ['t-1', 'message', '{"id":"m"}'],
      ['t-1', 'message', '{"id":"m"}'],
      ['t-1', 'message', '{"id":"n"}'],
    ],
  );
});

test('a traceparent goes into every event’s metadata, shared or not', () => {
  const tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  const records = validateEvents(
    [good, { ...good }, { ...good, metadata_json: '' }, { ...good, metadata_json: '' }],
    limits,
    new Date(),
    tp,
  );
  assert.deepEqual(
    records.map((r) => JSON.parse(r.metadata_json)),
    [{ traceparent: tp, id: 'm' }, { traceparent: tp, id: 'm' }, { traceparent: tp }, { traceparent: tp }],
  );
});
