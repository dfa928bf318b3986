// A request's events for one thread and run travel as one log message (src/log/log-batch.ts):
// grouping keeps every run's order, chunks respect max_payload, the message id names the
// content, and messages written before batching (one record each) are still stored.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { Event } from '../src/client/ingest-client.js';
import type { LogRecord } from '../src/domain/event.js';
import {
  decodeLogMessage,
  encodeLogMessages,
  entryOf,
  type LogMessage,
  mergedMsgId,
  mergeLogBodies,
  readLogMessage,
} from '../src/log/log-batch.js';
import { Subjects } from '../src/log/subjects.js';
import { logRecord } from './helpers/records.js';
import { expectGapFree, logMessageCount, randomName, startStack, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

function ev(thread: string, run: string, eventId: string): Event {
  return {
    thread_id: thread,
    run_id: run,
    event_id: eventId,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ content: eventId }),
  };
}

test('records go out one message per thread and run, a thread cut where its run changes', () => {
  const rs = [
    logRecord('t1', 'r1', 'a'),
    logRecord('t2', 'r1', 'b'),
    logRecord('t1', 'r2', 'c'),
    logRecord('t1', 'r1', 'd'),
    logRecord('t2', 'r1', 'e'),
  ];
  const ms = encodeLogMessages(rs, 1 << 20);
  assert.deepEqual(
    ms.map((m) => [m.threadId, m.runId, m.indexes]),
    [
      ['t1', 'r1', [0]],
      ['t2', 'r1', [1, 4]],
      ['t1', 'r2', [2]],
      ['t1', 'r1', [3]],
    ],
  );
  for (const m of ms) {
    assert.deepEqual(
      decodeLogMessage(m.body),
      m.indexes.map((i) => rs[i]),
    );
  }
});

test('a group larger than max_payload is split into messages that each fit, in order', () => {
  const rs = Array.from({ length: 50 }, (_, i) =>
    logRecord('t', 'r', `e${i}`, JSON.stringify('文'.repeat(40))),
  );
  const one = Buffer.byteLength((encodeLogMessages([rs[0] as LogRecord], 1 << 20)[0] as LogMessage).body);
  const max = one * 7;
  const ms = encodeLogMessages(rs, max);
  assert.ok(ms.length >= 8, `${ms.length} messages`);
  for (const m of ms) assert.ok(Buffer.byteLength(m.body, 'utf8') <= max, `${m.body.length} > ${max}`);
  assert.deepEqual(
    ms.flatMap((m) => m.indexes),
    rs.map((_, i) => i),
  );
  // A record that alone exceeds the limit cannot travel: refused, naming the event.
  assert.throws(
    () =>
      encodeLogMessages(
        [logRecord('t', 'r', 'a'), logRecord('t', 'r', 'big', JSON.stringify('y'.repeat(500)))],
        300,
      ),
    /^InvalidArgumentError: events\[1\]: takes \d+ bytes in the log, which holds at most 300/,
  );
});

test('payloads travel as the producer wrote them: no escaping, any characters, exact lengths', () => {
  const payloads = ['"\\\\\\"', '{"a" :\n [1,\t"x"]}', '"\u2028中文😀"', '"\\"\\u0041"'];
  const rs = payloads.map((p, i) => ({ ...logRecord('t', 'r', `p${i}`, p), metadata_json: `{"m":${i}}` }));
  const [m] = encodeLogMessages(rs, 1 << 20);
  assert.ok(m);
  assert.ok(
    m.body.endsWith(payloads.map((p, i) => `${p}{"m":${i}}`).join('')),
    'raw payloads after the header',
  );
  assert.deepEqual(decodeLogMessage(m.body), rs);
  // A header whose lengths do not add up is refused, not read past.
  const [head, rest] = [m.body.slice(0, m.body.indexOf('\n')), m.body.slice(m.body.indexOf('\n') + 1)];
  assert.throws(() => decodeLogMessage(`${head}\n${rest}x`), /bytes past its last record/);
  assert.throws(() => decodeLogMessage(`${head}\n${rest.slice(1)}`), /bad metadata_length/);
});

test("a record's entry is the text JSON.stringify makes of it: escaped type and time text, lengths in UTF-16 units", () => {
  const base = logRecord('t1', 'r1', 'e-1');
  const records: LogRecord[] = [
    base,
    { ...base, event_type: 'odd"type\\x/</', category: 'tool_io', user_id: 'u-1' },
    {
      ...base,
      created_at_text: '2026-01-01T01:00:00.5+01:00',
      content_json: '"日本語 😀"',
      metadata_json: '{"a":"é"}',
    },
  ];
  for (const r of records) {
    const reference = JSON.stringify({
      event_id: r.event_id,
      event_type: r.event_type,
      category: r.category,
      user_id: r.user_id,
      created_at: r.created_at,
      created_at_text: r.created_at_text,
      content_length: r.content_json.length,
      metadata_length: r.metadata_json.length,
    });
    assert.equal(entryOf(r), reference);
  }
});

test('the message id names the content: a repeat matches, any other set of events does not', () => {
  const idOf = (ids: string[]) =>
    (
      encodeLogMessages(
        ids.map((i) => logRecord('t', 'r', i)),
        1 << 20,
      )[0] ?? assert.fail()
    ).msgId;
  assert.equal(idOf(['a']), 't:r:a', 'a single event: its thread:run:event_id');
  assert.equal(idOf(['a', 'b', 'c']), idOf(['a', 'b', 'c']));
  assert.notEqual(idOf(['a', 'b', 'c']), idOf(['a', 'x', 'c']), 'same first, last and count, other middle');
  assert.notEqual(idOf(['a', 'b']), idOf(['a', 'b', 'c']));
});

test('merged messages of one thread and run read as their records encoded together, receipts if any asked', () => {
  const tricky = '{"s":"\\"events\\":[ ]}\\n \u00e9 \ud83d\ude00",\n"n":[1,{"events":[]}]}';
  const a = [logRecord('t', 'r', 'a1'), logRecord('t', 'r', 'a2', tricky)];
  const b = [logRecord('t', 'r', 'b1', tricky)];
  const c = [logRecord('t', 'r', 'c1'), logRecord('t', 'r', 'c2'), logRecord('t', 'r', 'c3')];
  const body = (rs: LogRecord[], receipts: boolean) =>
    (encodeLogMessages(rs, 1 << 20, { receipts })[0] as LogMessage).body;
  const all = [...a, ...b, ...c];
  for (const [wants, expected] of [
    [[false, false, false], false],
    [[false, true, false], true],
    [[true, true, true], true],
  ] as const) {
    const merged = mergeLogBodies([body(a, wants[0]), body(b, wants[1]), body(c, wants[2])]);
    assert.equal(merged, body(all, expected), `receipts ${wants.join(',')}`);
    const read = readLogMessage(merged);
    assert.deepEqual(read.records, all);
    assert.equal(read.receipts, expected);
  }
  const ids = ['t:a1+2:x', 't:b1', 't:c1+3:y'];
  assert.equal(mergedMsgId(ids), mergedMsgId([...ids]), 'the same merge, the same id');
  assert.notEqual(mergedMsgId(ids), mergedMsgId(ids.slice(0, 2)));
  assert.notEqual(mergedMsgId(ids), mergedMsgId(['t:a1+2:x', 't:c1+3:y', 't:b1']));
  assert.ok(mergedMsgId(ids).startsWith('t:a1+2:x&3:'));
  // The id names the content the same way across versions (a retry during a rolling upgrade is
  // still a duplicate; the run was added to it once, and across that upgrade Postgres drops the
  // repeat): SHA-256 of the ids, a line each, base64url, 22 characters.
  const lines = createHash('sha256');
  for (const id of ids) lines.update(`${id}\n`);
  assert.equal(mergedMsgId(ids), `t:a1+2:x&3:${lines.digest('base64url').slice(0, 22)}`);
  const records = [logRecord('t', 'r', 'e1'), logRecord('t', 'r', 'e2'), logRecord('t', 'r', 'e3')];
  const eventLines = createHash('sha256');
  for (const r of records) eventLines.update(`${r.event_id}\n`);
  assert.equal(
    encodeLogMessages(records, 1 << 20)[0]?.msgId,
    `t:r:e1+3:${eventLines.digest('base64url').slice(0, 22)}`,
  );
});

test('a log message that is not ingest-shaped is refused naming the field', () => {
  assert.throws(() => decodeLogMessage('[]'), /no records/);
  assert.throws(
    () => decodeLogMessage(JSON.stringify([{ ...logRecord('t', 'r', 'a'), category: 'X y' }])),
    /category/,
  );
  assert.throws(() => decodeLogMessage('[1]'), /not an object/);
  // The first record has no record before it to share a field with: each field is checked.
  const bare = { event_id: 'a', content_json: '1', metadata_json: '{}' };
  assert.throws(() => decodeLogMessage(JSON.stringify(bare)), /bad thread_id/);
  assert.throws(
    () => decodeLogMessage(JSON.stringify([{ ...logRecord('t', 'r', 'a'), created_at: undefined }])),
    /bad created_at/,
  );
  assert.deepEqual(decodeLogMessage(JSON.stringify(logRecord('t', 'r', 'a'))), [logRecord('t', 'r', 'a')]);
});

test("a record's field equal to the one before it passed there; a field that differs is checked again", () => {
  // The reader checks a field only where it differs from the previous record's (same message).
  const records = [logRecord('t', 'r', 'a'), logRecord('t', 'r', 'b'), logRecord('t', 'r', 'c')];
  const body = (encodeLogMessages(records, 1 << 20)[0] as LogMessage).body;
  const newline = body.indexOf('\n');
  const header = JSON.parse(body.slice(0, newline)) as { events: Record<string, unknown>[] };
  assert.deepEqual(decodeLogMessage(body), records);
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ event_type: 'a b' }, /bad event_type/],
    [{ category: 'X y' }, /bad category/],
    [{ user_id: 'u/1' }, /bad user_id/],
    [{ created_at: 'not a time' }, /bad created_at/],
    [{ created_at_text: 'nope' }, /bad created_at_text/],
    [{ event_id: 'a' }, /./], // a repeated event_id is valid: the store drops it
  ];
  for (const [change, refusal] of cases) {
    const events = header.events.map((e, i) => (i === 2 ? { ...e, ...change } : e));
    const text = `${JSON.stringify({ ...header, events })}${body.slice(newline)}`;
    if (change.event_id !== undefined) {
      assert.equal(decodeLogMessage(text)[2]?.event_id, 'a');
      continue;
    }
    assert.throws(() => decodeLogMessage(text), refusal, JSON.stringify(change));
    // The same record alone, in the format written before batching, is refused the same way.
    const legacy = JSON.stringify([records[0], records[1], { ...records[2], ...change }]);
    assert.throws(() => decodeLogMessage(legacy), refusal, `legacy ${JSON.stringify(change)}`);
  }
});

test('one request becomes one log message per thread and run; its events share the offset', async () => {
  await using stack = await startStack();
  const [t1, t2] = [randomName('t-'), randomName('t-')];
  const nc = await connect({ servers: stack.servers.nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const before = await logMessageCount(jsm, stack.config);
    const events = [
      ...Array.from({ length: 50 }, (_, i) => ev(t1, 'r1', `a${i}`)),
      ...Array.from({ length: 30 }, (_, i) => ev(t1, 'r2', `b${i}`)),
      ...Array.from({ length: 20 }, (_, i) => ev(t2, 'r1', `c${i}`)),
    ];
    const acks = await stack.client.publish(events, 'PERSISTED');
    assert.equal((await logMessageCount(jsm, stack.config)) - before, 3);
    const offsets = [acks[0]?.offset, acks[50]?.offset, acks[80]?.offset];
    // t1's two runs are two messages of its partition's stream (t2's may be in another stream).
    assert.notEqual(offsets[0], offsets[1]);
    acks.forEach((a, i) => {
      assert.equal(a.offset, offsets[i < 50 ? 0 : i < 80 ? 1 : 2], `ack ${i}`);
      assert.equal(a.duplicate, false);
    });
    const rows = await threadRows(stack.db, t1);
    assert.equal(expectGapFree(rows.map((r) => r.seq)), 80);
    assert.deepEqual(
      rows.map((r) => r.event_id),
      events.slice(0, 80).map((e) => e.event_id),
    );
    assert.deepEqual(
      acks.slice(0, 80).map((a) => a.seq),
      rows.map((r) => r.seq),
    );

    // The identical request again: JetStream drops every message; nothing new is stored.
    const again = await stack.client.publish(events, 'ACCEPTED');
    assert.ok(again.every((a) => a.duplicate));
    assert.equal((await logMessageCount(jsm, stack.config)) - before, 3);
    // Regrouped (a subset plus a new event): a new message, whose repeats Postgres drops.
    const regrouped = await stack.client.publish([...events.slice(10, 20), ev(t1, 'r1', 'new')], 'PERSISTED');
    assert.deepEqual(
      regrouped.map((a) => [a.seq, a.duplicate]),
      [...rows.slice(10, 20).map((r) => [r.seq, true]), [81, false]],
    );
  } finally {
    await nc.close();
  }
});

test('a single-record log message, as written before batching, is still stored', async () => {
  await using stack = await startStack();
  const t = randomName('t-');
  const nc = await connect({ servers: stack.servers.nats.url });
  try {
    const subjects = new Subjects(stack.config.subjectPrefix);
    const js = jetstream(nc);
    await js.publish(subjects.log(t, 'r'), JSON.stringify(logRecord(t, 'r', 'old-1')), {
      msgID: `${t}:old-1`,
    });
    await stack.client.publish([ev(t, 'r', 'new-1'), ev(t, 'r', 'new-2')], 'PERSISTED');
    await waitFor(async () => (await threadRows(stack.db, t)).length === 3, { what: '3 rows' });
    assert.deepEqual(
      (await threadRows(stack.db, t)).map((r) => [r.seq, r.event_id]),
      [
        [1, 'old-1'],
        [2, 'new-1'],
        [3, 'new-2'],
      ],
    );
  } finally {
    await nc.close();
  }
});
