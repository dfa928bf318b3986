// One run lifecycle (domain/run-lifecycle.ts, kept in `runs` by the persister): every
// surface that reports a run's state gives the same answer, for the sequences where the
// old readers disagreed. History over HTTP and gRPC (GetRun, ListRuns), the LangGraph run
// route and join, cancel (v1 and the LangGraph SDK's client.runs.cancel), and run
// subscriptions on WebSocket, SSE and gRPC. Real broker, nats-server and Postgres.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Client } from '@langchain/langgraph-sdk';
import type { Event } from '../src/client/ingest-client.js';
import { SubscriberClient } from '../src/client/subscriber-client.js';
import {
  classify,
  langGraphStatus,
  RUN_STATUSES,
  type RunStatusName,
  statusWord,
} from '../src/domain/run-lifecycle.js';
import { HistoryClient } from '../src/history/client.js';
import { ev, http } from './helpers/history.js';
import { type SseBlock, SseClient } from './helpers/sse-client.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

let stack: Stack;
let history: HistoryClient;
let subscriber: SubscriberClient;
let langgraph: Client;

before(async () => {
  stack = await startStack();
  history = new HistoryClient(stack.grpcTarget);
  subscriber = new SubscriberClient(stack.grpcTarget);
  langgraph = new Client({ apiUrl: stack.httpUrl, apiKey: null });
});
after(async () => {
  history.close();
  subscriber.close();
  await stack[Symbol.asyncDispose]();
});

let n = 0;
const life = (t: string, run: string, type: string, content: unknown = {}): Event =>
  ev(t, run, ++n, { type, category: 'LIFECYCLE', content });
const chunk = (t: string, run: string): Event => ev(t, run, ++n);

/** What every surface says about the run: the same word (LangGraph's own vocabulary aside). */
interface Answers {
  historyHttp: string;
  historyList: string;
  historyGrpc: string;
  langGraph: string;
}

async function answers(t: string, run: string): Promise<Answers> {
  const one = await http<{ status: string }>(`${stack.httpUrl}/v1/threads/${t}/runs/${run}`);
  assert.equal(one.status, 200, JSON.stringify(one.body));
  const list = await http<{ runs: { run_id: string; status: string }[] }>(
    `${stack.httpUrl}/v1/threads/${t}/runs`,
  );
  const grpcRun = await history.getRun({ thread_id: t, run_id: run });
  const lg = await http<{ status: string }>(`${stack.httpUrl}/threads/${t}/runs/${run}`);
  assert.equal(lg.status, 200, JSON.stringify(lg.body));
  return {
    historyHttp: one.body.status,
    historyList: list.body.runs.find((r) => r.run_id === run)?.status ?? 'missing',
    historyGrpc: String(grpcRun.status).replace('RUN_STATUS_', '').toLowerCase(),
    langGraph: lg.body.status,
  };
}

function expectEverywhere(a: Answers, status: RunStatusName, why: string): void {
  assert.deepEqual(
    a,
    { historyHttp: status, historyList: status, historyGrpc: status, langGraph: langGraphStatus(status) },
    why,
  );
}

/** How each run subscription (from seq 0) answers: its events' seqs, then `live` or the run's end. */
interface Delivery {
  seqs: number[];
  end: { seq: number; status: string } | undefined;
}

async function wsDelivery(t: string, run: string, head: number): Promise<Delivery> {
  const c = await stack.ws();
  c.sendRaw({ type: 'subscribe', id: 's', thread_id: t, run_id: run, after_seq: 0 });
  const last = await c.waitFor(
    (f) => f.id === 's' && (f.type === 'end' || (f.type === 'live' && f.seq >= head)),
  );
  const seqs = c.events('s').map((e) => e.seq);
  await c.close();
  return { seqs, end: last.type === 'end' ? { seq: last.seq, status: last.status } : undefined };
}

async function sseDelivery(t: string, run: string, head: number): Promise<Delivery> {
  const s = await SseClient.open(`${stack.httpUrl}/v1/threads/${t}/stream?run_id=${run}&after_seq=0`);
  // A control frame's data has a "type" key; a stored event's (which may be named `end`) never does.
  const control = (b: SseBlock) => {
    const data = JSON.parse(b.data as string) as { type?: string; seq: number; status: string };
    return data.type === undefined ? undefined : data;
  };
  const last = await s.waitFor((b) => {
    const c = b.data === undefined ? undefined : control(b);
    return c?.type === 'end' || (c?.type === 'live' && c.seq >= head);
  });
  s.close();
  const seqs = s.events.filter((b) => control(b) === undefined).map((b) => Number(b.id));
  const end = control(last);
  return { seqs, end: end?.type === 'end' ? { seq: end.seq, status: end.status } : undefined };
}

async function grpcDelivery(t: string, run: string, head: number): Promise<Delivery> {
  const sub = subscriber.subscribe({ thread_id: t, run_id: run, after_seq: 0 });
  const last = await sub.waitFor((r) => r.end != null || (r.live != null && Number(r.live.seq) >= head));
  sub.call.cancel();
  await sub.ended;
  return {
    seqs: sub.events.map((e) => Number(e.seq)),
    end: last.end ? { seq: Number(last.end.seq), status: last.end.status } : undefined,
  };
}

async function deliveries(t: string, run: string, head: number): Promise<Delivery[]> {
  return [await wsDelivery(t, run, head), await sseDelivery(t, run, head), await grpcDelivery(t, run, head)];
}

/** The LangGraph join of a run from its start: the events it streams, by name. */
async function joinEvents(t: string, run: string, o: { until: number }): Promise<string[]> {
  const s = await SseClient.open(`${stack.httpUrl}/threads/${t}/runs/${run}/stream`, {
    'last-event-id': '-1',
  });
  await Promise.race([
    s.ended,
    s
      .waitFor((b) => b.id !== undefined && Number(b.id) >= o.until)
      .then(() => new Promise((r) => setTimeout(r, 300))),
  ]);
  s.close();
  return s.events.map((b) => b.event as string);
}

async function cancelV1(t: string, run: string): Promise<{ status: number; code?: string }> {
  const res = await fetch(`${stack.httpUrl}/v1/threads/${t}/runs/${run}/cancel`, { method: 'POST' });
  const text = await res.text();
  const code = text === '' ? undefined : (JSON.parse(text) as { error?: { code: string } }).error?.code;
  return { status: res.status, ...(code === undefined ? {} : { code }) };
}

test('restarted after an interrupt: running everywhere, delivered whole, cancellable; then failed: error everywhere', async () => {
  const t = randomName('lc-');
  const r = 'r-restart';
  const acks = await stack.client.publish(
    [life(t, r, 'run_start'), chunk(t, r), life(t, r, 'interrupted'), life(t, r, 'run_start'), chunk(t, r)],
    'PERSISTED',
  );
  assert.deepEqual(
    acks.map((a) => a.seq),
    [1, 2, 3, 4, 5],
  );
  expectEverywhere(await answers(t, r), 'running', 'a start after the interrupt re-opens the run');
  for (const d of await deliveries(t, r, 5)) {
    assert.deepEqual(
      d,
      { seqs: [1, 2, 3, 4, 5], end: undefined },
      'a running run’s subscription does not end',
    );
  }
  // Cancel: the run is running, so the request is taken (v1 and the LangGraph SDK).
  assert.deepEqual(await cancelV1(t, r), { status: 202 });
  await langgraph.runs.cancel(t, r);

  // The agent then fails: `end {"status":"failed"}` is an error, on every surface.
  const [endAck] = await stack.client.publish([life(t, r, 'end', { status: 'failed' })], 'PERSISTED');
  const endSeq = endAck?.seq as number;
  expectEverywhere(await answers(t, r), 'error', 'end {"status":"failed"}');
  for (const d of await deliveries(t, r, endSeq)) {
    assert.equal(d.end?.seq, endSeq);
    assert.equal(d.end?.status, 'error');
    assert.equal(d.seqs.at(-1), endSeq, 'the terminal event is delivered before the end');
    assert.ok(d.seqs.includes(4) && d.seqs.includes(5), 'the restarted part is delivered');
  }
  assert.deepEqual(await cancelV1(t, r), { status: 409, code: 'run_ended' });
  await assert.rejects(langgraph.runs.cancel(t, r), /409/);
  // The join streams the run to its end and says it failed (LangGraph's error part, then end).
  const parts = await joinEvents(t, r, { until: endSeq });
  assert.equal(parts.at(-1), 'end');
  assert.ok(parts.includes('error'), JSON.stringify(parts));
});

test('a single end {"status": …}: its word is the status everywhere; cancelled is interrupted in LangGraph words', async () => {
  const t = randomName('lc1-');
  const cases: [string, unknown, RunStatusName][] = [
    ['end', { status: 'failed' }, 'error'],
    ['end', { status: 'timeout' }, 'error'],
    ['end', { status: 'success' }, 'success'],
    ['end', {}, 'success'],
    ['run_end', { status: 'cancelled' }, 'cancelled'],
    ['error', { message: 'boom' }, 'error'],
    ['cancelled', {}, 'cancelled'],
    ['interrupted', {}, 'interrupted'],
  ];
  for (const [i, [type, content, status]] of cases.entries()) {
    const r = `r${i}`;
    const [ack] = await stack.client.publish([life(t, r, type, content)], 'PERSISTED');
    expectEverywhere(await answers(t, r), status, `${type} ${JSON.stringify(content)}`);
    const head = ack?.seq as number;
    for (const d of await deliveries(t, r, head)) {
      assert.deepEqual(d, { seqs: [head], end: { seq: head, status } }, `${type} ${JSON.stringify(content)}`);
    }
    assert.deepEqual(await cancelV1(t, r), { status: 409, code: 'run_ended' });
  }
});

test('the latest start or terminal event wins; other events leave a pending run running', async () => {
  const t = randomName('lc2-');
  const at = async (r: string, events: Event[], status: RunStatusName) => {
    await stack.client.publish(events, 'PERSISTED');
    expectEverywhere(await answers(t, r), status, `${r}`);
  };
  await at('p', [life(t, 'p', 'run_pending')], 'pending');
  await at('p', [chunk(t, 'p')], 'running');
  await at('q', [chunk(t, 'q')], 'running');
  await at('q', [life(t, 'q', 'end'), life(t, 'q', 'error')], 'error');
  await at('q', [life(t, 'q', 'run_start')], 'running');
  await at('q', [life(t, 'q', 'run_pending')], 'running');
  await at('q', [life(t, 'q', 'cancelled'), chunk(t, 'q')], 'cancelled');
  const run = await history.getRun({ thread_id: t, run_id: 'q' });
  // The run ended at its last terminal event; the chunk after it is a straggler.
  assert.equal(Number(run.end_seq), Number(run.last_seq) - 1);
});

test('a cancel request says nothing of the run: a pending run stays pending, a running one running', async () => {
  const t = randomName('lc3-');
  await stack.client.publish([life(t, 'p', 'run_pending')], 'PERSISTED');
  assert.deepEqual(await cancelV1(t, 'p'), { status: 202 });
  await stack.client.publish([chunk(t, 'other')], 'PERSISTED'); // the request is stored before this
  expectEverywhere(await answers(t, 'p'), 'pending', 'after cancel_requested');
  const run = await history.getRun({ thread_id: t, run_id: 'p' });
  assert.equal(Number(run.event_count), 2, 'the cancel_requested event is the run’s');
  // Still pending: it can be cancelled again, and a start makes it run.
  assert.deepEqual(await cancelV1(t, 'p'), { status: 202 });
  await stack.client.publish([life(t, 'p', 'run_start')], 'PERSISTED');
  expectEverywhere(await answers(t, 'p'), 'running', 'started');
});

test('classify and statusWord: the table in docs/protocol.md', () => {
  assert.deepEqual(RUN_STATUSES, ['pending', 'running', 'success', 'error', 'interrupted', 'cancelled']);
  const rows: [string, string, string, string][] = [
    ['lifecycle', 'run_start', '{}', 'start'],
    ['lifecycle', 'metadata', '{}', 'start'],
    ['lifecycle', 'run_pending', '{}', 'pending'],
    ['lifecycle', 'end', '{"status":"FAILED"}', 'error'],
    ['lifecycle', 'end', '{"status":"aborted"}', 'cancelled'],
    ['lifecycle', 'end', '{"status":"interrupt"}', 'interrupted'],
    ['lifecycle', 'end', '"not an object"', 'success'],
    ['lifecycle', 'run_error', '{}', 'error'],
    ['lifecycle', 'run_interrupted', '{}', 'interrupted'],
    ['lifecycle', 'cancel_requested', '{}', 'neutral'],
    ['message', 'end', '{"status":"failed"}', 'other'],
    ['trace', 'run_start', '{}', 'other'],
  ];
  for (const [category, type, content, expected] of rows) {
    const s = classify(category, type, content);
    assert.equal(s.kind === 'terminal' ? s.status : s.kind, expected, `${category} ${type} ${content}`);
  }
  assert.equal(statusWord(42), 'success');
  assert.equal(langGraphStatus('cancelled'), 'interrupted');
});
