// A producer's own created_at text (Python's isoformat(): microseconds, an offset, or none)
// comes back exactly as given on History (HTTP and gRPC) and to subscribers (WebSocket, gRPC),
// while the instant it names orders runs' times; without one, the broker's time as before.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Event } from '../src/client/ingest-client.js';
import { SubscriberClient } from '../src/client/subscriber-client.js';
import type { WireEvent } from '../src/client/ws-subscriber.js';
import { timeTextMs } from '../src/domain/time-text.js';
import { HistoryClient } from '../src/history/client.js';
import { http } from './helpers/history.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

test('time texts: the ISO 8601 forms producers write are read to the millisecond; anything else is not', () => {
  const utc = (s: string) => Date.parse(s);
  const cases: [string, number | undefined][] = [
    ['2026-06-04T10:00:00.123456+00:00', utc('2026-06-04T10:00:00.123Z')],
    ['2026-06-04T10:00:00.123456', utc('2026-06-04T10:00:00.123Z')],
    ['2026-06-04T10:00:00', utc('2026-06-04T10:00:00.000Z')],
    ['2026-06-04 10:00', utc('2026-06-04T10:00:00.000Z')],
    ['2026-06-04T10:00:00.5Z', utc('2026-06-04T10:00:00.500Z')],
    ['2026-06-04T10:00:00.999999999z', utc('2026-06-04T10:00:00.999Z')],
    ['2026-06-04T10:00:00,25+05:30', utc('2026-06-04T04:30:00.250Z')],
    ['2026-06-04T10:00:00-0800', utc('2026-06-04T18:00:00.000Z')],
    ['2026-06-04T10:00:00+01', utc('2026-06-04T09:00:00.000Z')],
    ['2024-02-29T00:00:00Z', utc('2024-02-29T00:00:00.000Z')],
    ['0099-01-01T00:00:00Z', utc('0099-01-01T00:00:00.000Z')], // not 1999, as Date.UTC would read it
    ['2026-02-29T00:00:00Z', undefined],
    ['2026-13-01T00:00:00Z', undefined],
    ['2026-06-04T24:00:00Z', undefined],
    ['2026-06-04T10:60:00Z', undefined],
    ['2026-06-04T10:00:60Z', undefined],
    ['2026-06-04T10:00:00+24:00', undefined],
    ['2026-06-04', undefined],
    ['2026-06-04T10', undefined],
    ['2026-06-04T10:00:00.1234567890Z', undefined],
    [' 2026-06-04T10:00:00Z', undefined],
    ['2026-06-04T10:00:00Z\n', undefined],
    ['2026-06-04T10:00:00"Z', undefined],
    ['yesterday', undefined],
    ['', undefined],
  ];
  for (const [text, want] of cases) assert.equal(timeTextMs(text), want, text);
});

let stack: Stack;
let history: HistoryClient;
let subscriber: SubscriberClient;
before(async () => {
  stack = await startStack();
  history = new HistoryClient(stack.grpcTarget);
  subscriber = new SubscriberClient(stack.grpcTarget);
});
after(async () => {
  history.close();
  subscriber.close();
  await stack[Symbol.asyncDispose]();
});

const TEXTS = [
  '2026-06-04T10:00:00.123456+00:00', // datetime.now(timezone.utc).isoformat()
  '2026-06-04T10:00:01.000001', // a naive datetime: UTC
  '2026-06-04T12:00:02+02:00', // another offset, whole seconds
];

function ev(t: string, n: number, extra: Partial<Event>): Event {
  return {
    thread_id: t,
    run_id: 'r1',
    event_id: `e${n}`,
    event_type: n === 1 ? 'human_message' : 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ content: `m${n}` }),
    metadata_json: JSON.stringify({ id: `msg-${n}` }),
    ...extra,
  };
}

/** Events 1-3 with the texts, 4 with a Timestamp, 5 with no time. */
function events(t: string): Event[] {
  return [
    ...TEXTS.map((text, i) => ev(t, i + 1, { created_at_text: text })),
    ev(t, 4, { created_at: { seconds: 1_781_000_000, nanos: 456_000_000 } }),
    ev(t, 5, {}),
  ];
}

const RFC3339_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function checkTimes(times: string[], label: string): void {
  assert.deepEqual(times.slice(0, 4), [...TEXTS, new Date(1_781_000_000_456).toISOString()], label);
  assert.match(times[4] as string, RFC3339_MS, label);
}

test('a created_at text comes back exactly as given on History, to subscribers, and in the chat view', async () => {
  const t = randomName('time-');
  const all = events(t);
  await stack.client.publish(all.slice(0, 2), 'PERSISTED');

  const ws = await stack.ws();
  ws.subscribe('s', t);
  await ws.waitFor((f) => f.type === 'live' && f.id === 's');
  const grpcSub = subscriber.subscribe({ thread_id: t });
  await grpcSub.waitFor((r) => r.live != null);
  await stack.client.publish(all.slice(2), 'PERSISTED'); // 3-5 arrive live
  await ws.waitFor((f) => f.type === 'event' && f.event.seq === 5);
  await grpcSub.waitFor((r) => r.event?.seq === 5);

  const page = await http<{ events: WireEvent[] }>(`${stack.httpUrl}/v1/threads/${t}/events`);
  checkTimes(
    page.body.events.map((e) => e.created_at),
    'History over HTTP',
  );
  checkTimes(
    ws.events('s').map((e) => e.created_at),
    'WebSocket (catch-up and live)',
  );
  const grpcEvents = grpcSub.events;
  checkTimes(
    grpcEvents.map((e) => e.created_at_text),
    'gRPC Subscribe',
  );
  grpcSub.cancel();
  const byGrpc = await history.listEvents({ thread_id: t });
  checkTimes(
    byGrpc.events.map((e) => e.created_at_text),
    'gRPC History',
  );
  // The Timestamp carries the instant the text names, to the millisecond, on both gRPC services.
  const ms = (e: { created_at?: { seconds: number | string; nanos: number } | null }) =>
    Number(e.created_at?.seconds) * 1000 + (e.created_at?.nanos ?? 0) / 1e6;
  const instants = [
    Date.parse('2026-06-04T10:00:00.123Z'),
    Date.parse('2026-06-04T10:00:01.000Z'),
    Date.parse('2026-06-04T10:00:02.000Z'),
    1_781_000_000_456,
  ];
  assert.deepEqual(byGrpc.events.slice(0, 4).map(ms), instants);
  assert.deepEqual(grpcEvents.slice(0, 4).map(ms), instants);

  // The created_at column holds the instant (runs' times come from it); the text is kept beside it.
  const { rows } = await stack.db.query<{ ms: string; created_at_text: string | null }>(
    `SELECT (extract(epoch FROM created_at) * 1000)::int8 AS ms, created_at_text FROM run_events
      WHERE thread_id = $1 ORDER BY seq`,
    [t],
  );
  assert.deepEqual(
    rows.slice(0, 4).map((r) => [Number(r.ms), r.created_at_text]),
    instants.map((x, i) => [x, TEXTS[i] ?? null]),
  );
  assert.equal(rows[4]?.created_at_text, null);
  const run = await http<{ started_at: string }>(`${stack.httpUrl}/v1/threads/${t}/runs/r1`);
  assert.equal(run.body.started_at, '2026-06-04T10:00:00.123Z');

  // A chat message shows its first event's created_at, as History's events do.
  const chat = await http<{ messages: { id: string; created_at: string }[] }>(
    `${stack.httpUrl}/v1/threads/${t}/messages?view=chat`,
  );
  assert.deepEqual(
    chat.body.messages.slice(0, 3).map((m) => m.created_at),
    TEXTS,
  );
});

test('a bad created_at text is refused naming the field, and nothing of the request is stored', async () => {
  const t = randomName('time-');
  const good = ev(t, 1, { created_at_text: TEXTS[0] as string });
  const cases: [Partial<Event>, RegExp][] = [
    [{ created_at_text: 'yesterday' }, /events\[1\]\.created_at_text: must be an ISO 8601 date-time/],
    [{ created_at_text: '2026-02-30T00:00:00Z' }, /events\[1\]\.created_at_text/],
    [{ created_at_text: `2026-06-04T10:00:00.${'1'.repeat(60)}` }, /events\[1\]\.created_at_text/],
    [
      { created_at_text: '1969-12-31T23:59:59Z' },
      /events\[1\]\.created_at_text: must be between 1970 and 9999/,
    ],
    [
      { created_at_text: TEXTS[0] as string, created_at: { seconds: 1_780_000_000, nanos: 0 } },
      /events\[1\]\.created_at_text: cannot be given with created_at/,
    ],
  ];
  for (const [patch, message] of cases) {
    await assert.rejects(
      stack.client.publish([good, ev(t, 2, patch)], 'PERSISTED'),
      (err: Error & { code?: number }) => {
        assert.equal(err.code, 3, err.message); // INVALID_ARGUMENT
        assert.match(err.message, message);
        return true;
      },
    );
  }
  const page = await http<{ events: WireEvent[] }>(`${stack.httpUrl}/v1/threads/${t}/events`);
  assert.deepEqual(page.body.events, []);
});
