// `npm run tail` follows a thread through the client package's resuming subscriber: every
// event once, in seq order, then the live marker; a refused start is an error.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { tail } from '../src/cli/tail.js';
import { tokenEvent } from './helpers/events.js';
import { randomName, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

test('tail prints each event once and the live marker, and refuses a cursor past the head', async () => {
  await using stack = await startStack();
  const thread = randomName('tail-');
  await stack.client.publish(
    Array.from({ length: 5 }, (_, i) => tokenEvent(thread, i + 1)),
    'PERSISTED',
  );
  const lines: string[] = [];
  const stop = new AbortController();
  const done = tail(
    {
      url: stack.wsUrl,
      threadId: thread,
      afterSeq: 2,
      json: false,
      out: (l) => lines.push(l),
      note: () => {},
    },
    stop.signal,
  );
  await waitFor(() => lines.some((l) => l.startsWith('-- live')), { timeoutMs: 60_000 });
  stop.abort();
  assert.equal(await done, 5);
  assert.deepEqual(lines, [
    '#3 run-1 ai_chunk: {"i":3}',
    '#4 run-1 ai_chunk: {"i":4}',
    '#5 run-1 ai_chunk: {"i":5}',
    '-- live at #5 --',
  ]);

  await assert.rejects(
    tail(
      { url: stack.wsUrl, threadId: thread, afterSeq: 9, json: false, out: () => {}, note: () => {} },
      new AbortController().signal,
    ),
    /cursor_ahead/,
  );
});
