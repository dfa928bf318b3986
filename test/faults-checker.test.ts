// The fault suite's checker (test/faults/checker.ts) counts what it claims to: a lost, a
// duplicated, a skipped or a reordered event each show up, and a refused event's notice
// stands in for it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  type AckedEvent,
  checkThread,
  REJECTED_EVENT_TYPE,
  type SeenEvent,
  total,
} from './faults/checker.js';

const ev = (seq: number, id: string): SeenEvent => ({
  seq,
  event_id: id,
  event_type: 'ai_chunk',
  content: null,
});
const acked = (ids: string[]): Map<string, AckedEvent> =>
  new Map(ids.map((id) => [id, { i: Number(id.slice(1)), seq: 0 }]));
const clean = [ev(1, 'e0'), ev(2, 'e1'), ev(3, 'e2')];

test('a clean thread counts nothing', () => {
  const r = checkThread({
    thread: 't',
    acked: acked(['e0', 'e1', 'e2']),
    stored: clean,
    live: clean,
    catchUp: clean,
  });
  assert.equal(total(r.store) + total(r.live) + total(r.catchUp), 0);
  assert.equal(r.acked, 3);
});

test('lost, duplicated, gaps and out-of-order are each counted where they happen', () => {
  const stored = [ev(1, 'e0'), ev(2, 'e2'), ev(4, 'e1'), ev(5, 'e2')];
  const live = [ev(1, 'e0'), ev(2, 'e2'), ev(2, 'e2'), ev(5, 'e2')];
  const r = checkThread({ thread: 't', acked: acked(['e0', 'e1', 'e2', 'e3']), stored, live, catchUp: [] });
  assert.equal(r.store.lost, 1, 'e3 acked, never stored');
  assert.equal(r.store.duplicated, 1, 'e2 stored twice');
  assert.equal(r.store.gaps, 1, 'seq 3 missing');
  assert.equal(r.store.outOfOrder, 1, 'e1 stored after e2');
  assert.equal(r.live.duplicated, 1, 'seq 2 delivered twice');
  assert.equal(r.live.gaps, 1, 'live jumped from 2 to 5');
  assert.equal(r.live.lost, 1, 'seq 4 never delivered live');
  assert.equal(r.catchUp.lost, 4, 'catch-up delivered nothing');
});

test('a PERSISTED ack naming another seq is out of order; a notice stands for the refused event', () => {
  const notice: SeenEvent = {
    seq: 2,
    event_id: 'rejected_x',
    event_type: REJECTED_EVENT_TYPE,
    content: { event_id: 'p1' },
  };
  const stored = [ev(1, 'e0'), notice, ev(3, 'e2')];
  const a = acked(['e0', 'p1', 'e2']);
  a.set('e2', { i: 2, seq: 7 });
  const r = checkThread({ thread: 't', acked: a, stored, live: stored, catchUp: stored });
  assert.equal(r.store.lost, 0);
  assert.equal(r.rejected, 1);
  assert.equal(r.store.outOfOrder, 1);
});
