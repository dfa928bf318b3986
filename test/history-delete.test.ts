// Deletion reaches every tier: Postgres rows and run records, the JetStream log, and live
// WebSocket subscribers (a `deleted` frame); counts follow; seqs are never reused; a later
// subscribe gets an empty thread live at its old head; and a replay of the log (from an
// old checkpoint, or of messages a crash left unpurged) never brings deleted events back.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { startBroker } from '../src/broker.js';
import { IngestClient } from '../src/client/ingest-client.js';
import type { ServerFrame, WsConnection } from '../src/client/ws-subscriber.js';
import { partitionOf } from '../src/domain/partition.js';
import type { SubscribeResponse__Output } from '../src/gen/runstream/v1/SubscribeResponse.js';
import type { ProtoGrpcType as SubscriberProto } from '../src/gen/subscriber.js';
import { HistoryClient } from '../src/history/client.js';
import { Subjects } from '../src/log/subjects.js';
import { createLogger } from '../src/logger.js';
import { deleteRows } from '../src/persist/deletions.js';
import { loadProto } from '../src/proto.js';
import { ev, http } from './helpers/history.js';
import { countStatements } from './helpers/postgres.js';
import { SseClient } from './helpers/sse-client.js';
import {
  brokerConfig,
  logMessageCount,
  randomName,
  type Stack,
  startServers,
  startStack,
  threadInPartitionOf,
  threadStream,
} from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

let stack: Stack;
let client: HistoryClient;
let nc: NatsConnection;

before(async () => {
  stack = await startStack();
  client = new HistoryClient(stack.grpcTarget);
  nc = await connect({ servers: stack.servers.nats.url });
});
after(async () => {
  await nc.close();
  client.close();
  await stack[Symbol.asyncDispose]();
});

const logNames = (s: Stack) => new Subjects(s.config.subjectPrefix, s.config.partitions);

/** Messages the JetStream log holds per subject of a thread. */
async function logSubjects(threadId: string): Promise<Record<string, number>> {
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(threadStream(stack.config, threadId), {
    subjects_filter: logNames(stack).logOfThread(threadId),
  });
  return info.state.subjects ?? {};
}

const runEvents = (t: string, run: string, from: number, n: number) =>
  Array.from({ length: n }, (_, i) => ev(t, run, from + i));

function subscribe(c: WsConnection, id: string, threadId: string, extra: Record<string, unknown> = {}): void {
  c.sendRaw({ type: 'subscribe', id, thread_id: threadId, ...extra });
}

const framesOf = (c: WsConnection, id: string) => c.frames.filter((f) => f.id === id);
const seqsOf = (c: WsConnection, id: string) => c.events(id).map((e) => e.seq);
const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => a + i);

test('DeleteRun over HTTP: rows, run record and log subject go; subscribers are told; the hole is skipped', async () => {
  const t = randomName('dr-');
  await stack.client.publish(
    [...runEvents(t, 'r1', 1, 5), ...runEvents(t, 'r2', 1, 5), ...runEvents(t, 'r3', 1, 5)],
    'PERSISTED',
  );
  // One log message per run: a request's events of one run travel together.
  assert.deepEqual(await logSubjects(t), {
    [logNames(stack).log(t, 'r1')]: 1,
    [logNames(stack).log(t, 'r2')]: 1,
    [logNames(stack).log(t, 'r3')]: 1,
  });
  const c = await stack.ws();
  subscribe(c, 'thread', t);
  subscribe(c, 'r2', t, { run_id: 'r2' });
  subscribe(c, 'r3', t, { run_id: 'r3' });
  for (const id of ['thread', 'r2', 'r3']) await c.waitFor((f) => f.type === 'live' && f.id === id);

  const del = await http(`${stack.httpUrl}/v1/threads/${t}/runs/r2`, { method: 'DELETE' });
  assert.equal(del.status, 200);
  assert.deepEqual(del.body, {
    thread_id: t,
    run_id: 'r2',
    deleted_events: 5,
    deleted_runs: 1,
    purged_messages: 1,
    head_seq: 15,
  });

  // Live subscribers of the thread and of the run are told, and their subscriptions end.
  assert.deepEqual(await c.waitFor((f) => f.type === 'deleted' && f.id === 'thread'), {
    type: 'deleted',
    id: 'thread',
    thread_id: t,
    run_id: 'r2',
  });
  await c.waitFor((f) => f.type === 'deleted' && f.id === 'r2');
  // A subscriber of another run goes on.
  await stack.client.publish(runEvents(t, 'r3', 6, 2), 'PERSISTED');
  await c.waitFor((f) => f.type === 'event' && f.id === 'r3' && f.event.seq === 17);
  assert.deepEqual(seqsOf(c, 'r3'), [11, 12, 13, 14, 15, 16, 17]);
  assert.ok(
    !framesOf(c, 'thread').some((f) => f.type === 'event' && f.event.seq > 15),
    'ended at the delete',
  );

  // JetStream holds nothing more of the run; the other runs are untouched.
  const subjects = await logSubjects(t);
  assert.equal(subjects[logNames(stack).log(t, 'r2')], undefined);
  assert.equal(subjects[logNames(stack).log(t, 'r1')], 1);

  // Reads skip the hole; counts follow; the run record is gone.
  const page = await http<{ events: { seq: number; run_id: string }[] }>(
    `${stack.httpUrl}/v1/threads/${t}/events`,
  );
  assert.deepEqual(
    page.body.events.map((e) => e.seq),
    [...range(1, 5), ...range(11, 17)],
  );
  assert.equal(await client.countMessages({ thread_id: t }), 12);
  assert.equal(
    await client.countMessages({ thread_id: t, user_id: 'nobody' }),
    0,
    'user-scoped count: no such user',
  );
  assert.equal(
    (await http<{ count: number }>(`${stack.httpUrl}/v1/threads/${t}/messages/count`)).body.count,
    12,
  );
  assert.equal(await client.countMessages({ thread_id: t, run_id: 'r2' }), 0);
  assert.equal((await http(`${stack.httpUrl}/v1/threads/${t}/runs/r2`)).status, 404);
  assert.deepEqual(
    (await client.listRuns({ thread_id: t })).runs.map((r) => r.run_id),
    ['r3', 'r1'],
  );

  // A new subscriber from 0 crosses the hole, goes live, and gets new events after it.
  const d = await stack.ws();
  d.subscribe('again', t, 0);
  assert.deepEqual(await d.waitFor((f) => f.type === 'live' && f.id === 'again'), {
    type: 'live',
    id: 'again',
    seq: 17,
  });
  assert.deepEqual(seqsOf(d, 'again'), [...range(1, 5), ...range(11, 17)]);
  await stack.client.publish(runEvents(t, 'r4', 1, 1), 'PERSISTED');
  await d.waitFor((f) => f.type === 'event' && f.id === 'again' && f.event.seq === 18);

  // Deleting again is a no-op.
  const twice = await http(`${stack.httpUrl}/v1/threads/${t}/runs/r2`, { method: 'DELETE' });
  assert.deepEqual([twice.body.deleted_events, twice.body.purged_messages], [0, 0]);
});

test('deleting the tail never lets a seq be reused; a live subscriber past a deleted run continues across the hole', async () => {
  const t = randomName('dt-');
  await stack.client.publish([...runEvents(t, 'r1', 1, 3), ...runEvents(t, 'r2', 1, 3)], 'PERSISTED');
  // Watches only r1: a deleted r2 does not end it.
  const c = await stack.ws();
  subscribe(c, 'r1', t, { run_id: 'r1' });
  await c.waitFor((f) => f.type === 'live' && f.id === 'r1');
  const r = await client.deleteRun({ thread_id: t, run_id: 'r2' });
  assert.deepEqual([r.deleted_events, r.deleted_runs, r.purged_messages, r.head_seq], [3, 1, 1, 6]);

  const acks = await stack.client.publish(runEvents(t, 'r1', 4, 2), 'PERSISTED');
  assert.deepEqual(
    acks.map((a) => a.seq),
    [7, 8],
    'seqs 4-6 belonged to the deleted run and stay unused',
  );
  await c.waitFor((f) => f.type === 'event' && f.id === 'r1' && f.event.seq === 8);
  assert.deepEqual(seqsOf(c, 'r1'), [1, 2, 3, 7, 8]);

  // A client whose cursor was inside the deleted tail resumes: its cursor is still valid.
  const d = await stack.ws();
  d.subscribe('resume', t, 5);
  await d.waitFor((f) => f.type === 'live' && f.id === 'resume');
  assert.deepEqual(seqsOf(d, 'resume'), [7, 8]);
});

test('DeleteThread over gRPC: everything goes; later subscribes get an empty thread live at its old head', async () => {
  // Another thread's message first, in the same partition, so the thread's log keeps
  // starting below its offsets.
  const t = randomName('dth-');
  await stack.client.publish([ev(threadInPartitionOf(stack.config, t, 'keep-'), 'r', 1)], 'PERSISTED');
  const acks = await stack.client.publish(
    [...runEvents(t, 'a', 1, 4), ...runEvents(t, 'b', 1, 4)],
    'PERSISTED',
  );
  const firstOffset = acks[0]?.offset as number;
  const c = await stack.ws();
  c.subscribe('live', t);
  await c.waitFor((f) => f.type === 'live' && f.id === 'live');

  const r = await client.deleteThread({ thread_id: t });
  assert.deepEqual([r.deleted_events, r.deleted_runs, r.purged_messages, r.head_seq], [8, 2, 2, 8]);
  assert.deepEqual(await c.waitFor((f) => f.type === 'deleted' && f.id === 'live'), {
    type: 'deleted',
    id: 'live',
    thread_id: t,
  });
  assert.deepEqual(await logSubjects(t), {});
  assert.equal((await client.listEvents({ thread_id: t })).events.length, 0);
  assert.equal((await client.listRuns({ thread_id: t })).runs.length, 0);
  assert.equal(await client.countMessages({ thread_id: t }), 0);
  assert.equal(
    (await http<{ count: number }>(`${stack.httpUrl}/v1/threads/${t}/messages/count`)).body.count,
    0,
  );

  // Subscribing now: no stale event, live at the old head, whatever the cursor.
  const d = await stack.ws();
  d.subscribe('zero', t, 0);
  d.subscribe('head', t, 8);
  d.sendRaw({ type: 'subscribe', id: 'offset', thread_id: t, from_offset: firstOffset });
  d.subscribe('ahead', t, 9);
  for (const id of ['zero', 'head', 'offset']) {
    assert.deepEqual(await d.waitFor((f) => f.type === 'live' && f.id === id), { type: 'live', id, seq: 8 });
  }
  const ahead = await d.waitFor((f) => f.type === 'error' && f.id === 'ahead');
  assert.equal((ahead as Extract<ServerFrame, { type: 'error' }>).code, 'cursor_ahead');
  assert.equal(d.frames.filter((f) => f.type === 'event').length, 0);

  // The thread lives on above its old head.
  const next = await stack.client.publish(runEvents(t, 'c', 1, 1), 'PERSISTED');
  assert.equal(next[0]?.seq, 9);
  await d.waitFor((f) => f.type === 'event' && f.id === 'zero' && f.event.seq === 9);
  assert.deepEqual(seqsOf(d, 'zero'), [9]);

  // Idempotent.
  const again = await client.deleteThread({ thread_id: t });
  assert.deepEqual([again.deleted_events, again.head_seq], [1, 9]);
  assert.equal((await client.deleteThread({ thread_id: t })).deleted_events, 0);
});

test('SSE and gRPC Subscribe subscribers are told too, and their streams end', async () => {
  const t = randomName('dx-');
  await stack.client.publish(runEvents(t, 'r1', 1, 2), 'PERSISTED');
  const sse = await SseClient.open(`${stack.httpUrl}/v1/threads/${t}/stream`);
  await sse.waitFor((b) => b.event === 'live');

  const proto = loadProto().proto as unknown as SubscriberProto;
  const sub = new proto.runstream.v1.Subscriber(stack.grpcTarget, grpc.credentials.createInsecure());
  const call = sub.Subscribe({ thread_id: t, after_seq: 0 });
  const got: SubscribeResponse__Output[] = [];
  const ended = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
  const live = new Promise<void>((resolve) =>
    call.on('data', (r: SubscribeResponse__Output) => {
      got.push(r);
      if (r.live) resolve();
    }),
  );
  await live;

  await client.deleteRun({ thread_id: t, run_id: 'r1' });
  const deleted = await sse.waitFor((b) => b.event === 'deleted');
  assert.deepEqual(JSON.parse(deleted.data as string), {
    type: 'deleted',
    thread_id: t,
    run_id: 'r1',
    seq: 2,
  });
  await sse.ended;
  const status = await ended;
  assert.equal(status.code, grpc.status.OK);
  assert.deepEqual(got.at(-1)?.deleted, { thread_id: t, run_id: 'r1' });
  sub.close();
});

test('a user-scoped delete of a thread shared with another user is refused, and deletes nothing', async () => {
  const t = randomName('du-');
  await stack.client.publish(
    [ev(t, 'a', 1, { user: 'alice' }), ev(t, 'a', 2, { user: 'alice' }), ev(t, 'b', 1, { user: 'bob' })],
    'PERSISTED',
  );
  const refused = await http<{ error: { code: string; message: string } }>(
    `${stack.httpUrl}/v1/threads/${t}?user_id=alice`,
    { method: 'DELETE' },
  );
  assert.deepEqual([refused.status, refused.body.error.code], [403, 'permission_denied']);
  await assert.rejects(client.deleteThread({ thread_id: t, user_id: 'alice' }), {
    code: grpc.status.PERMISSION_DENIED,
  });
  assert.equal((await client.listEvents({ thread_id: t })).events.length, 3);
  const own = await client.deleteRun({ thread_id: t, run_id: 'a', user_id: 'alice' });
  assert.equal(own.deleted_events, 2);
  assert.equal(await client.countMessages({ thread_id: t }), 1);
});

test('a replay of the log cannot resurrect deleted events: from an old checkpoint, or of messages left unpurged', async () => {
  await using servers = await startServers({ own: true });
  const config = brokerConfig(servers);
  const log = createLogger('silent');
  const t = randomName('rp-');
  const other = randomName('ot-');

  // 1. Stored, then deleted (rows, horizon, purge); then the persister starts over from offset 0.
  let broker = await startBroker(config, log);
  let ingest = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  const history = new HistoryClient(`127.0.0.1:${broker.grpcPort}`);
  await ingest.publish(
    [...runEvents(t, 'r1', 1, 3), ...runEvents(t, 'r2', 1, 3), ev(other, 'x', 1)],
    'PERSISTED',
  );
  await history.deleteRun({ thread_id: t, run_id: 'r1' });
  ingest.close();
  history.close();
  await broker.close();
  await servers.db.query('UPDATE log_partitions SET last_offset = 0');

  broker = await startBroker(config, log);
  ingest = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  // PERSISTED after the replay: once this is stored, everything before it in the log has been replayed.
  await ingest.publish([ev(other, 'x', 2)], 'PERSISTED');
  const rows = async () =>
    (await servers.db.query('SELECT run_id, seq::int FROM run_events WHERE thread_id = $1 ORDER BY seq', [t]))
      .rows;
  assert.deepEqual(
    (await rows()).map((r) => [r.run_id, r.seq]),
    [
      ['r2', 4],
      ['r2', 5],
      ['r2', 6],
    ],
  );
  ingest.close();
  await broker.close();

  // 2. A crash between the delete's Postgres step and the purge: the log still holds the
  //    thread's messages, the persister has not stored them yet, and they must stay dropped.
  const noPersister = { ...config, roles: new Set(['ingest', 'fanout'] as const) };
  broker = await startBroker(noPersister, log);
  ingest = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  const u = randomName('un-');
  const accepted = await ingest.publish([...runEvents(u, 'r1', 1, 4), ev(other, 'x', 3)], 'ACCEPTED');
  ingest.close();
  await broker.close();
  const nc2 = await connect({ servers: servers.nats.url });
  const jsm = await jetstreamManager(nc2);
  // u's partition stream ends with u's messages (or with the other thread's, when it shares it).
  const last = (await jsm.streams.info(threadStream(config, u))).state.last_seq;
  assert.ok(last >= (accepted[3]?.offset as number));
  await deleteRows(servers.db, { threadId: u, logHorizon: last }); // the delete's Postgres step, no purge
  await nc2.close();

  broker = await startBroker(config, log);
  ingest = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  const after = await ingest.publish([ev(u, 'r2', 1), ev(other, 'x', 4)], 'PERSISTED');
  assert.equal(after[0]?.seq, 1, 'the first stored event of the thread: none of the deleted ones took a seq');
  await waitFor(async () => broker.persister && broker.persister.position >= (after.at(-1)?.offset ?? 0));
  const u_rows = await servers.db.query('SELECT event_id FROM run_events WHERE thread_id = $1', [u]);
  assert.deepEqual(
    u_rows.rows.map((r) => r.event_id),
    ['r2-e1'],
  );
  assert.ok((broker.persister?.storedCount ?? 0) >= 2);
  ingest.close();
  await broker.close();
});

test('a retry of threads in several partitions, one deleted since: its messages share offsets, yet each is judged by its own thread', async () => {
  // Fresh streams: every partition's first message is at offset 1, so the two threads'
  // messages below have the same offset in different streams.
  await using own = await startStack();
  const alive = randomName('pa-');
  let deleted = randomName('pd-');
  while (partitionOf(deleted, own.config.partitions) === partitionOf(alive, own.config.partitions)) {
    deleted = randomName('pd-');
  }
  const ownNc = await connect({ servers: own.servers.nats.url });
  const ownJsm = await jetstreamManager(ownNc);
  const events = (order: readonly string[]) => order.map((t) => ev(t, 'run-1', 1));
  const first = await own.client.publish(events([alive, deleted]), 'PERSISTED');
  assert.deepEqual(
    first.map((a) => [Number(a.seq), Number(a.offset)]),
    [
      [1, 1],
      [1, 1],
    ],
    'both first in their streams',
  );
  assert.equal((await http(`${own.httpUrl}/v1/threads/${deleted}`, { method: 'DELETE' })).status, 200);
  const messages = await logMessageCount(ownJsm, own.config);

  // The alive thread first, then the other way round: neither may decide for the other.
  const retry = await own.client.publish(events([alive, deleted]), 'PERSISTED', 20_000);
  assert.deepEqual(
    retry.map((a) => [Number(a.seq), a.duplicate]),
    [
      [1, true],
      [2, false], // a new event, stored above the deleted thread's old head
    ],
  );
  const again = await own.client.publish(events([deleted, alive]), 'PERSISTED', 20_000);
  assert.deepEqual(
    again.map((a) => [Number(a.seq), a.duplicate]),
    [
      [2, true],
      [1, true],
    ],
  );
  const rows = await own.db.query(
    'SELECT thread_id, seq FROM run_events WHERE thread_id = ANY($1) ORDER BY thread_id',
    [[alive, deleted]],
  );
  assert.deepEqual(
    rows.rows.map((r) => [r.thread_id, Number(r.seq)]).sort(),
    [
      [alive, 1],
      [deleted, 2],
    ].sort(),
  );
  // One message went to the log again: the deleted thread's; never the alive one's.
  assert.equal(await logMessageCount(ownJsm, own.config), messages + 1);
  await ownNc.close();
});

test('a retry spanning 1,500 threads, some deleted since, looks up horizons and seqs in a few statements: the deleted are new, the rest duplicates', async () => {
  const prefix = randomName('wide-');
  const threads = Array.from({ length: 1_500 }, (_, i) => `${prefix}-${i}`);
  const events = threads.map((t) => ev(t, 'run-1', 1));
  const first = await stack.client.publish(events, 'PERSISTED', 60_000);
  assert.ok(first.every((a) => Number(a.seq) === 1));
  for (const path of [`/v1/threads/${threads[0]}`, `/v1/threads/${threads[1]}/runs/run-1`]) {
    assert.equal((await http(`${stack.httpUrl}${path}`, { method: 'DELETE' })).status, 200);
  }

  using statements = countStatements(/^rs_(deletion_horizon|find)/);
  const persisted = await stack.client.publish(events, 'PERSISTED', 60_000);
  assert.deepEqual(
    persisted.slice(0, 3).map((a) => [Number(a.seq), a.duplicate]),
    [
      [2, false], // deleted thread: a new event, above the old head
      [2, false], // deleted run: the same
      [1, true],
    ],
  );
  assert.ok(persisted.slice(2).every((a, i) => a.duplicate && a.offset === first[i + 2]?.offset));
  // At ACCEPTED a repeat's flag and offset depend on how the messages went out merged
  // (docs/protocol.md §5); it is retried for its lookups of deletion horizons.
  const accepted = await stack.client.publish(events, 'ACCEPTED', 60_000);
  assert.equal(accepted.length, events.length);
  const counted = statements();
  assert.ok(counted <= 10, `${counted} statements for two retries of ${threads.length} threads`);
});

test('an event id used before a delete is a new event after it, at both ack levels, and a retry of it is a duplicate', async () => {
  for (const scope of ['thread', 'run'] as const) {
    const t = randomName('t-');
    const e = ev(t, 'run-1', 1);
    const [first] = await stack.client.publish([e], 'PERSISTED');
    assert.equal(first?.seq, 1);
    const path = scope === 'thread' ? `/v1/threads/${t}` : `/v1/threads/${t}/runs/run-1`;
    assert.equal((await http(`${stack.httpUrl}${path}`, { method: 'DELETE' })).status, 200);

    // The identical event again, within JetStream's duplicate window: new, both levels agree.
    const [accepted] = await stack.client.publish([e], 'ACCEPTED');
    assert.equal(accepted?.duplicate, false, `${scope}: ACCEPTED says new`);
    assert.ok((accepted?.offset ?? 0) > (first?.offset ?? 0), `${scope}: a new offset`);
    const [persisted] = await stack.client.publish([e], 'PERSISTED', 10_000);
    assert.equal(persisted?.seq, 2, `${scope}: stored above the old head, seq never reused`);
    assert.equal(persisted?.duplicate, true, `${scope}: the PERSISTED retry is a duplicate of the new event`);
    assert.equal(persisted?.offset, accepted?.offset);
    // And it stays one event: again and again, both levels say duplicate of the same.
    const [again] = await stack.client.publish([e], 'ACCEPTED');
    assert.deepEqual([again?.duplicate, again?.offset], [true, accepted?.offset]);
    const rows = (await stack.db.query('SELECT seq FROM run_events WHERE thread_id = $1', [t])).rows;
    assert.deepEqual(
      rows.map((r) => Number(r.seq)),
      [2],
      `${scope}: stored once`,
    );
  }
});

test("a delete while the persister is behind takes only the deleted thread's messages: other threads' events before it are all stored", async () => {
  // One event a transaction, one partition, and the persister held at its first commit, so
  // the log runs ahead of it: most of what is published below is not yet even delivered to it.
  await using own = await startStack({ partitions: 1, persistBatchMax: 1 });
  const prefix = randomName('behind-');
  await own.client.publish([ev(`${prefix}-warm`, 'run-1', 1)], 'PERSISTED');
  const holder = await own.db.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT * FROM log_partitions FOR NO KEY UPDATE');
    const fillers = Array.from({ length: 300 }, (_, i) =>
      ev(`${prefix}-f${i % 3}`, 'run-1', 1 + Math.floor(i / 3)),
    );
    // A request a message: each its own place in the log.
    for (let i = 0; i < fillers.length; i += 50) {
      await Promise.all(fillers.slice(i, i + 50).map((e) => own.client.publish([e], 'ACCEPTED')));
    }
    await own.client.publish([ev(`${prefix}-b`, 'run-1', 1)], 'ACCEPTED');
    await own.client.publish([ev(`${prefix}-a`, 'run-1', 1)], 'ACCEPTED');
    assert.equal((await http(`${own.httpUrl}/v1/threads/${prefix}-a`, { method: 'DELETE' })).status, 200);
  } finally {
    await holder.query('COMMIT');
    holder.release();
  }
  // Stored in log order: once this is, everything published before it has been taken.
  await own.client.publish([ev(`${prefix}-c`, 'run-1', 1)], 'PERSISTED', 60_000);
  const { rows } = await own.db.query<{ thread_id: string; n: string }>(
    `SELECT thread_id, count(*) AS n FROM run_events WHERE thread_id LIKE $1 GROUP BY thread_id`,
    [`${prefix}-%`],
  );
  assert.deepEqual(Object.fromEntries(rows.map((r) => [r.thread_id.slice(prefix.length + 1), Number(r.n)])), {
    warm: 1,
    f0: 100,
    f1: 100,
    f2: 100,
    b: 1,
    c: 1,
  });
});

test("a PERSISTED publish again of a deleted event, while the persister has still to drop the original, is answered with the new event's seq", async () => {
  await using own = await startStack({ partitions: 1, persistBatchMax: 1 });
  const t = randomName('again-');
  const e = ev(t, 'run-1', 1);
  await own.client.publish([ev(`${t}-warm`, 'run-1', 1)], 'PERSISTED');
  const ownNc = await connect({ servers: own.servers.nats.url });
  const ownJsm = await jetstreamManager(ownNc);
  // Messages written to the log so far (the delete removes some: count its last offset).
  const inLog = (n: number) =>
    waitFor(async () => (await ownJsm.streams.info(threadStream(own.config, t))).state.last_seq >= n);
  const holder = await own.db.connect();
  type Acks = ReturnType<typeof own.client.publish>;
  let first: Acks | undefined;
  let again: Acks | undefined;
  try {
    // The persister waits at a commit of another thread, with the original in hand.
    await holder.query('BEGIN');
    await holder.query('SELECT * FROM log_partitions FOR NO KEY UPDATE');
    await own.client.publish([ev(`${t}-other`, 'run-1', 1)], 'ACCEPTED');
    first = own.client.publish([e], 'PERSISTED', 30_000);
    first.catch(() => undefined); // awaited below
    await inLog(3);
    assert.equal((await http(`${own.httpUrl}/v1/threads/${t}`, { method: 'DELETE' })).status, 200);
    // The same event again: a new event of the emptied thread, written to the log anew.
    again = own.client.publish([e], 'PERSISTED', 30_000);
    again.catch(() => undefined); // awaited below
    await inLog(4);
  } finally {
    await holder.query('COMMIT');
    holder.release();
  }
  const [ack] = await (again as Acks);
  assert.deepEqual([ack?.seq, ack?.duplicate], [1, false], 'the new event, stored: not the original dropped');
  const rows = (await own.db.query('SELECT seq FROM run_events WHERE thread_id = $1', [t])).rows;
  assert.deepEqual(
    rows.map((r) => Number(r.seq)),
    [1],
  );
  // The original: dropped, its thread deleted after it was accepted.
  const [original] = await (first as Acks);
  assert.deepEqual([original?.seq, original?.offset], [0, 3]);
  await ownNc.close();
});

test("a delete looks for the log's messages from the thread's lowest row on, and from the start once the thread (or a run of it) was deleted before", async () => {
  const t = randomName('from-');
  const offsets = async (events: ReturnType<typeof ev>[]) =>
    (await stack.client.publish(events, 'PERSISTED')).map((a) => Number(a.offset));
  const [r1] = await offsets([ev(t, 'run-1', 1)]);
  const [r2] = await offsets([ev(t, 'run-2', 1)]);
  await offsets([ev(t, 'run-1', 2)]);
  const [last = 0] = await offsets([ev(t, 'run-2', 2)]);
  // A run's messages may sit below its own rows (another run's duplicates): the thread's lowest.
  const run2 = await deleteRows(stack.db, { threadId: t, runId: 'run-2', logHorizon: last });
  assert.deepEqual([run2.events, run2.from], [2, r1]);
  const thread = await deleteRows(stack.db, { threadId: t, logHorizon: last });
  assert.deepEqual([thread.events, thread.from], [2, 1], 'a run of it was deleted before');
  const fresh = randomName('from-');
  const [f1] = await offsets([ev(fresh, 'run-1', 1), ev(fresh, 'run-1', 2)]);
  const once = await deleteRows(stack.db, { threadId: fresh, logHorizon: f1 ?? 0 });
  assert.deepEqual([once.events, once.from], [2, f1]);
  assert.ok((r1 ?? 0) < (r2 ?? 0));
  // A run deleted before forces the start too, whichever run goes next.
  const other = randomName('from-');
  await offsets([ev(other, 'run-1', 1)]);
  const [o2 = 0] = await offsets([ev(other, 'run-2', 1)]);
  await deleteRows(stack.db, { threadId: other, runId: 'run-1', logHorizon: o2 });
  const [o3 = 0] = await offsets([ev(other, 'run-2', 2)]);
  assert.equal((await deleteRows(stack.db, { threadId: other, runId: 'run-2', logHorizon: o3 })).from, 1);
  const [g1] = await offsets([ev(fresh, 'run-1', 3)]);
  const twice = await deleteRows(stack.db, { threadId: fresh, logHorizon: g1 ?? 0 });
  assert.deepEqual([twice.events, twice.from], [1, 1], 'the thread was deleted before');
});

test('a thread with nothing stored is looked for in the log past what the persister stored of its partition, not from the start', async () => {
  const unknown = randomName('none-');
  const neighbour = threadInPartitionOf(stack.config, unknown, 'none-n-');
  // Something stored in the partition, so its position is past its start.
  await stack.client.publish([ev(neighbour, 'run-1', 1), ev(neighbour, 'run-1', 2)], 'PERSISTED');
  const partition = { stream: stack.config.streamName, index: partitionOf(unknown, stack.config.partitions) };
  const position = async () =>
    Number(
      (
        await stack.db.query<{ last_offset: string }>(
          'SELECT last_offset FROM log_partitions WHERE stream = $1 AND partition = $2',
          [partition.stream, partition.index],
        )
      ).rows[0]?.last_offset ?? 0,
    );
  const at = await position();
  assert.ok(at > 0, 'the partition has a stored position');
  const none = await deleteRows(stack.db, { threadId: unknown, logHorizon: at, partition });
  assert.equal(none.events, 0);
  assert.ok(none.from > at, `looked for from ${none.from}, past the position ${at}`);
  assert.ok(none.from <= (await position()) + 1);
  // Without the partition, or once the thread was deleted (just now), from the start.
  const other = randomName('none-');
  assert.equal((await deleteRows(stack.db, { threadId: other, logHorizon: at })).from, 1);
  assert.equal((await deleteRows(stack.db, { threadId: unknown, logHorizon: at, partition })).from, 1);
  // A thread with rows: its lowest row's offset, lower than the position.
  const stored = await deleteRows(stack.db, {
    threadId: neighbour,
    logHorizon: at,
    partition: { ...partition, index: partitionOf(neighbour, stack.config.partitions) },
  });
  assert.equal(stored.events, 2);
  assert.ok(stored.from <= at);
});

test('a PERSISTED publish whose message a delete removes before the persister reads it is answered seq 0, not left to time out', async () => {
  await using own = await startStack({ partitions: 1, persistBatchMax: 1, persistedAckTimeoutMs: 20_000 });
  const prefix = randomName('unread-');
  await own.client.publish([ev(`${prefix}-warm`, 'run-1', 1)], 'PERSISTED');
  const holder = await own.db.connect();
  let pending: ReturnType<typeof own.client.publish> | undefined;
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT * FROM log_partitions FOR NO KEY UPDATE');
    // A message each (threads of their own), more than the persister pulls ahead.
    for (let i = 0; i < 300; i += 50) {
      await Promise.all(
        Array.from({ length: 50 }, (_, j) =>
          own.client.publish([ev(`${prefix}-f${i + j}`, 'run-1', 1)], 'ACCEPTED'),
        ),
      );
    }
    pending = own.client.publish([ev(`${prefix}-a`, 'run-1', 1)], 'PERSISTED', 30_000);
    pending.catch(() => undefined); // awaited below
    const ownNc = await connect({ servers: own.servers.nats.url });
    const ownJsm = await jetstreamManager(ownNc);
    await waitFor(
      async () => (await ownJsm.streams.info(threadStream(own.config, `${prefix}-a`))).state.last_seq >= 302,
    );
    await ownNc.close();
    const deleted = await http(`${own.httpUrl}/v1/threads/${prefix}-a`, { method: 'DELETE' });
    assert.equal(deleted.status, 200);
    assert.equal(
      (deleted.body as { purged_messages: number }).purged_messages,
      1,
      'removed before it was read',
    );
  } finally {
    await holder.query('COMMIT');
    holder.release();
  }
  const [ack] = await (pending as ReturnType<typeof own.client.publish>);
  assert.deepEqual([ack?.seq, ack?.duplicate], [0, false]);
  const rows = await own.db.query('SELECT 1 FROM run_events WHERE thread_id = $1', [`${prefix}-a`]);
  assert.equal(rows.rowCount, 0);
});

test('an event_id freed by a run delete is a new event in another run of the thread, within the duplicate window too; while its run lives it stays one event', async () => {
  const t = randomName('xrun-');
  const withId = (run: string, id: string) => ({ ...ev(t, run, 1), event_id: id });
  const [first] = await stack.client.publish([withId('run-1', 'shared-1')], 'PERSISTED');
  assert.equal(first?.seq, 1);
  // While run-1 lives, an id of it sent in run-2 is the same event: stored once, in run-1.
  await stack.client.publish([withId('run-1', 'other-1')], 'PERSISTED');
  const [same] = await stack.client.publish([withId('run-2', 'other-1')], 'PERSISTED', 10_000);
  assert.deepEqual([same?.seq, same?.duplicate], [2, true]);
  assert.equal((await http(`${stack.httpUrl}/v1/threads/${t}/runs/run-1`, { method: 'DELETE' })).status, 200);
  // Deleted with its run, the id is free: in run-2 it is a new event, at both levels.
  const [accepted] = await stack.client.publish([withId('run-2', 'shared-1')], 'ACCEPTED');
  assert.equal(accepted?.duplicate, false);
  const [persisted] = await stack.client.publish([withId('run-2', 'shared-1')], 'PERSISTED', 10_000);
  assert.deepEqual([persisted?.seq, persisted?.duplicate], [3, true], 'a duplicate of the new event');
  const rows = await stack.db.query('SELECT run_id, seq FROM run_events WHERE thread_id = $1', [t]);
  assert.deepEqual(
    rows.rows.map((r) => [r.run_id, Number(r.seq)]),
    [['run-2', 3]],
  );
});

test("a run delete leaves none of the run's messages in the log, also one that stored nothing of its own (another run's duplicate)", async () => {
  const t = randomName('rundup-');
  const shared = (run: string) => ({ ...ev(t, run, 1), event_id: 'shared' });
  await stack.client.publish([shared('run-1')], 'PERSISTED');
  const [dup] = await stack.client.publish([shared('run-2')], 'PERSISTED');
  assert.deepEqual([dup?.seq, dup?.duplicate], [1, true], 'stored nothing: a duplicate of run-1');
  await stack.client.publish([ev(t, 'run-2', 5)], 'PERSISTED');
  const res = await http<{ purged_messages: number }>(`${stack.httpUrl}/v1/threads/${t}/runs/run-2`, {
    method: 'DELETE',
  });
  assert.equal(res.status, 200);
  assert.equal(res.body.purged_messages, 2);
  const left = await logSubjects(t);
  assert.deepEqual(
    Object.keys(left).filter((s) => s.endsWith('.run-2')),
    [],
    'nothing of run-2 in the log',
  );
});
