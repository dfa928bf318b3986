// gRPC Subscriber.Subscribe: the WebSocket subscription for backend consumers — same
// cursors, filters, live marker, run end, errors as gRPC statuses, backpressure and
// client cancellation.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { startBroker } from '../src/broker.js';
import type { Event } from '../src/client/ingest-client.js';
import { type GrpcEvent, type SubscribeRequest, SubscriberClient } from '../src/client/subscriber-client.js';
import type { WireEvent } from '../src/client/ws-subscriber.js';
import { eventProtoFromJson } from '../src/fanout/grpc/event.js';
import { createLogger } from '../src/logger.js';
import { brokerConfig, randomName, type Stack, startStack, threadStream } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

let stack: Stack;
let client: SubscriberClient;
before(async () => {
  // Small pages: catch-up crosses page seams; the smallest gRPC send queue, to cut off a slow reader.
  stack = await startStack({ catchupPageSize: 7, grpcSubscribeMaxBufferedBytes: 64 * 1024 });
  client = new SubscriberClient(stack.grpcTarget);
});
after(async () => {
  client.close();
  await stack[Symbol.asyncDispose]();
});

function events(
  t: string,
  from: number,
  count: number,
  runId = 'run-1',
  extra: Partial<Event> = {},
): Event[] {
  return Array.from({ length: count }, (_, k) => ({
    thread_id: t,
    run_id: runId,
    event_id: `e${from + k}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ n: from + k }),
    ...extra,
  }));
}
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);
const seqs = (evs: GrpcEvent[]) => evs.map((e) => e.seq);
const sub = (req: SubscribeRequest) => client.subscribe(req);

test('after_seq: exactly k+1..N from Postgres, a live marker at N, then live events; every field of the event', async () => {
  const t = randomName('t-');
  // Content with whitespace, escapes and a "metadata" key of its own must come back as the producer's text.
  const tricky = '{"text": "a,\\"metadata\\":{}}", "list": [1, 2.50, {"x": null}]}';
  await stack.client.publish(
    [
      ...events(t, 1, 20),
      {
        ...(events(t, 21, 1)[0] as Event),
        content_json: tricky,
        metadata_json: '{"id": "msg-1"}',
        user_id: 'u-1',
        created_at: { seconds: 1_700_000_000, nanos: 123_000_000 },
        category: 'TRACE',
        event_type: 'tool_call',
      },
      ...events(t, 22, 9),
    ],
    'PERSISTED',
  );
  const s = sub({ thread_id: t, after_seq: 12 });
  const live = await s.waitFor((r) => r.live != null);
  assert.equal(live.live?.seq, 30);
  assert.deepEqual(seqs(s.events), range(13, 30));
  // The live marker sits exactly between catch-up and live events.
  assert.equal(
    s.responses.findIndex((r) => r.live != null),
    18,
  );

  await stack.client.publish(events(t, 31, 5), 'ACCEPTED');
  await s.waitFor((r) => r.event?.seq === 35);
  assert.deepEqual(seqs(s.events), range(13, 35));

  const e = s.events.find((x) => x.seq === 21) as GrpcEvent;
  assert.equal(e.thread_id, t);
  assert.equal(e.run_id, 'run-1');
  assert.equal(e.event_id, 'e21');
  assert.equal(e.event_type, 'tool_call');
  assert.equal(e.category, 'TRACE');
  assert.equal(e.user_id, 'u-1');
  assert.equal(e.content_json, tricky);
  assert.equal(e.metadata_json, '{"id": "msg-1"}');
  assert.deepEqual(e.created_at, { seconds: 1_700_000_000, nanos: 123_000_000 });
  assert.ok(e.offset > 0);
  const rows = await stack.db.query(
    'SELECT stream_offset::int AS o FROM run_events WHERE thread_id = $1 AND seq = 21',
    [t],
  );
  assert.equal(e.offset, rows.rows[0].o);
  // A live event carries every field too.
  const last = s.events.at(-1) as GrpcEvent;
  assert.equal(last.event_id, 'e35');
  assert.equal(last.content_json, '{"n":35}');
  assert.equal(last.metadata_json, '{}');
  assert.equal(last.category, 'MESSAGE');

  s.cancel();
  const end = await s.ended;
  assert.equal(end.code, status.CANCELLED);
});

test('the gRPC event equals the WebSocket event, field by field', async () => {
  const t = randomName('t-');
  await stack.client.publish(
    [{ ...(events(t, 1, 1)[0] as Event), content_json: '[1,"two",{"three":3}]', metadata_json: '{"k":"v"}' }],
    'PERSISTED',
  );
  const ws = await stack.ws();
  ws.subscribe('a', t);
  await ws.waitFor((f) => f.type === 'live');
  const w = ws.events('a')[0] as WireEvent;
  const s = sub({ thread_id: t });
  await s.waitFor((r) => r.live != null);
  const g = s.events[0] as GrpcEvent;
  assert.equal(g.seq, w.seq);
  assert.equal(g.offset, w.offset);
  assert.equal(g.event_id, w.event_id);
  assert.equal(g.event_type, w.event_type);
  assert.equal(g.category.toLowerCase(), w.category);
  assert.deepEqual(JSON.parse(g.content_json), w.content);
  assert.deepEqual(JSON.parse(g.metadata_json), w.metadata);
  assert.equal(
    new Date(Number(g.created_at?.seconds) * 1000 + (g.created_at?.nanos ?? 0) / 1e6).toISOString(),
    w.created_at,
  );
  s.cancel();
});

test('the converter cuts fields by position and falls back to a parse for text of another shape', () => {
  const fast = eventProtoFromJson(
    '{"seq":3,"offset":9,"thread_id":"t","run_id":"r","event_id":"e","event_type":"a\\"b","category":"lifecycle",' +
      '"user_id":"","created_at":"2024-01-02T03:04:05.678Z","content":  {"metadata":"x"} ,"metadata":{"a":1}}',
  );
  assert.deepEqual(fast, {
    seq: 3,
    offset: 9,
    thread_id: 't',
    run_id: 'r',
    event_id: 'e',
    event_type: 'a"b',
    category: 'LIFECYCLE',
    category_name: 'lifecycle',
    user_id: '',
    created_at: { seconds: Date.UTC(2024, 0, 2, 3, 4, 5) / 1000, nanos: 678_000_000 },
    created_at_text: '2024-01-02T03:04:05.678Z',
    content_json: '{"metadata":"x"}',
    metadata_json: '{"a":1}',
  });
  // Keys in another order: the slow path gives the same event.
  const slow = eventProtoFromJson(
    '{"offset":9,"seq":3,"thread_id":"t","run_id":"r","event_id":"e","event_type":"a\\"b","category":"lifecycle",' +
      '"user_id":"","created_at":"2024-01-02T03:04:05.678Z","metadata":{"a":1},"content":{"metadata":"x"}}',
  );
  assert.deepEqual(slow, fast);
});

test('filters: only matching events, the live seq is the head, the run ends with `end` and status OK', async () => {
  const t = randomName('t-');
  const mixed: Event[] = [];
  for (let i = 1; i <= 30; i++) {
    mixed.push({
      thread_id: t,
      run_id: i % 2 === 0 ? 'run-a' : 'run-b',
      event_id: `e${i}`,
      event_type: i % 3 === 0 ? 'tool_call' : 'ai_chunk',
      category: i % 5 === 0 ? 'TRACE' : 'MESSAGE',
      content_json: JSON.stringify({ i }),
    });
  }
  await stack.client.publish(mixed, 'PERSISTED');
  const want = (from: number, to: number) =>
    mixed
      .slice(from - 1, to)
      .filter((e) => e.run_id === 'run-a' && e.category === 'MESSAGE' && e.event_type === 'ai_chunk')
      .map((e) => (JSON.parse(e.content_json as string) as { i: number }).i);
  const got = (evs: GrpcEvent[]) => evs.map((e) => (JSON.parse(e.content_json) as { i: number }).i);

  const s = sub({ thread_id: t, run_id: 'run-a', categories: ['MESSAGE'], event_types: ['ai_chunk'] });
  const live = await s.waitFor((r) => r.live != null);
  assert.equal(live.live?.seq, 30);
  assert.deepEqual(got(s.events), want(1, 30));

  // A filtered subscriber resumes from a seq it was given and gets exactly the rest.
  const resumeAt = (s.events[2] as GrpcEvent).seq;
  const r = sub({
    thread_id: t,
    after_seq: resumeAt,
    run_id: 'run-a',
    categories: ['MESSAGE'],
    event_types: ['ai_chunk'],
  });
  await r.waitFor((x) => x.live != null);
  assert.deepEqual(got(r.events), want(resumeAt + 1, 30));
  r.cancel();

  // The run's terminal event (which the category filter would skip) ends the subscription.
  await stack.client.publish(
    [
      {
        thread_id: t,
        run_id: 'run-a',
        event_id: 'x1',
        event_type: 'ai_chunk',
        category: 'MESSAGE',
        content_json: '{"i":31}',
      },
      {
        thread_id: t,
        run_id: 'run-a',
        event_id: 'x2',
        event_type: 'end',
        category: 'LIFECYCLE',
        content_json: 'null',
      },
    ],
    'ACCEPTED',
  );
  const end = await s.waitFor((x) => x.end != null);
  assert.deepEqual(end.end, { run_id: 'run-a', seq: 32, status: 'success' });
  const done = await s.ended;
  assert.equal(done.code, status.OK);
  assert.equal(done.cursor, 32);
  assert.deepEqual(got(s.events), [...want(1, 30), 31]);
});

test('live_only starts at the head; from_offset replays the hot tier', async () => {
  const t = randomName('t-');
  // Two requests: two log messages, so seq 6 starts a message of its own.
  await stack.client.publish(events(t, 1, 5), 'PERSISTED');
  await stack.client.publish(events(t, 6, 5), 'PERSISTED');
  const l = sub({ thread_id: t, live_only: true });
  assert.equal((await l.waitFor((r) => r.live != null)).live?.seq, 10);
  await stack.client.publish(events(t, 11, 3), 'ACCEPTED');
  await l.waitFor((r) => r.event?.seq === 13);
  assert.deepEqual(seqs(l.events), [11, 12, 13]);
  l.cancel();

  const { rows } = await stack.db.query(
    'SELECT stream_offset::int AS o FROM run_events WHERE thread_id = $1 AND seq = 6',
    [t],
  );
  const o = sub({ thread_id: t, from_offset: rows[0].o });
  await o.waitFor((r) => r.live != null);
  assert.deepEqual(seqs(o.events), range(6, 13));
  o.cancel();

  // An offset names a log message; every event of it shares the offset, so replay
  // from the offset of seq 3 starts at its message's first event, seq 1.
  const third = await stack.db.query(
    'SELECT stream_offset::int AS o FROM run_events WHERE thread_id = $1 AND seq = 3',
    [t],
  );
  assert.ok(third.rows[0].o < rows[0].o);
  const m = sub({ thread_id: t, from_offset: third.rows[0].o });
  await m.waitFor((r) => r.live != null);
  assert.deepEqual(seqs(m.events), range(1, 13));
  m.cancel();
});

test('errors end the call with a gRPC status, the error code and the cursor as trailers', async () => {
  const t = randomName('t-');
  // One request per event: five log messages, so part of them can be purged below.
  for (let i = 1; i <= 5; i++) await stack.client.publish(events(t, i, 1), 'PERSISTED');

  const ahead = await sub({ thread_id: t, after_seq: 6 }).ended;
  assert.equal(ahead.code, status.OUT_OF_RANGE);
  assert.equal(ahead.errorCode, 'RS_ERR_CURSOR_AHEAD');
  assert.match(ahead.details, /after_seq 6 is past the head/);

  const badThread = await sub({ thread_id: 'no spaces' }).ended;
  assert.equal(badThread.code, status.INVALID_ARGUMENT);
  assert.match(badThread.details, /^thread_id: /);

  const badCategory = await sub({ thread_id: t, categories: ['CATEGORY_UNSPECIFIED'] }).ended;
  assert.equal(badCategory.code, status.INVALID_ARGUMENT);
  assert.match(badCategory.details, /^categories: /);

  const badLive = await sub({ thread_id: t, live_only: false }).ended;
  assert.equal(badLive.code, status.INVALID_ARGUMENT);
  assert.match(badLive.details, /^live_only: /);

  const badOffset = await sub({ thread_id: t, from_offset: 0 }).ended;
  assert.equal(badOffset.code, status.INVALID_ARGUMENT);
  assert.match(badOffset.details, /^from_offset: /);

  // An offset no longer in the log: OUT_OF_RANGE, and the message says what to do.
  const { rows } = await stack.db.query(
    'SELECT seq::int AS seq, stream_offset::int AS o FROM run_events WHERE thread_id = $1 ORDER BY seq',
    [t],
  );
  const nc = await connect({ servers: stack.servers.nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.purge(threadStream(stack.config, t), { seq: rows[3].o });
  } finally {
    await nc.close();
  }
  const expired = await sub({ thread_id: t, from_offset: rows[0].o }).ended;
  assert.equal(expired.code, status.OUT_OF_RANGE);
  assert.equal(expired.errorCode, 'RS_ERR_OFFSET_EXPIRED');
  assert.match(expired.details, /after_seq/);
});

test('a client that cancels ends its subscription on the server', async () => {
  const t = randomName('t-');
  await stack.client.publish(events(t, 1, 3), 'PERSISTED');
  const subscriber = stack.broker.grpcSubscriber;
  assert.ok(subscriber);
  const before = subscriber.size;
  const s = sub({ thread_id: t });
  await s.waitFor((r) => r.live != null);
  assert.equal(subscriber.size, before + 1);
  s.cancel();
  await waitFor(() => subscriber.size === before, { what: 'the server to drop the cancelled call' });
});

test('past RS_GRPC_SUBSCRIBE_MAX_CALLS a Subscribe call is refused with RESOURCE_EXHAUSTED; a freed slot is reusable', async () => {
  await using capped = await startStack({ grpcSubscribeMaxCalls: 3 });
  using c = new SubscriberClient(capped.grpcTarget);
  const t = randomName('t-');
  const held = Array.from({ length: 3 }, () => c.subscribe({ thread_id: t }));
  for (const h of held) await h.waitFor((r) => r.live != null);
  const refused = await c.subscribe({ thread_id: t }).ended;
  assert.equal(refused.code, status.RESOURCE_EXHAUSTED);
  assert.equal(refused.errorCode, 'RS_ERR_RESOURCE_EXHAUSTED');
  assert.match(refused.details, /RS_GRPC_SUBSCRIBE_MAX_CALLS/);
  held[0]?.cancel();
  await waitFor(() => capped.broker.grpcSubscriber?.size === 2, { what: 'the cancelled call released' });
  const again = c.subscribe({ thread_id: t });
  await again.waitFor((r) => r.live != null);
  for (const h of [...held, again]) h.cancel();
});

test('backpressure: a client that stops reading is cut off with RESOURCE_EXHAUSTED and its cursor, and resumes losing nothing', async () => {
  const t = randomName('t-');
  const subscriber = stack.broker.grpcSubscriber;
  assert.ok(subscriber);
  const before = subscriber.size;
  const s = sub({ thread_id: t });
  await s.waitFor((r) => r.live != null);
  s.call.pause();
  // ~4 MiB of live events against a 64 KiB send queue (plus HTTP/2 windows).
  const big = 'x'.repeat(4096);
  const total = 1000;
  for (let i = 0; i < total; i += 100) {
    await stack.client.publish(
      events(t, i + 1, 100, 'run-1', { content_json: JSON.stringify({ big }) }),
      'PERSISTED',
    );
  }
  // The server gives up on the call (it no longer counts it) while the client still reads nothing.
  await waitFor(() => subscriber.size === before, {
    what: 'the slow subscriber to be cut off',
    timeoutMs: 30_000,
  });
  s.call.resume();
  const end = await s.ended;
  assert.equal(end.code, status.RESOURCE_EXHAUSTED);
  assert.equal(end.errorCode, 'RS_ERR_SLOW_CONSUMER');
  assert.ok(end.cursor !== undefined && end.cursor < total, `cursor ${end.cursor}`);
  // What the client read is a gap-free prefix, up to at most the server's cursor (grpc-js drops
  // messages still unread when a non-OK status arrives, so a client resumes from what it read).
  const got = seqs(s.events);
  const k = got.length;
  assert.deepEqual(got, range(1, k));
  assert.ok(k <= (end.cursor as number), `read ${k}, cursor ${end.cursor}`);

  const r = sub({ thread_id: t, after_seq: k });
  await r.waitFor((x) => x.live != null);
  assert.deepEqual(seqs(r.events), range(k + 1, total));
  r.cancel();
});

test('a node shutting down ends its Subscribe calls with UNAVAILABLE and the cursor, and another node resumes them', async () => {
  const t = randomName('t-');
  await stack.client.publish(events(t, 1, 5), 'PERSISTED');
  const config = brokerConfig(stack.servers, {
    roles: new Set(['fanout']),
    streamName: stack.config.streamName,
    subjectPrefix: stack.config.subjectPrefix,
  });
  const node = await startBroker(config, createLogger(config.logLevel));
  const nodeClient = new SubscriberClient(`127.0.0.1:${node.grpcPort}`);
  try {
    const s = nodeClient.subscribe({ thread_id: t, run_id: 'run-1' });
    await s.waitFor((r) => r.live != null);
    await node.close();
    const end = await s.ended;
    assert.equal(end.code, status.UNAVAILABLE);
    assert.equal(end.errorCode, 'RS_ERR_UNAVAILABLE');
    assert.equal(end.cursor, 5);
  } finally {
    nodeClient.close();
    await node.close();
  }
  await stack.client.publish(events(t, 6, 2), 'PERSISTED');
  const r = sub({ thread_id: t, after_seq: 5, run_id: 'run-1' });
  await r.waitFor((x) => x.live != null);
  assert.deepEqual(seqs(r.events), [6, 7]);
  r.cancel();
});
