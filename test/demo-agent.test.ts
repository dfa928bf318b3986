// The demo agent publishes through @runstream/client's streaming Publisher: a run is stored
// whole, in order, with its producer-chosen ids; and a subscriber's cancel request reaches it
// as a control on its PublishStream, after which it ends the run as `cancelled`.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HistoryClient, subscribe } from '@runstream/client';
import WebSocket from 'ws';
import { runDemo, type ScriptEvent, type ScriptRun } from '../src/cli/demo-agent.js';
import { randomName, startStack, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

function script(tokens: number): ScriptRun {
  const chunk = (i: number): ScriptEvent => ({
    event_type: 'ai_chunk',
    category: 'message',
    content: { content: `t${i} ` },
    metadata: { id: 'msg-a' },
  });
  return {
    source: 'test',
    events: [
      { event_type: 'run_start', category: 'lifecycle', content: {}, metadata: {} },
      ...Array.from({ length: tokens }, (_, i) => chunk(i)),
      { event_type: 'run_end', category: 'lifecycle', content: { status: 'success' }, metadata: {} },
    ],
  };
}

test('a demo run is stored whole and in order; a cancel request ends the next one as cancelled', async () => {
  await using stack = await startStack();
  const thread = randomName('demo-');
  const history = new HistoryClient({ url: stack.httpUrl });
  const log: string[] = [];
  const base = { target: stack.grpcTarget, threadId: thread, intervalMs: 0, log: (l: string) => log.push(l) };

  await runDemo({ ...base, runs: 1, script: [script(5)] }, new AbortController().signal);
  // Acknowledged at ACCEPTED: wait for the persister to have stored the run.
  const rows = await waitFor(
    async () => {
      const r = await threadRows(stack.db, thread);
      return r.length === 7 ? r : undefined;
    },
    { timeoutMs: 60_000, what: 'the first run stored' },
  );
  assert.deepEqual(
    rows.map((r) => r.seq),
    [1, 2, 3, 4, 5, 6, 7],
  );
  const runId = rows[0]?.run_id as string;
  assert.deepEqual(
    rows.map((r) => r.event_id),
    Array.from({ length: 7 }, (_, i) => `${runId}-${String(i + 1).padStart(4, '0')}`),
  );
  assert.equal((await history.getRun(thread, runId)).status, 'success');

  // A run far longer than the test: cancel it as soon as it has started.
  const sub = subscribe({ url: stack.wsUrl, threadId: thread, afterSeq: 7, WebSocket });
  const demo = runDemo({ ...base, runs: 1, script: [script(5000)] }, new AbortController().signal);
  let second: string | undefined;
  for await (const item of sub) {
    if (item.type === 'event' && item.event.event_type === 'run_start') {
      second = item.event.run_id;
      break;
    }
  }
  assert.ok(second);
  await history.cancelRun(thread, second, 'stop the demo');
  await demo;
  // The demo publishes at ACCEPTED: its run_end is in the log, and soon in Postgres.
  const runId2 = second;
  await waitFor(async () => (await history.getRun(thread, runId2)).status === 'cancelled', {
    timeoutMs: 60_000,
    what: 'the run cancelled',
  });
  assert.ok(log.some((l) => l.includes('cancel requested (stop the demo)')));
  assert.ok(log.some((l) => l.includes(`run ${second} (test) on ${thread}: cancelled`)));
});
