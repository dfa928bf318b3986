// The persister cannot be blocked by a foreign message on the log: anything that is not
// a well-formed log record is skipped (and logged), and the events after it are stored.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { Subjects } from '../src/log/subjects.js';
import { expectGapFree, randomName, startStack, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

test('junk published straight onto the log is skipped, and later events are stored in order', async () => {
  await using stack = await startStack();
  const t = randomName('t-');
  const subjects = new Subjects(stack.config.subjectPrefix);
  const good = {
    thread_id: t,
    run_id: 'run-1',
    event_id: 'x',
    event_type: 'ai_chunk',
    category: 'message',
    user_id: '',
    created_at: new Date().toISOString(),
    content_json: '{}',
    metadata_json: '{}',
  };
  const nc = await connect({ servers: stack.servers.nats.url });
  try {
    const js = jetstream(nc);
    for (const junk of [
      'not json',
      JSON.stringify({ ...good, event_id: 'j1', category: 'Bogus!' }),
      JSON.stringify({ ...good, event_id: 'j2', thread_id: 'has space' }),
      JSON.stringify({ ...good, event_id: 'j3', created_at: 'yesterday' }),
      JSON.stringify({ ...good, event_id: 'j4', content_json: 5 }),
    ]) {
      await js.publish(subjects.log(t, 'run-1'), junk);
    }
  } finally {
    await nc.close();
  }
  await stack.client.publish(
    [1, 2, 3].map((i) => ({
      thread_id: t,
      run_id: 'run-1',
      event_id: `e${i}`,
      event_type: 'ai_chunk',
      category: 'MESSAGE' as const,
      content_json: JSON.stringify({ i }),
    })),
    'PERSISTED',
  );
  await waitFor(async () => (await threadRows(stack.db, t)).length === 3, { what: 'the three good events' });
  const rows = await threadRows(stack.db, t);
  assert.equal(expectGapFree(rows.map((r) => r.seq)), 3);
  assert.deepEqual(
    rows.map((r) => r.event_id),
    ['e1', 'e2', 'e3'],
  );
});
