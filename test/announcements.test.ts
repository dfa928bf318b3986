// The persister's events announcements (src/log/announcements.ts): chunked within the size
// given, counting UTF-8 bytes (not UTF-16 units), every event once and in order, and a new chunk
// only where the next event would not fit: as few messages as the limit allows.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Msg } from '@nats-io/transport-node';
import { eventJson, type StoredEvent } from '../src/domain/event.js';
import {
  type CommittedEvent,
  chunkEvents,
  committedAtMs,
  decodeEventPayload,
  decodeEvents,
  EVENT_SEPARATOR,
} from '../src/log/announcements.js';
import { Subjects } from '../src/log/subjects.js';

function event(seq: number, text: string): StoredEvent {
  return {
    thread_id: 't-1',
    run_id: 'run-1',
    event_id: `e-${seq}`,
    event_type: 'token',
    category: 'message',
    user_id: '',
    created_at: '2026-01-01T00:00:00.000Z',
    content_json: JSON.stringify({ text }),
    metadata_json: '{}',
    seq,
    offset: seq,
  };
}

const bytes = (s: string): number => Buffer.byteLength(s);
const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');

/** What an exact greedy chunking gives: the reference the chunker must equal. */
function greedy(events: readonly StoredEvent[], maxBytes: number): string[] {
  const chunks: string[][] = [];
  let current: string[] = [];
  let size = 0;
  for (const e of events) {
    const line = eventJson(e);
    const s = bytes(line) + 1;
    if (current.length > 0 && size + s > maxBytes) {
      chunks.push(current);
      current = [];
      size = 0;
    }
    current.push(line);
    size += s;
  }
  if (current.length > 0) chunks.push(current);
  return chunks.map((c) => c.join(EVENT_SEPARATOR));
}

test('chunks stay within the limit in UTF-8 bytes, hold every event in order, and are as few as greedy packing makes', () => {
  const texts = ['a', 'tokens ', '日本語の文', '🤖🤖🤖', 'x'.repeat(300), 'é'.repeat(120), '"quoted\\"'];
  for (const maxBytes of [400, 700, 1_000, 4_096, 65_536]) {
    for (const count of [1, 2, 7, 50, 400]) {
      const events = Array.from({ length: count }, (_, i) =>
        event(i + 1, texts[(i * 5) % texts.length] as string),
      );
      const chunks = chunkEvents(events, maxBytes).map(text);
      assert.deepEqual(chunks, greedy(events, maxBytes), `maxBytes ${maxBytes}, ${count} events`);
      const seqs = chunkEvents(events, maxBytes).flatMap((c) =>
        decodeEventPayload(Buffer.from(c), 't-1').map((e) => e.seq),
      );
      assert.deepEqual(
        seqs,
        events.map((e) => e.seq),
      );
      for (const c of chunks) {
        // A chunk of one event may exceed the limit only when that event alone does.
        if (c.includes(EVENT_SEPARATOR)) assert.ok(bytes(c) <= maxBytes, `${bytes(c)} > ${maxBytes}`);
      }
    }
  }
});

test('multi-byte text is counted in bytes: 3-byte characters fill a chunk at a third of their length', () => {
  // Each line is ~1,090 UTF-16 units but ~3,200 bytes: counting units would put three in 4,096 bytes.
  const events = Array.from({ length: 6 }, (_, i) => event(i + 1, '語'.repeat(1_000)));
  const chunks = chunkEvents(events, 4_096).map(text);
  assert.equal(chunks.length, 6);
  for (const c of chunks) assert.ok(!c.includes(EVENT_SEPARATOR));
});

test('an event larger than the limit goes alone, and the ones around it are packed as usual', () => {
  const events = [event(1, 'a'), event(2, 'b'), event(3, 'z'.repeat(5_000)), event(4, 'c'), event(5, 'd')];
  const chunks = chunkEvents(events, 1_000).map(text);
  assert.equal(chunks.length, 3);
  assert.equal(chunks[0]?.split(EVENT_SEPARATOR).length, 2);
  assert.ok(!chunks[1]?.includes(EVENT_SEPARATOR));
  assert.equal(chunks[2]?.split(EVENT_SEPARATOR).length, 2);
});

test("the commit time of an announcement: its reply subject, an earlier version's header, nothing else", () => {
  const subjects = new Subjects('rs');
  const msg = (reply: string, header?: string): Msg =>
    ({
      reply,
      headers:
        header === undefined ? undefined : { get: (k: string) => (k === 'Rs-Committed-Ms' ? header : '') },
    }) as unknown as Msg;
  assert.equal(subjects.committedAt(1796284035162), 'rs.committed.1796284035162');
  assert.equal(
    committedAtMs(msg(subjects.committedAt(1796284035162)), subjects.committedAtPrefix),
    1796284035162,
  );
  assert.equal(committedAtMs(msg('', '1796284035163'), subjects.committedAtPrefix), 1796284035163);
  assert.equal(committedAtMs(msg('_INBOX.x.1'), subjects.committedAtPrefix), undefined);
  assert.equal(committedAtMs(msg('rs.committed.soon'), subjects.committedAtPrefix), undefined);
  assert.equal(committedAtMs(msg(''), subjects.committedAtPrefix), undefined);
});

test("payloads are eventJson's UTF-8 byte for byte, across buffer growth, and each one a copy of its own", () => {
  const texts = [
    '🤖 robot',
    '語'.repeat(30_000),
    'é\u0000\t"\\',
    'plain',
    '\ud83e',
    'x'.repeat(70_000),
    '💬'.repeat(9),
  ];
  const events = texts.map((t, i) => event(i + 1, t));
  const reference = (evs: readonly StoredEvent[], max: number): Buffer[] =>
    greedy(evs, max).map((s) => Buffer.from(s, 'utf8'));
  for (const max of [300, 100_000, 1_000_000]) {
    const chunks = chunkEvents(events, max);
    assert.deepEqual(
      chunks.map((c) => Buffer.from(c)),
      reference(events, max),
      `maxBytes ${max}`,
    );
  }
  // A later call reuses the buffer: what an earlier call returned does not change.
  const first = chunkEvents([event(1, 'first')], 1_000);
  const copy = Buffer.from(first[0] as Uint8Array);
  chunkEvents([event(2, 'second, longer than the first')], 1_000);
  assert.deepEqual(Buffer.from(first[0] as Uint8Array), copy);
});

test('fan-out reads each event of a payload from its bytes: the header fields, and the text byte for byte', () => {
  const events: StoredEvent[] = [
    event(1, '🤖 語 é'),
    { ...event(2, 'plain'), event_type: 'odd"type\\x', category: 'tool_io', user_id: 'user-7' },
    { ...event(31, '\u0000 "quoted"'), created_at_text: '2026-01-01T01:00:00+01:00', run_id: 'run-2' },
    { ...event(1_234_567, 'x'.repeat(5_000)), event_id: 'e_Z-9', run_id: 'R_9-x'.repeat(25) },
  ];
  const decoded = chunkEvents(events, 1_000_000).flatMap((c) => decodeEventPayload(Buffer.from(c), 't-1'));
  assert.equal(decoded.length, events.length);
  for (const [i, d] of decoded.entries()) {
    const e = events[i] as StoredEvent;
    assert.deepEqual(
      { seq: d.seq, run_id: d.run_id, category: d.category, event_type: d.event_type, user_id: d.user_id },
      { seq: e.seq, run_id: e.run_id, category: e.category, event_type: e.event_type, user_id: e.user_id },
    );
    assert.equal(d.json(), eventJson(e));
    assert.deepEqual(d.bytes, Buffer.from(eventJson(e), 'utf8'));
  }
});

test('a payload that is not events as the persister writes them is refused, not half read', () => {
  const good = Buffer.from(eventJson(event(5, 'ok')), 'utf8');
  const text = good.toString('utf8');
  const bad = [
    '{"seq":5}',
    '{"offset":5,"seq":5}',
    '{"seq":,"offset":5}',
    good.subarray(0, 60).toString('latin1'),
    `${text}\x1e{"seq":6`,
    text.replace('"event_type":"token"', '"event_type":"tok'),
    '',
    // Values ingest would not have let in: a filter or a frame must not see what the text does not say.
    text.replace('"thread_id":"t-1"', '"thread_id":"t-2"'),
    text.replace('"thread_id":"t-1"', '"thread_id":"t-1\\\\"'),
    text.replace('"run_id":"run-1"', '"run_id":""'),
    text.replace('"run_id":"run-1"', `"run_id":"${'r'.repeat(129)}"`),
    text.replace('"run_id":"run-1"', '"run_id":"run 1"'),
    text.replace('"user_id":""', '"user_id":"us\\u0065r"'),
    text.replace('"user_id":""', '"user_id":"usér"'),
    text.replace('"category":"message"', '"category":"messége"'),
    text.replace('"category":"message"', '"category":"Message"'),
    text.replace('"category":"message"', '"category":""'),
    text.replace('"event_type":"token"', '"event_type":"tok\\nen"'),
    text.replace('"event_type":"token"', '"event_type":"tok en"'),
    text.replace('"event_type":"token"', '"event_type":"tokén"'),
    text.replace('"event_type":"token"', '"event_type":""'),
    text.replace('"event_type":"token"', `"event_type":"${'t'.repeat(65)}"`),
    text.replace('"category":"message"', `"category":"${'c'.repeat(65)}"`),
  ];
  for (const t of bad) {
    assert.throws(
      () => decodeEventPayload(Buffer.from(t, 'utf8'), 't-1'),
      /committed event header unreadable/,
      t,
    );
  }
  assert.equal(decodeEventPayload(good, 't-1')[0]?.seq, 5);
  // The edges of what ingest lets in are read.
  const edge = {
    ...event(6, 'ok'),
    run_id: 'R'.repeat(128),
    user_id: 'u_-Z9',
    category: `a_9${'z'.repeat(61)}`,
    event_type: '~!"\\\\}',
  };
  const [e] = decodeEventPayload(Buffer.from(eventJson(edge), 'utf8'), 't-1');
  assert.deepEqual(
    { run_id: e?.run_id, user_id: e?.user_id, category: e?.category, event_type: e?.event_type },
    { run_id: edge.run_id, user_id: edge.user_id, category: edge.category, event_type: edge.event_type },
  );
});

test('an announcement that is not UTF-8 is refused whole: its bytes would go into text frames as they are', () => {
  const good = Buffer.from(eventJson(event(5, 'ok')), 'utf8');
  const at = good.indexOf('ok');
  const broken = Buffer.concat([good.subarray(0, at), Buffer.from([0xc3, 0x28]), good.subarray(at + 2)]);
  const msg = (data: Uint8Array) => ({ data }) as unknown as Msg;
  assert.equal(decodeEvents(msg(good), 't-1')[0]?.seq, 5);
  assert.throws(() => decodeEvents(msg(broken), 't-1'), /announcement is not UTF-8/);
  // A lone surrogate in a text is written by the persister (UTF-8 encoding) as U+FFFD: valid.
  const lone = Buffer.from(eventJson({ ...event(7, ''), content_json: '"a\ud800b"' }), 'utf8');
  assert.ok(lone.includes(Buffer.from([0xef, 0xbf, 0xbd])));
  assert.equal(decodeEvents(msg(lone), 't-1')[0]?.seq, 7);
});

test('an event kept past its delivery holds bytes of its own, once, not its announcement or a shared slab', () => {
  const events = Array.from({ length: 200 }, (_, i) => event(i + 1, 'x'.repeat(900)));
  const [payload] = chunkEvents(events, 1 << 20);
  const decoded = decodeEventPayload(Buffer.from(payload as Uint8Array), 't-1');
  const last = decoded[decoded.length - 1] as CommittedEvent;
  assert.ok(last.bytes.buffer.byteLength > 100 * last.bytes.length, 'a view of the whole announcement');
  const kept = last.owned();
  assert.equal(kept.bytes.buffer.byteLength, kept.bytes.length);
  assert.equal(kept.bytes.byteOffset, 0);
  assert.deepEqual(kept.bytes, last.bytes);
  assert.equal(kept.json(), last.json());
  assert.deepEqual(
    [kept.seq, kept.run_id, kept.category, kept.event_type, kept.user_id],
    [last.seq, last.run_id, last.category, last.event_type, last.user_id],
  );
  assert.equal(last.owned(), kept, 'one copy for every subscription that keeps it');
  assert.equal(kept.owned(), kept);
  // A small one copied from the socket lands in Node's shared pool: kept, it is copied out.
  const [small] = decodeEvents({ data: Buffer.from(eventJson(event(9, 'hi'))) } as unknown as Msg, 't-1');
  assert.ok(small && small.bytes.buffer.byteLength > small.bytes.length, 'pooled');
  assert.equal(small.owned().bytes.buffer.byteLength, small.bytes.length);
});
