// Catch-up pages carry each event's client-facing JSON as Postgres writes it (readEventJsonPage);
// History and the rest build it in the broker (eventJson over readEventsPage). Clients must not
// be able to tell the two apart: these are held to the same bytes, over every printable ASCII
// character an event type may hold, the three known categories and open ones, created_at with
// and without the producer's own text, an empty user id, and content and metadata texts with
// whitespace, escapes and characters outside ASCII kept as the producer wrote them.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { eventJson, type LogRecord } from '../src/domain/event.js';
import { NO_FILTER } from '../src/domain/filter.js';
import { createLogger } from '../src/logger.js';
import { migrate } from '../src/persist/migrate.js';
import { type PageQuery, readEventJsonPage, readEventsPage } from '../src/persist/queries.js';
import { storeThreadBatch } from '../src/persist/seq-assigner.js';
import { type PostgresHandle, startPostgres } from './helpers/postgres.js';

const T = 'texts';

/** Every character an event type may hold (0x21-0x7e), in types of at most 64. */
const PRINTABLE = Array.from({ length: 0x7e - 0x21 + 1 }, (_, i) => String.fromCharCode(0x21 + i)).join('');
const EVENT_TYPES = [
  'ai_chunk',
  PRINTABLE.slice(0, 64),
  PRINTABLE.slice(64),
  '"',
  '\\',
  '\\"\\u0041/',
  '</script>',
];
const CATEGORIES = ['message', 'trace', 'lifecycle', 'tool_audit', 'x', 'a'.repeat(64)];
const CONTENTS = [
  '{"content":"hello"}',
  '{ "spaced" : [ 1 , 2.50 , -0 , 1e3 , 1E-7 ] ,\n\t"nested": {"a": {"b": [null, true, false]}} }',
  '"héllo wörld — 日本語 😀"',
  '"\\u00e9\\ud83d\\ude00 \\" \\\\ \\/ \\b\\f\\n\\r\\t \\u0000 \\u2028"',
  '12345678901234567890123456789',
  'null',
  '[]',
  `"${'x'.repeat(5000)}"`,
];
const METADATA = ['{}', '{"task_id":"t-1","tags":["a","b"]}', '{ "ü" : "\\u00fc" , "n" : 1.0 }'];
const TIME_TEXTS = [
  undefined,
  '2026-06-04T10:00:00.123456+00:00',
  '2026-06-04 10:00',
  '2026-06-04t10:00:00,5z',
];
const USERS = ['', 'u-1', 'user.with-dots_and_9'];

function record(i: number): LogRecord {
  const created = new Date(Date.UTC(2026, 5, 4, 10, 0, 0, i));
  const text = TIME_TEXTS[i % TIME_TEXTS.length];
  return {
    thread_id: T,
    run_id: `run-${i % 3}`,
    event_id: `e-${i}`,
    event_type: EVENT_TYPES[i % EVENT_TYPES.length] as string,
    category: CATEGORIES[i % CATEGORIES.length] as string,
    user_id: USERS[i % USERS.length] as string,
    created_at: created.toISOString(),
    ...(text === undefined ? {} : { created_at_text: text }),
    content_json: CONTENTS[i % CONTENTS.length] as string,
    metadata_json: METADATA[i % METADATA.length] as string,
  };
}

// Co-prime lengths: every pairing of type, category, time text, user, content and metadata occurs.
const N = 7 * 6 * 4 * 3 * 8;
let server: PostgresHandle;
let pool: pg.Pool;

before(async () => {
  server = await startPostgres();
  pool = new pg.Pool({ connectionString: server.url, max: 2 });
  pool.on('error', () => undefined);
  await migrate(pool, createLogger('silent'));
  const client = await pool.connect();
  try {
    const batch = Array.from({ length: N }, (_, i) => ({ record: record(i), offset: 1000 + i }));
    await storeThreadBatch(client, T, batch);
  } finally {
    client.release();
  }
});
after(async () => {
  await pool.end();
  await server[Symbol.asyncDispose]();
});

async function bothWays(q: PageQuery): Promise<number> {
  const stored = await readEventsPage(pool, q);
  const texts = await readEventJsonPage(pool, q);
  assert.equal(texts.truncated, stored.truncated);
  assert.equal(texts.bytes, stored.bytes);
  assert.deepEqual(
    texts.events.map((e) => e.seq),
    stored.events.map((e) => e.seq),
  );
  for (const [i, e] of stored.events.entries()) {
    const t = texts.events[i];
    assert.ok(t);
    assert.equal(t.json(), eventJson(e), `seq ${e.seq}: the same bytes`);
    assert.deepEqual(
      [t.run_id, t.category, t.event_type, t.user_id],
      [e.run_id, e.category, e.event_type, e.user_id],
    );
  }
  return stored.events.length;
}

test('every event reads as the same JSON text from Postgres as from the broker', async () => {
  const q = { threadId: T, afterSeq: 0, filter: NO_FILTER, limit: N };
  assert.equal(await bothWays(q), N);
  const { events } = await readEventJsonPage(pool, q);
  for (const [i, e] of events.entries()) {
    const r = record(i);
    const parsed = JSON.parse(e.json());
    assert.deepEqual(parsed, {
      seq: i + 1,
      offset: 1000 + i,
      thread_id: T,
      run_id: r.run_id,
      event_id: r.event_id,
      event_type: r.event_type,
      category: r.category,
      user_id: r.user_id,
      created_at: r.created_at_text ?? r.created_at,
      content: JSON.parse(r.content_json),
      metadata: JSON.parse(r.metadata_json),
    });
    // The producer's texts are kept, not re-serialised.
    assert.ok(e.json().includes(`"content":${r.content_json},"metadata":${r.metadata_json}}`));
  }
});

test('pages cut at a byte budget, filtered and newest first are the same events either way', async () => {
  const base = { threadId: T, afterSeq: 0, filter: NO_FILTER, limit: 100 };
  let seen = 0;
  for (let after = 0, n = 1; n > 0; after += n) {
    n = await bothWays({ ...base, afterSeq: after, maxBytes: 20_000 });
    seen += n;
  }
  assert.equal(seen, N);
  assert.ok(
    (await bothWays({
      ...base,
      filter: { ...NO_FILTER, categories: new Set(['trace', 'tool_audit']), runId: 'run-1' },
    })) > 0,
  );
  assert.equal(await bothWays({ ...base, afterSeq: 0, uptoSeq: N, descending: true, limit: 50 }), 50);
});

test('a catch-up page statement is prepared once per connection and serves every page of its shape', async () => {
  // Two different page sizes, one text: the second read on the same client reuses the statement.
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  const prepared = async () =>
    (await client.query("SELECT 1 FROM pg_prepared_statements WHERE name LIKE 'rs\\_page\\_%'")).rowCount;
  try {
    // History's pages, one a request in many shapes, are planned each time: nothing kept.
    await readEventsPage(client, { threadId: T, afterSeq: 0, filter: NO_FILTER, limit: 10 });
    assert.equal(await prepared(), 0);
    await readEventJsonPage(client, { threadId: T, afterSeq: 0, filter: NO_FILTER, limit: 10 });
    await readEventJsonPage(client, { threadId: T, afterSeq: 10, filter: NO_FILTER, limit: 20 });
    const { rows } = await client.query<{ name: string }>(
      "SELECT name FROM pg_prepared_statements WHERE name LIKE 'rs\\_page\\_%'",
    );
    assert.equal(rows.length, 1, 'one named statement for one shape');
  } finally {
    await client.end();
  }
});
