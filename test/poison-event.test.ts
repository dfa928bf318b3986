// The poison-event policy: an event ingest accepted but Postgres refuses (made possible here
// by the RS_TEST_LOOSEN_VALIDATION=json-depth hook) stops nothing. The persister stores
// everything else in log order, keeps the event in dead_letters, stores an `event_rejected`
// notice in its place (no hole in seq: the refused event takes none), tells a PERSISTED
// producer why, and a replay or a retry of it changes nothing.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startBroker } from '../src/broker.js';
import type { Event } from '../src/client/ingest-client.js';
import type { WireEvent } from '../src/client/ws-subscriber.js';
import { createLogger } from '../src/logger.js';
import { REJECTED_EVENT_TYPE } from '../src/persist/poison.js';
import { tokenEvent } from './helpers/events.js';
import { expectGapFree, randomName, startStack, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

/** Postgres' json input gives up ("stack depth limit exceeded") well before this. */
const TOO_DEEP = `${'['.repeat(20_000)}${']'.repeat(20_000)}`;

function poison(t: string, id: string): Event {
  return { ...tokenEvent(t, 0), event_id: id, content_json: TOO_DEEP };
}

test('a refused event is isolated: the rest is stored in order, the event dead-lettered, a notice in its place', async () => {
  await using stack = await startStack({ testLoosenValidation: new Set(['json-depth']) });
  const [t, other] = [randomName('t-'), randomName('t-')];
  const sub = await stack.ws();
  sub.subscribe('s', t);
  await sub.waitFor((f) => f.type === 'live');

  // One request, so one batch: two threads, the refused event in the middle of one.
  await stack.client.publish(
    [
      tokenEvent(t, 1),
      tokenEvent(other, 1),
      tokenEvent(t, 2),
      poison(t, 'bad-1'),
      tokenEvent(other, 2),
      tokenEvent(t, 4),
      tokenEvent(t, 5),
    ],
    'ACCEPTED',
  );
  // A PERSISTED producer learns which event was refused and why; the others get their seqs.
  const acks = await stack.client.publish(
    [tokenEvent(t, 6), poison(t, 'bad-2'), tokenEvent(t, 8)],
    'PERSISTED',
  );
  assert.deepEqual(
    acks.map((a) => [a.event_id, a.seq, a.rejected !== '']),
    [
      ['e6', 6, false],
      ['bad-2', 0, true],
      ['e8', 8, false],
    ],
  );
  assert.match(acks[1]?.rejected ?? '', /stack depth limit exceeded/);

  const rows = await threadRows(stack.db, t);
  assert.equal(expectGapFree(rows.map((r) => r.seq)), 8);
  const ids = rows.map((r) => r.event_id);
  assert.deepEqual(
    ids.filter((id) => !id.startsWith('rejected_')),
    ['e1', 'e2', 'e4', 'e5', 'e6', 'e8'],
  );
  assert.equal(ids.indexOf('e4'), 3, "the notice takes the refused event's place");
  assert.deepEqual(
    (await threadRows(stack.db, other)).map((r) => r.event_id),
    ['e1', 'e2'],
  );
  const notices = rows.filter((r) => r.event_id.startsWith('rejected_'));
  assert.deepEqual(
    notices.map((n) => [n.seq, (n.content as { event_id: string }).event_id]),
    [
      [3, 'bad-1'],
      [7, 'bad-2'],
    ],
  );
  const { rows: dead } = await stack.db.query<{
    event_id: string;
    sqlstate: string;
    notice_seq: string;
    content: string;
  }>(
    'SELECT event_id, sqlstate, notice_seq, content FROM dead_letters WHERE thread_id = $1 ORDER BY notice_seq',
    [t],
  );
  assert.deepEqual(
    dead.map((d) => [d.event_id, d.sqlstate, Number(d.notice_seq)]),
    [
      ['bad-1', '54001', 3],
      ['bad-2', '54001', 7],
    ],
  );
  assert.equal(dead[0]?.content, TOO_DEEP, 'the refused text is kept as it came');

  // Subscribers see the notice where the event would have been, with the reason.
  await sub.waitFor((f) => f.type === 'event' && f.event.seq === 8);
  const seen = sub.events('s');
  assert.deepEqual(
    seen.map((e) => e.seq),
    [1, 2, 3, 4, 5, 6, 7, 8],
  );
  const notice = seen[2] as WireEvent;
  assert.equal(notice.event_type, REJECTED_EVENT_TYPE);
  assert.equal(notice.run_id, 'run-1');
  assert.equal(notice.category, 'message');
  const content = notice.content as { event_id: string; reason: string; sqlstate: string };
  assert.equal(content.event_id, 'bad-1');
  assert.equal(content.sqlstate, '54001');

  // A retry of a refused event is refused again, with no second notice; the log goes on.
  const [again] = await stack.client.publish([poison(t, 'bad-1')], 'PERSISTED');
  assert.equal(again?.seq, 0);
  assert.match(again?.rejected ?? '', /stack depth/);
  // Again, identical: JetStream drops it as a duplicate of that message, and the lookup finds
  // the dead letter at the offset of the first message refused. It answers all the same.
  const [twice] = await stack.client.publish([poison(t, 'bad-1')], 'PERSISTED', 20_000);
  assert.deepEqual([twice?.seq, twice?.duplicate], [0, true]);
  assert.match(twice?.rejected ?? '', /stack depth/);
  const [next] = await stack.client.publish([tokenEvent(t, 9)], 'PERSISTED');
  assert.equal(next?.seq, 9);

  // A replay of the whole log (a persister restarted from an old checkpoint) stores nothing new.
  await stack.broker.close();
  await stack.db.query('UPDATE log_partitions SET last_offset = 0 WHERE stream = $1', [
    stack.config.streamName,
  ]);
  await using replay = await startBroker(stack.config, createLogger(stack.config.logLevel));
  const { rows: stream } = await stack.db.query<{ n: string }>('SELECT count(*) AS n FROM run_events');
  await waitFor(() => (replay.persister?.position ?? 0) >= 4, {
    what: 'the replay to reach the last message',
  });
  assert.equal(replay.persister?.storedCount, 0);
  assert.equal(replay.persister?.rejectedCount, 3, 'bad-1 twice and bad-2 are refused again');
  const { rows: after } = await stack.db.query<{ n: string }>('SELECT count(*) AS n FROM run_events');
  assert.equal(after[0]?.n, stream[0]?.n, 'nothing new stored by the replay');
  assert.equal((await stack.db.query('SELECT 1 FROM dead_letters WHERE thread_id = $1', [t])).rowCount, 2);
});

test('a copy of a stored event that Postgres would refuse is a duplicate: not refused, not dead-lettered', async () => {
  // Past JetStream's duplicate window, a copy of a stored event whose data Postgres refuses (only
  // a forged log message can carry it: ingest caps the depth) reaches the persister in a batch
  // with new events. The copy keeps its seq; nothing is counted or logged as refused.
  await using stack = await startStack({
    duplicateWindowMs: 1_000,
    testLoosenValidation: new Set(['json-depth']),
  });
  const t = randomName('t-');
  const [first] = await stack.client.publish([tokenEvent(t, 1)], 'PERSISTED');
  assert.equal(first?.seq, 1);
  await new Promise((r) => setTimeout(r, 1_600));
  const acks = await stack.client.publish(
    [{ ...tokenEvent(t, 1), content_json: TOO_DEEP }, tokenEvent(t, 2), tokenEvent(t, 3)],
    'PERSISTED',
  );
  assert.deepEqual(
    acks.map((a) => [a.seq, a.rejected ?? '']),
    [
      [1, ''],
      [2, ''],
      [3, ''],
    ],
  );
  assert.equal(stack.broker.persister?.rejectedCount, 0, 'nothing was refused');
  assert.equal((await stack.db.query('SELECT 1 FROM dead_letters WHERE thread_id = $1', [t])).rowCount, 0);
  assert.deepEqual(
    (await threadRows(stack.db, t)).map((r) => r.seq),
    [1, 2, 3],
  );
});
