// W3C traceparent: a valid one on a producer's gRPC call is kept in each event's metadata
// (an event's own wins), stored, and delivered to subscribers; an invalid one is ignored.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { trace } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
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

// The broker runs in this process: a tracer provider registered here sees its spans.
const spans = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));

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

  test('spans: a Publish call is a child of its traceparent, and the batch that stores it links to that trace', async () => {
    const t = randomName('tps-');
    spans.reset();
    await publish([tokenEvent(t, 1), tokenEvent(t, 2)], TP);
    const [traceId, parentId] = TP.split('-').slice(1, 3) as [string, string];
    const publishSpan = spans
      .getFinishedSpans()
      .find((s) => s.name === 'runstream.ingest.publish' && s.spanContext().traceId === traceId);
    assert.ok(publishSpan, 'a runstream.ingest.publish span in the producer’s trace');
    assert.equal(publishSpan.parentSpanContext?.spanId, parentId, 'a child of the producer’s span');
    assert.equal(publishSpan.attributes['runstream.events'], 2);
    const batch = spans
      .getFinishedSpans()
      .find(
        (s) => s.name === 'runstream.persist.batch' && s.links.some((l) => l.context.traceId === traceId),
      );
    assert.ok(batch, 'a runstream.persist.batch span linked to the producer’s trace');
    // Without a traceparent, a Publish span is the root of a trace of its own.
    spans.reset();
    await stack.client.publish([tokenEvent(t, 3)], 'PERSISTED');
    const own = spans.getFinishedSpans().find((s) => s.name === 'runstream.ingest.publish');
    assert.ok(own);
    assert.equal(own.parentSpanContext, undefined);
  });
});
