// Subscription options: filters that never change the meaning of a cursor, from_offset
// (the JetStream hot tier), live-only, and the end of a run.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { Event } from '../src/client/ingest-client.js';
import type { WireEvent } from '../src/client/ws-subscriber.js';
import { mixedBatch } from './helpers/events.js';
import { randomName, type Stack, startStack, threadStream } from './helpers/stack.js';

let stack: Stack;
before(async () => {
  stack = await startStack({ catchupPageSize: 5 });
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

const want = (evs: Event[], pred: (e: Event) => boolean) =>
  evs.filter(pred).map((e) => (JSON.parse(e.content_json as string) as { i: number }).i);
const got = (evs: WireEvent[]) => evs.map((e) => (e.content as { i: number }).i);

test('a filtered subscriber gets exactly the matching events, and resumes mid-stream without loss or repeat', async () => {
  const t = randomName('t-');
  const all = mixedBatch(t, 1, 60);
  await stack.client.publish(all.slice(0, 40), 'PERSISTED');
  const filter = {
    run_id: 'run-a',
    categories: ['message', 'trace'],
    event_types: ['ai_chunk', 'llm_start'],
  };
  const pred = (e: Event) =>
    e.run_id === 'run-a' &&
    e.category !== 'LIFECYCLE' &&
    ['ai_chunk', 'llm_start'].includes(e.event_type as string);

  const c1 = await stack.ws();
  c1.sendRaw({ type: 'subscribe', id: 'f', thread_id: t, ...filter });
  const live = await c1.waitFor((f) => f.type === 'live');
  // The live seq is the head even though the last events did not match: the cursor covers skips.
  assert.deepEqual(live, { type: 'live', id: 'f', seq: 40 });
  assert.deepEqual(got(c1.events('f')), want(all.slice(0, 40), pred));

  // Drop the connection after the 5th delivered event and resume from it with the same filter.
  const resumeAt = (c1.events('f')[4] as WireEvent).seq;
  await c1.close();
  await stack.client.publish(all.slice(40), 'PERSISTED');
  const c2 = await stack.ws();
  c2.sendRaw({ type: 'subscribe', id: 'f', thread_id: t, after_seq: resumeAt, ...filter });
  await c2.waitFor((f) => f.type === 'live');
  assert.deepEqual(
    got(c2.events('f')),
    want(all, pred).filter((i) => i > resumeAt),
  );

  // Live events are filtered the same way.
  const more = mixedBatch(t, 61, 30);
  await stack.client.publish(more, 'PERSISTED');
  const unfiltered = await stack.ws();
  unfiltered.subscribe('u', t, 60);
  await unfiltered.waitFor((f) => f.type === 'event' && f.event.seq === 90);
  const lastMatch = Math.max(...want(more, pred));
  await c2.waitFor((f) => f.type === 'event' && (f.event.content as { i: number }).i === lastMatch);
  assert.deepEqual(
    got(c2.events('f')),
    want([...all, ...more], pred).filter((i) => i > resumeAt),
  );
});

test('bad filters are refused naming the field', async () => {
  const c = await stack.ws();
  for (const [extra, field] of [
    [{ run_id: 'a b' }, 'run_id'],
    [{ categories: ['Chat'] }, 'categories'],
    [{ categories: [] }, 'categories'],
    [{ event_types: 'ai_chunk' }, 'event_types'],
    [{ after_seq: 1, from_offset: 1 }, 'from_offset'],
    [{ from_offset: 0 }, 'from_offset'],
    [{ live_only: 'yes' }, 'live_only'],
  ] as const) {
    const n = c.frames.length;
    c.sendRaw({ type: 'subscribe', id: `x-${field}`, thread_id: 't', ...extra });
    const f = await c.waitFor((fr) => c.frames.indexOf(fr) >= n);
    assert.equal(f.type, 'error', JSON.stringify(f));
    if (f.type === 'error') assert.match(f.message, new RegExp(`^${field}`));
  }
});

test('live_only starts at the head: no history, then new events', async () => {
  const t = randomName('t-');
  await stack.client.publish(mixedBatch(t, 1, 12), 'PERSISTED');
  const c = await stack.ws();
  c.sendRaw({ type: 'subscribe', id: 'l', thread_id: t, live_only: true });
  assert.deepEqual(await c.waitFor((f) => f.type === 'live'), { type: 'live', id: 'l', seq: 12 });
  await stack.client.publish(mixedBatch(t, 13, 3), 'ACCEPTED');
  await c.waitFor((f) => f.type === 'event' && f.event.seq === 15);
  assert.deepEqual(
    c.events('l').map((e) => e.seq),
    [13, 14, 15],
  );
});

test('from_offset replays from a JetStream offset; past retention it says to use after_seq', async () => {
  const t = randomName('t-');
  const other = randomName('t-');
  const acks = await stack.client.publish(
    [...mixedBatch(t, 1, 5), ...mixedBatch(other, 1, 3), ...mixedBatch(t, 6, 5)],
    'PERSISTED',
  );
  const offsetOf = (i: number) => (acks[i] as { offset: number }).offset;

  const c = await stack.ws();
  c.sendRaw({ type: 'subscribe', id: 'o', thread_id: t, from_offset: offsetOf(3) });
  assert.deepEqual(await c.waitFor((f) => f.type === 'live' && f.id === 'o'), {
    type: 'live',
    id: 'o',
    seq: 10,
  });
  assert.deepEqual(
    c.events('o').map((e) => e.seq),
    [4, 5, 6, 7, 8, 9, 10],
  );
  // An offset that falls on another thread's events starts at this thread's next one.
  c.sendRaw({ type: 'subscribe', id: 'p', thread_id: t, from_offset: offsetOf(6) });
  await c.waitFor((f) => f.type === 'live' && f.id === 'p');
  assert.deepEqual(
    c.events('p').map((e) => e.seq),
    [6, 7, 8, 9, 10],
  );
  c.sendRaw({ type: 'subscribe', id: 'q', thread_id: t, from_offset: offsetOf(12) + 1000 });
  const ahead = await c.waitFor((f) => f.type === 'error' && f.id === 'q');
  assert.equal(ahead.type === 'error' && ahead.code, 'cursor_ahead');

  // Retention moves the log's start past the offset: the hot tier cannot serve it.
  const nc = await connect({ servers: stack.servers.nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.purge(threadStream(stack.config, t), { seq: offsetOf(5) });
  } finally {
    await nc.close();
  }
  c.sendRaw({ type: 'subscribe', id: 'r', thread_id: t, from_offset: offsetOf(0) });
  const expired = await c.waitFor((f) => f.type === 'error' && f.id === 'r');
  assert.equal(expired.type === 'error' && expired.code, 'offset_expired');
  assert.match(expired.type === 'error' ? expired.message : '', /after_seq/);
});

test("a run subscription ends after the run's terminal event, for live and late joiners alike", async () => {
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

  const c = await stack.ws();
  c.sendRaw({ type: 'subscribe', id: 'live', thread_id: t, run_id: 'run-x' });
  c.sendRaw({ type: 'subscribe', id: 'msgs', thread_id: t, run_id: 'run-x', categories: ['message'] });
  await c.waitFor((f) => f.type === 'live' && f.id === 'msgs');
  await stack.client.publish(
    [
      run(3, 'ai_chunk', 'MESSAGE', 'run-y'),
      run(4, 'ai_chunk', 'MESSAGE'),
      run(5, 'end', 'LIFECYCLE'),
      run(6, 'ai_chunk', 'MESSAGE'),
    ],
    'PERSISTED',
  );
  assert.deepEqual(await c.waitFor((f) => f.type === 'end' && f.id === 'live'), {
    type: 'end',
    id: 'live',
    run_id: 'run-x',
    seq: 5,
    status: 'success',
  });
  assert.deepEqual(
    c.events('live').map((e) => e.event_type),
    ['run_start', 'ai_chunk', 'ai_chunk', 'end'],
  );
  // The filter hides the terminal event itself, but not the end of the run.
  await c.waitFor((f) => f.type === 'end' && f.id === 'msgs');
  assert.deepEqual(
    c.events('msgs').map((e) => e.seq),
    [2, 4],
  );

  const late = await stack.ws();
  late.sendRaw({ type: 'subscribe', id: 'late', thread_id: t, run_id: 'run-x' });
  await late.waitFor((f) => f.type === 'end');
  assert.deepEqual(
    late.events('late').map((e) => e.seq),
    [1, 2, 4, 5],
  );
  assert.equal(late.frames.filter((f) => f.type === 'live').length, 0, 'an ended run never goes live');

  // Resuming at or past the terminal event ends at once instead of waiting forever.
  for (const after of [5, 6]) {
    const id = `resume-${after}`;
    late.sendRaw({ type: 'subscribe', id, thread_id: t, run_id: 'run-x', after_seq: after });
    assert.deepEqual(await late.waitFor((f) => f.type === 'end' && f.id === id, 10_000), {
      type: 'end',
      id,
      run_id: 'run-x',
      seq: 5,
      status: 'success',
    });
  }
});
