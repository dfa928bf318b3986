// W3C traceparent: a valid one on a producer's gRPC call is kept in each event's metadata
// (an event's own wins), stored, and delivered to subscribers; an invalid one is ignored.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import type { Event } from '../src/client/ingest-client.js';
import { parseTraceparent, withTraceparent } from '../src/domain/trace.js';
import { tokenEvent } from './helpers/events.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

const TP = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

describe('the traceparent rules', () => {
  test('valid values are kept (lower-cased), anything else ignored', () => {
    assert.equal(parseTraceparent(TP), TP);
    assert.equal(parseTraceparent(` ${TP.toUpperCase()} `), TP);
    for (const bad of [
      undefined,
      '',
      'garbage',
      `ff${TP.slice(2)}`,
      '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
      '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01',
      `${TP}-extra`,
    ]) {
      assert.equal(parseTraceparent(bad), undefined, String(bad));
    }
  });

  test('added first to the metadata text, unless the event has its own', () => {
    assert.equal(withTraceparent('{}', TP), `{"traceparent":"${TP}"}`);
    assert.deepEqual(JSON.parse(withTraceparent(' { } ', TP)), { traceparent: TP });
    assert.equal(withTraceparent('{"id":"m1", "n": 2}', TP), `{"traceparent":"${TP}","id":"m1", "n": 2}`);
    const own = '{"traceparent":"00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01"}';
    assert.equal(withTraceparent(own, TP), own);
    // The key's text elsewhere (a value, a nested object) is not the event's own.
    const nested = '{"note":"traceparent","x":{"traceparent":"y"}}';
    assert.deepEqual(JSON.parse(withTraceparent(nested, TP)), {
      traceparent: TP,
      note: 'traceparent',
      x: { traceparent: 'y' },
    });
  });
});

describe('through a broker', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack();
  });
  after(async () => {
    await stack[Symbol.asyncDispose]();
  });

  const publish = (events: Event[], traceparent: string): Promise<void> =>
    new Promise((resolve, reject) => {
      const md = new grpc.Metadata();
      md.set('traceparent', traceparent);
      stack.client.raw.Publish({ events, ack: 'PERSISTED' }, md, (err) => (err ? reject(err) : resolve()));
    });

  test('stored in the event metadata and delivered to subscribers, on Publish and PublishStream', async () => {
    const t = randomName('tp-');
    const ws = await stack.ws();
    ws.subscribe('s', t);
    await ws.waitFor((f) => f.type === 'live' && f.id === 's');

    await publish([tokenEvent(t, 1), tokenEvent(t, 2, { metadata_json: '{"id":"m1"}' })], TP);
    await publish([tokenEvent(t, 3)], 'not-a-traceparent');
    const own = '00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01';
    await publish([tokenEvent(t, 4, { metadata_json: JSON.stringify({ traceparent: own }) })], TP);
    const md = new grpc.Metadata();
    md.set('traceparent', TP);
    const stream = stack.client.raw.PublishStream(md);
    await new Promise<void>((resolve, reject) => {
      stream.on('data', () => {
        stream.end();
        resolve();
      });
      stream.on('error', reject);
      stream.write({ events: [tokenEvent(t, 5)], ack: 'PERSISTED' });
    });

    const expected = [
      { traceparent: TP },
      { traceparent: TP, id: 'm1' },
      {},
      { traceparent: own },
      { traceparent: TP },
    ];
    const { rows } = await stack.db.query<{ metadata: unknown }>(
      'SELECT metadata FROM run_events WHERE thread_id = $1 ORDER BY seq',
      [t],
    );
    assert.deepEqual(
      rows.map((r) => r.metadata),
      expected,
    );
    await ws.waitFor((f) => f.type === 'event' && f.event.seq === 5);
    assert.deepEqual(
      ws.events('s').map((e) => e.metadata),
      expected,
    );
  });
});
