// Commit receipts only when a PERSISTED ack can wait for them (src/persist/receipt-wants.ts,
// the `"receipts":false` mark of src/log/log-batch.ts): ACCEPTED traffic makes the persister
// publish no receipts while its events are still announced; PERSISTED acks still complete
// with their seqs, also for a PERSISTED retry JetStream drops as a duplicate of an ACCEPTED
// original (no receipt ever comes for it: the waiter's lookup in Postgres answers it).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { startBroker } from '../src/broker.js';
import { IngestClient } from '../src/client/ingest-client.js';
import { EVENT_SEPARATOR } from '../src/log/announcements.js';
import { encodeLogMessages, readLogMessage } from '../src/log/log-batch.js';
import { createLogger } from '../src/logger.js';
import { MAX_WANTED_EVENTS, ReceiptWants } from '../src/persist/receipt-wants.js';
import { logRecord } from './helpers/records.js';
import { brokerConfig, randomName, startServers, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

const tokenEvent = (thread: string, id: string) => ({
  thread_id: thread,
  run_id: 'r',
  event_id: id,
  event_type: 'ai_chunk',
  category: 'MESSAGE' as const,
  content_json: JSON.stringify({ content: id }),
});

/** Counts, per thread, the receipts messages and the announced events seen on core NATS. */
function countAnnouncements(nc: NatsConnection, prefix: string) {
  const receipts = new Map<string, number>();
  const events = new Map<string, number>();
  const bump = (m: Map<string, number>, k: string, n: number) => m.set(k, (m.get(k) ?? 0) + n);
  nc.subscribe(`${prefix}.rcpt.>`, {
    callback: (_err, msg) => {
      bump(receipts, msg.subject.slice(`${prefix}.rcpt.`.length), 1);
    },
  });
  nc.subscribe(`${prefix}.ev.>`, {
    callback: (_err, msg) => {
      bump(events, msg.subject.slice(`${prefix}.ev.`.length), msg.string().split(EVENT_SEPARATOR).length);
    },
  });
  const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);
  return { receipts, events, receiptTotal: () => total(receipts), eventTotal: () => total(events) };
}

test('log messages of ACCEPTED requests are marked as wanting no receipts; others (and older ones) want them', () => {
  const rs = [logRecord('t', 'r', 'a'), logRecord('t', 'r', 'b', '{"k":"\\u00e9"}')];
  const [accepted] = encodeLogMessages(rs, 1 << 20, { receipts: false });
  const [persisted] = encodeLogMessages(rs, 1 << 20, { receipts: true });
  const [unsaid] = encodeLogMessages(rs, 1 << 20);
  assert.ok(accepted && persisted && unsaid);
  assert.match(accepted.body, /^\{"v":2,"receipts":false,"thread_id"/);
  assert.equal(persisted.body, unsaid.body, 'a PERSISTED message is written as before');
  assert.equal(accepted.msgId, persisted.msgId, 'the mark does not change the message id');
  assert.deepEqual(readLogMessage(accepted.body), { records: rs, receipts: false });
  assert.deepEqual(readLogMessage(persisted.body), { records: rs, receipts: true });
  // Written by earlier versions: a record array, a single record.
  assert.equal(readLogMessage(JSON.stringify(rs)).receipts, true);
  assert.equal(readLogMessage(JSON.stringify(rs[0])).receipts, true);
  // A marked message at the size limit still fits.
  const big = logRecord('t'.repeat(128), 'r'.repeat(128), 'e'.repeat(128), JSON.stringify('x'.repeat(3000)));
  const size = Buffer.byteLength((encodeLogMessages([big], 1 << 20)[0] as { body: string }).body);
  for (let max = size - 40; max < size + 40; max++) {
    let body: string | undefined;
    try {
      body = encodeLogMessages([big], max, { receipts: false })[0]?.body;
    } catch {
      continue; // refused as too big: fine, what matters is that nothing bigger goes out
    }
    assert.ok(Buffer.byteLength(body ?? '') <= max, `a marked body fits ${max} bytes`);
  }
});

test('receipt wants: a thread is announced with receipts only for wanted events, a redelivery is wanted again, old notes are forgotten past the cap', () => {
  const wants = new ReceiptWants(4);
  const receipt = (event_id: string) => ({ event_id, seq: 1, offset: 1 });
  wants.add([logRecord('t1', 'r', 'a'), logRecord('t1', 'r', 'b')]);
  assert.equal(wants.take('t1', [receipt('x')]), false, 'another event of the thread');
  assert.equal(wants.take('t2', [receipt('a')]), false, 'another thread');
  assert.equal(wants.take('t1', [receipt('x'), receipt('a')]), true);
  assert.equal(wants.size, 1);
  assert.equal(wants.take('t1', [receipt('a')]), false, 'taken once');
  wants.add([logRecord('t1', 'r', 'a')]); // read again (redelivered)
  assert.equal(wants.take('t1', [receipt('a'), receipt('b')]), true);
  assert.equal(wants.size, 0);
  // Two messages of one event read before either is committed (a deleted original the
  // persister drops, and the event published again after the delete): a receipt for each.
  wants.add([logRecord('t1', 'r', 'd')]);
  wants.add([logRecord('t1', 'r', 'd')]);
  assert.equal(wants.size, 2);
  assert.equal(wants.take('t1', [{ event_id: 'd', seq: 0, offset: 3 }]), true, 'the dropped original');
  assert.equal(wants.take('t1', [{ event_id: 'd', seq: 1, offset: 4 }]), true, 'the new event');
  assert.equal(wants.take('t1', [receipt('d')]), false);
  assert.equal(wants.size, 0);
  wants.add([logRecord('old', 'r', 'o1'), logRecord('old', 'r', 'o2')]);
  wants.add([logRecord('new', 'r', 'n1'), logRecord('new', 'r', 'n2'), logRecord('new', 'r', 'n3')]);
  assert.equal(wants.size, 3, 'the oldest thread forgotten');
  assert.equal(wants.take('old', [receipt('o1')]), false);
  assert.equal(wants.take('new', [receipt('n3')]), true);
  // A thread read again goes to the back: the one not read since is forgotten first.
  wants.add([logRecord('idle', 'r', 'i1')]);
  wants.add([logRecord('new', 'r', 'n4')]);
  wants.add([logRecord('late', 'r', 'l1')]);
  assert.equal(wants.take('idle', [receipt('i1')]), false, 'the idle thread forgotten');
  assert.equal(wants.take('new', [receipt('n1'), receipt('n4')]), true);
  assert.ok(MAX_WANTED_EVENTS >= 10_000);
});

test('ACCEPTED traffic publishes no commit receipts while its events are announced; a PERSISTED request still gets its seqs', async () => {
  await using stack = await startStack();
  const nc = await connect({ servers: stack.servers.nats.url });
  try {
    const seen = countAnnouncements(nc, stack.config.subjectPrefix);
    await nc.flush();
    const threads = Array.from({ length: 4 }, () => randomName('t-'));
    const PER_THREAD = 25;
    // One event per request, as token streams send them.
    await Promise.all(
      threads.map(async (th) => {
        for (let i = 0; i < PER_THREAD; i++)
          await stack.client.publish([tokenEvent(th, `a${i}`)], 'ACCEPTED');
      }),
    );
    await waitFor(() => seen.eventTotal() === threads.length * PER_THREAD, {
      timeoutMs: 30_000,
      what: 'every ACCEPTED event announced',
    });
    // The persister publishes a thread's receipts right after its events, on one connection:
    // any receipt of these commits has arrived by now.
    await nc.flush();
    assert.equal(seen.receiptTotal(), 0, 'no receipts for ACCEPTED traffic');

    const th = threads[0] as string;
    const acks = await stack.client.publish([tokenEvent(th, 'p1'), tokenEvent(th, 'p2')], 'PERSISTED');
    assert.deepEqual(
      acks.map((a) => [a.event_id, Number(a.seq), a.duplicate]),
      [
        ['p1', PER_THREAD + 1, false],
        ['p2', PER_THREAD + 2, false],
      ],
    );
    await waitFor(() => seen.receipts.get(th) === 1, { what: 'the PERSISTED request’s receipts' });
    assert.equal(seen.receiptTotal(), 1);
  } finally {
    await nc.close();
  }
});

test('a PERSISTED retry of an ACCEPTED event, dropped by JetStream as a duplicate before it is stored, is answered from Postgres with its seq', async () => {
  await using servers = await startServers();
  const config = brokerConfig(servers, {
    roles: new Set(['ingest', 'fanout'] as const),
    persistedAckTimeoutMs: 30_000,
  });
  const log = createLogger('warn');
  await using ingest = await startBroker(config, log);
  using client = new IngestClient(`127.0.0.1:${ingest.grpcPort}`);
  const nc = await connect({ servers: servers.nats.url });
  try {
    const seen = countAnnouncements(nc, config.subjectPrefix);
    await nc.flush();
    const th = randomName('t-');
    // No persister yet: the first attempt sits in the log, unstored.
    const [first] = await client.publish([tokenEvent(th, 'e1')], 'ACCEPTED');
    const retry = client.publish([tokenEvent(th, 'e1')], 'PERSISTED');
    retry.catch(() => undefined);
    // The retry's lookup finds nothing: wait until it is waiting on receipts, then store.
    await new Promise((r) => setTimeout(r, 300));
    await using persister = await startBroker({ ...config, roles: new Set(['persister'] as const) }, log);
    const [ack] = await retry;
    assert.equal(ack?.event_id, 'e1');
    assert.equal(Number(ack?.seq), 1);
    assert.equal(ack?.duplicate, true, 'JetStream dropped the retry');
    assert.equal(Number(ack?.offset), Number(first?.offset), 'the offset of the stored first attempt');
    await waitFor(() => seen.events.get(th) === 1, { what: 'the event announced' });
    await nc.flush();
    assert.equal(seen.receipts.get(th) ?? 0, 0, 'answered without a receipt');

    // The next PERSISTED request of the thread is answered by its receipt, with the next seq.
    const [next] = await client.publish([tokenEvent(th, 'e2')], 'PERSISTED');
    assert.equal(Number(next?.seq), 2);
    await waitFor(() => seen.receipts.get(th) === 1, { what: 'the receipt of e2' });
    assert.ok(persister);
  } finally {
    await nc.close();
  }
});
