// The documented limits, with the broker's defaults: an event whose content_json and
// metadata_json are each at RS_MAX_CONTENT_BYTES is stored and read back byte for byte,
// whatever escaping its text would need; what Postgres could not store is refused at
// ingest naming the field, never accepted and left to fail in the persister.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import type { Event } from '../src/client/ingest-client.js';
import { DEFAULT_MAX_CONTENT_BYTES } from '../src/config.js';
import { randomName, type Stack, startStack, threadRows } from './helpers/stack.js';

let stack: Stack;
before(async () => {
  stack = await startStack();
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

function event(t: string, id: string, content: string, metadata = '{}'): Event {
  return {
    thread_id: t,
    run_id: 'r',
    event_id: id,
    event_type: 'tool_result',
    category: 'MESSAGE',
    content_json: content,
    metadata_json: metadata,
  };
}

/** A JSON text of exactly `bytes` bytes: `prefix`, backslash pairs, `suffix`. */
function backslashes(prefix: string, suffix: string, bytes: number): string {
  const pairs = (bytes - prefix.length - suffix.length) / 2;
  assert.ok(Number.isInteger(pairs));
  return `${prefix}${'\\\\'.repeat(pairs)}${suffix}`;
}

test('content_json and metadata_json at the size limit, all backslashes, are stored and read back intact', async () => {
  const t = randomName('t-');
  const content = backslashes('"', '"', DEFAULT_MAX_CONTENT_BYTES);
  const metadata = backslashes('{"a":"', '"}', DEFAULT_MAX_CONTENT_BYTES);
  assert.equal(Buffer.byteLength(content), 262_144);
  const quotes = `[${'"\\"",'.repeat(40_000)}1]`; // quotes that JSON string escaping would double
  const [big, quoted] = await Promise.all([
    stack.client.publish([event(t, 'big', content, metadata)], 'PERSISTED'),
    stack.client.publish([event(t, 'quoted', quotes)], 'PERSISTED'),
  ]);
  assert.ok((big[0]?.seq ?? 0) > 0 && (quoted[0]?.seq ?? 0) > 0);
  const { rows } = await stack.db.query<{ event_id: string; content: string; metadata: string }>(
    'SELECT event_id, content::text AS content, metadata::text AS metadata FROM run_events WHERE thread_id = $1',
    [t],
  );
  const byId = new Map(rows.map((r) => [r.event_id, r]));
  assert.equal(byId.get('big')?.content, content);
  assert.equal(byId.get('big')?.metadata, metadata);
  assert.equal(byId.get('quoted')?.content, quotes);
  // History serves the producer's text as the event's JSON.
  const res = await fetch(`${stack.httpUrl}/v1/threads/${t}/events`);
  const body = (await res.json()) as { events: { event_id: string; content: unknown }[] };
  assert.equal(body.events.find((e) => e.event_id === 'big')?.content, JSON.parse(content));
});

test('one byte over the limit is refused naming the field', async () => {
  const t = randomName('t-');
  const over = backslashes('"', 'x"', DEFAULT_MAX_CONTENT_BYTES + 1);
  await assert.rejects(
    stack.client.publish([event(t, 'e', over)], 'ACCEPTED'),
    (err: { code: number; details: string }) => {
      assert.equal(err.code, status.INVALID_ARGUMENT);
      assert.match(err.details, /^events\[0\]\.content_json: is 262145 bytes; the limit is 262144/);
      return true;
    },
  );
});

test('nesting Postgres cannot store is refused at ingest, with and without escapes; nothing is stored', async () => {
  const t = randomName('t-');
  const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
  const deepEscaped = `${'['.repeat(100_000)}"\\u00e9"${']'.repeat(100_000)}`;
  const deepMetadata = `${'{"a":'.repeat(40_000)}1${'}'.repeat(40_000)}`;
  const cases: [Event, string][] = [
    [event(t, 'a', deep), 'events[0].content_json: nests deeper than 512 levels'],
    [event(t, 'b', deepEscaped), 'events[0].content_json: nests deeper than 512 levels'],
    [event(t, 'c', '{}', deepMetadata), 'events[0].metadata_json: nests deeper than 512 levels'],
  ];
  for (const [e, message] of cases) {
    for (const ack of ['ACCEPTED', 'PERSISTED'] as const) {
      await assert.rejects(stack.client.publish([e], ack), (err: { code: number; details: string }) => {
        assert.equal(err.code, status.INVALID_ARGUMENT, err.details);
        assert.ok(err.details.startsWith(message), err.details);
        return true;
      });
    }
  }
  // Escaped surrogate pairs and deep-but-allowed nesting are fine.
  const ok = `${'['.repeat(500)}"\\ud83d\\ude00"${']'.repeat(500)}`;
  const [ack] = await stack.client.publish([event(t, 'ok', ok)], 'PERSISTED');
  assert.equal(ack?.seq, 1);
  assert.deepEqual(
    (await threadRows(stack.db, t)).map((r) => r.event_id),
    ['ok'],
  );
  // The persister goes on: the next event is stored too.
  const [next] = await stack.client.publish([event(t, 'next', '1')], 'PERSISTED');
  assert.equal(next?.seq, 2);
});
