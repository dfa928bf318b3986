// SSE: GET /v1/threads/{tid}/stream on the broker's own HTTP port. Catch-up then live,
// Last-Event-ID, keep-alives, filters, the end of a run, and errors before streaming.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Event } from '../src/client/ingest-client.js';
import { mixedBatch } from './helpers/events.js';
import { type SseBlock, SseClient } from './helpers/sse-client.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

const KEEPALIVE_MS = 40;
let stack: Stack;
before(async () => {
  stack = await startStack({ catchupPageSize: 5, sseKeepAliveMs: KEEPALIVE_MS });
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, k) => from + k);
const url = (t: string, query = '') => `${stack.httpUrl}/v1/threads/${t}/stream${query}`;
/** Stored events (blocks whose data is an event, not a control frame). */
const storedEvents = (c: SseClient) =>
  c.events.filter((b) => !('type' in (JSON.parse(b.data as string) as object)));
const seqsOf = (blocks: SseBlock[]) => blocks.map((b) => Number(b.id));
const iOf = (blocks: SseBlock[]) =>
  blocks.map((b) => (JSON.parse(b.data as string) as { content: { i: number } }).content.i);

test('a stream catches up from Postgres, marks live, then delivers live events, as the history has them', async () => {
  const t = randomName('t-');
  await stack.client.publish(mixedBatch(t, 1, 12), 'PERSISTED');
  const c = await SseClient.open(url(t));
  assert.equal(c.status, 200);
  assert.match(String(c.headers['content-type']), /^text\/event-stream/);
  assert.equal(c.headers['cache-control'], 'no-cache, no-transform');

  const live = await c.waitFor((b) => b.event === 'live');
  assert.equal(live.id, '12');
  assert.deepEqual(JSON.parse(live.data as string), { type: 'live', seq: 12 });
  // Keep-alive comments may come between events: only data blocks count.
  const catchUp = c.blocks.slice(0, c.blocks.indexOf(live)).filter((b) => b.data !== undefined);
  assert.deepEqual(seqsOf(catchUp), range(1, 12));

  await stack.client.publish(mixedBatch(t, 13, 3), 'ACCEPTED');
  await c.waitFor((b) => b.id === '15');
  const events = storedEvents(c);
  assert.deepEqual(seqsOf(events), range(1, 15));
  // id = seq, event = event_type, data = the event JSON, byte-identical to the history endpoint's.
  for (const b of events) {
    const e = JSON.parse(b.data as string) as { seq: number; event_type: string };
    assert.equal(b.event, e.event_type);
    assert.equal(Number(b.id), e.seq);
  }
  const history = await (await fetch(`${stack.httpUrl}/v1/threads/${t}/events?limit=100`)).text();
  assert.ok(history.startsWith(`{"events":[${events.map((b) => b.data).join(',')}],`), history);
  c.close();
});

test('Last-Event-ID resumes after that seq: exactly the rest, no duplicate, and it wins over the query cursor', async () => {
  const t = randomName('t-');
  await stack.client.publish(mixedBatch(t, 1, 60), 'PERSISTED');
  const first = await SseClient.open(url(t));
  await first.waitFor((b) => b.id === '6');
  first.close();
  await first.ended;
  const resumeAt = Number(first.lastEventId);
  const got1 = seqsOf(storedEvents(first)).filter((s) => s <= resumeAt);
  assert.deepEqual(got1, range(1, resumeAt));

  await stack.client.publish(mixedBatch(t, 61, 20), 'PERSISTED');
  // An EventSource reconnects with its original URL plus the header: the header is where it is.
  for (const query of ['', '?after_seq=2', '?live_only=true', '?from_offset=1']) {
    const again = await SseClient.open(url(t, query), { 'last-event-id': String(resumeAt) });
    await again.waitFor((b) => b.event === 'live');
    assert.deepEqual(seqsOf(storedEvents(again)), range(resumeAt + 1, 80), `query ${query}`);
    assert.deepEqual([...got1, ...seqsOf(storedEvents(again))], range(1, 80));
    again.close();
  }
});

test('keep-alive comments arrive on a quiet stream; a filtered one moves its id past what it skipped', async () => {
  const t = randomName('t-');
  const quiet = await SseClient.open(url(t));
  await quiet.waitFor((b) => b.event === 'live');
  await quiet.waitFor(() => quiet.blocks.filter((x) => x.comments.includes('keep-alive')).length >= 2);
  const keepAlives = quiet.blocks.filter((b) => b.comments.includes('keep-alive'));
  // A bare comment dispatches nothing and moves no id.
  for (const k of keepAlives)
    assert.deepEqual(k, { id: undefined, event: undefined, data: undefined, comments: ['keep-alive'] });
  quiet.close();

  await stack.client.publish(mixedBatch(t, 1, 3), 'PERSISTED');
  const filtered = await SseClient.open(url(t, '?event_types=no_such_type'));
  const live = await filtered.waitFor((b) => b.event === 'live');
  assert.equal(live.id, '3');
  await stack.client.publish(mixedBatch(t, 4, 5), 'PERSISTED');
  const moved = await filtered.waitFor((b) => b.id === '8');
  // An id with no data: the client's Last-Event-ID moves to 8 though it got no event.
  assert.deepEqual(moved, { id: '8', event: undefined, data: undefined, comments: ['keep-alive'] });
  assert.equal(storedEvents(filtered).length, 0);
  assert.equal(filtered.lastEventId, '8');
  filtered.close();
});

test('filters (run_id, categories, event_types) deliver exactly the matching events, and a filtered client resumes', async () => {
  const t = randomName('t-');
  const all = mixedBatch(t, 1, 40);
  await stack.client.publish(all, 'PERSISTED');
  const query = '?run_id=run-a&categories=message,trace&event_types=ai_chunk&event_types=llm_start';
  const pred = (e: Event) =>
    e.run_id === 'run-a' &&
    e.category !== 'LIFECYCLE' &&
    ['ai_chunk', 'llm_start'].includes(e.event_type as string);
  const want = (evs: Event[], after = 0) =>
    evs
      .filter(pred)
      .map((e) => (JSON.parse(e.content_json as string) as { i: number }).i)
      .filter((i) => i > after);

  const c = await SseClient.open(url(t, query));
  const live = await c.waitFor((b) => b.event === 'live');
  // The live id is the head even though the last events did not match: it covers skips.
  assert.equal(live.id, '40');
  assert.deepEqual(iOf(storedEvents(c)), want(all));
  const fifth = Number(storedEvents(c)[4]?.id);
  c.close();

  const more = mixedBatch(t, 41, 20);
  await stack.client.publish(more, 'PERSISTED');
  const fromFifth = await SseClient.open(url(t, query), { 'last-event-id': String(fifth) });
  await fromFifth.waitFor((b) => b.event === 'live');
  assert.deepEqual(iOf(storedEvents(fromFifth)), want([...all, ...more], fifth));
  fromFifth.close();

  // Resuming from the live id re-reads nothing it had skipped.
  const fromLive = await SseClient.open(url(t, query), { 'last-event-id': '40' });
  await fromLive.waitFor((b) => b.event === 'live');
  assert.deepEqual(iOf(storedEvents(fromLive)), want(more));
  fromLive.close();
});

test("a run stream ends after the run's terminal event, for live and late joiners; a reconnect after it gets 204", async () => {
  const t = randomName('t-');
  const run = (i: number, type: string, category: Event['category'], runId = 'run-x'): Event => ({
    thread_id: t,
    run_id: runId,
    event_id: `r${i}`,
    event_type: type,
    category,
    content_json: JSON.stringify({ i }),
  });
  await stack.client.publish([run(1, 'run_start', 'LIFECYCLE'), run(2, 'ai_chunk', 'MESSAGE')], 'PERSISTED');
  const c = await SseClient.open(url(t, '?run_id=run-x'));
  const messages = await SseClient.open(url(t, '?run_id=run-x&categories=message'));
  await c.waitFor((b) => b.event === 'live');
  await messages.waitFor((b) => b.event === 'live');
  await stack.client.publish(
    [
      run(3, 'ai_chunk', 'MESSAGE', 'run-y'),
      run(4, 'ai_chunk', 'MESSAGE'),
      run(5, 'end', 'LIFECYCLE'),
      run(6, 'ai_chunk', 'MESSAGE'),
    ],
    'PERSISTED',
  );
  await c.ended;
  assert.ok(c.res.complete, 'the server ended the response');
  const endFrame = {
    id: '5',
    event: 'end',
    data: '{"type":"end","run_id":"run-x","seq":5,"status":"success"}',
    comments: [],
  };
  assert.deepEqual(c.blocks.at(-1), endFrame);
  assert.deepEqual(
    storedEvents(c).map((b) => b.event),
    ['run_start', 'ai_chunk', 'ai_chunk', 'end'],
  );
  // The filter hides the terminal event itself, not the end of the run.
  await messages.ended;
  assert.deepEqual(messages.blocks.at(-1), endFrame);
  assert.deepEqual(seqsOf(storedEvents(messages)), [2, 4]);

  const late = await SseClient.open(url(t, '?run_id=run-x'));
  await late.ended;
  assert.deepEqual(seqsOf(storedEvents(late)), [1, 2, 4, 5]);
  assert.deepEqual(late.blocks.at(-1), endFrame);

  // An EventSource reconnects after the end with Last-Event-ID 5: 204 tells it to stop.
  const reconnect = await SseClient.open(url(t, '?run_id=run-x'), { 'last-event-id': '5' });
  assert.equal(reconnect.status, 204);
  // A fresh request whose cursor is already past the end is told at once, instead of waiting forever.
  const past = await SseClient.open(url(t, '?run_id=run-x&after_seq=5'));
  await past.ended;
  assert.equal(past.status, 200);
  assert.deepEqual(past.blocks, [endFrame]);
});

test('errors found before streaming are plain HTTP errors with the status of the error table', async () => {
  const t = randomName('t-');
  // One request per event, so each has an offset of its own.
  const acks = [];
  for (let i = 1; i <= 3; i++) acks.push(...(await stack.client.publish(mixedBatch(t, i, 1), 'PERSISTED')));
  const cases: [string, Record<string, string>, number, string, RegExp][] = [
    [url(t, '?after_seq=-1'), {}, 400, 'invalid_argument', /^after_seq/],
    [url(t, '?after_seq=x'), {}, 400, 'invalid_argument', /^after_seq/],
    [url(t, '?after_seq=1&from_offset=1'), {}, 400, 'invalid_argument', /^from_offset: cannot be combined/],
    [url(t, '?from_offset=0'), {}, 400, 'invalid_argument', /^from_offset/],
    [url(t, '?live_only=yes'), {}, 400, 'invalid_argument', /^live_only/],
    [url(t, '?categories=Chat'), {}, 400, 'invalid_argument', /^categories/],
    [url(t, '?categories='), {}, 400, 'invalid_argument', /^categories/],
    [url(t, '?event_types=a%20b'), {}, 400, 'invalid_argument', /^event_types/],
    [url(t, '?run_id=a.b'), {}, 400, 'invalid_argument', /^run_id/],
    [url(t), { 'last-event-id': 'abc' }, 400, 'invalid_argument', /^Last-Event-ID/],
    [url('a%20b'), {}, 400, 'invalid_argument', /^thread_id/],
    [url(t, '?after_seq=9'), {}, 416, 'cursor_ahead', /past the head .* \(seq 3\)/],
    [url(t), { 'last-event-id': '4' }, 416, 'cursor_ahead', /after_seq 4 is past the head/],
    [
      url(t, `?from_offset=${(acks[2]?.offset ?? 0) + 1000}`),
      {},
      416,
      'cursor_ahead',
      /past the end of the log/,
    ],
  ];
  for (const [u, headers, status, code, message] of cases) {
    const c = await SseClient.open(u, headers);
    await c.ended;
    assert.equal(c.status, status, `${u} ${JSON.stringify(headers)}: ${c.body}`);
    assert.match(String(c.headers['content-type']), /^application\/json/);
    const body = JSON.parse(c.body) as { error: { code: string; message: string } };
    assert.equal(body.error.code, code);
    assert.match(body.error.message, message);
  }
  // from_offset within the log replays from there.
  const fromOffset = await SseClient.open(url(t, `?from_offset=${acks[1]?.offset}`));
  await fromOffset.waitFor((b) => b.event === 'live');
  assert.deepEqual(seqsOf(storedEvents(fromOffset)), [2, 3]);
  fromOffset.close();
});

test('event JSON with line breaks (pretty-printed content) arrives as several data lines and parses back whole', async () => {
  const t = randomName('t-');
  const content = '{\n  "text": "two\\nlines",\r\n  "n": 1\n}';
  await stack.client.publish(
    [
      {
        thread_id: t,
        run_id: 'r',
        event_id: 'p1',
        event_type: 'note',
        category: 'MESSAGE',
        content_json: content,
      },
    ],
    'PERSISTED',
  );
  const c = await SseClient.open(url(t));
  const b = await c.waitFor((x) => x.id === '1');
  const e = JSON.parse(b.data as string) as { content: unknown };
  assert.deepEqual(e.content, { text: 'two\nlines', n: 1 });
  c.close();
});

test('deleting a run or the thread ends the streams on it with a deleted event', async () => {
  const t = randomName('t-');
  const run = (i: number, runId: string): Event => ({
    thread_id: t,
    run_id: runId,
    event_id: `d${i}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ i }),
  });
  await stack.client.publish([run(1, 'run-d'), run(2, 'run-k'), run(3, 'run-d')], 'PERSISTED');
  const runD = await SseClient.open(url(t, '?run_id=run-d'));
  const runK = await SseClient.open(url(t, '?run_id=run-k'));
  const join = await SseClient.open(`${stack.httpUrl}/threads/${t}/runs/run-d/stream`, {
    'last-event-id': '-1',
  });
  await runD.waitFor((b) => b.event === 'live');
  await runK.waitFor((b) => b.event === 'live');
  await join.waitFor((b) => b.id === '3' && b.data === undefined);

  const delRun = await fetch(`${stack.httpUrl}/v1/threads/${t}/runs/run-d`, { method: 'DELETE' });
  assert.equal(delRun.status, 200);
  await runD.ended;
  assert.deepEqual(runD.blocks.at(-1), {
    id: undefined,
    event: 'deleted',
    data: JSON.stringify({ type: 'deleted', thread_id: t, run_id: 'run-d', seq: 3 }),
    comments: [],
  });
  await join.ended;
  const last = join.blocks.at(-1);
  assert.equal(last?.event, 'error');
  assert.match(String(last?.data), /run run-d was deleted/);

  // A stream on another run goes on, until the thread itself goes.
  await stack.client.publish([run(4, 'run-k')], 'PERSISTED');
  await runK.waitFor((b) => b.id === '4' && b.event === 'ai_chunk');
  const delThread = await fetch(`${stack.httpUrl}/v1/threads/${t}`, { method: 'DELETE' });
  assert.equal(delThread.status, 200);
  await runK.ended;
  assert.equal(runK.blocks.at(-1)?.event, 'deleted');
  assert.deepEqual(JSON.parse(String(runK.blocks.at(-1)?.data)), { type: 'deleted', thread_id: t, seq: 4 });
});
