// GET /metrics on a real stack: after publishing and subscribing, the counters equal what
// was done (requests and events by ack level and outcome, batches, subscriptions and
// connections by transport, auth refusals), and the gauges read the node's state.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { SignJWT } from 'jose';
import { IngestClient } from '../src/client/ingest-client.js';
import { WsConnection } from '../src/client/ws-subscriber.js';
import { tokenEvent } from './helpers/events.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

/** The samples of an exposition text: `name{labels}` → value (labels as written). */
async function scrape(httpUrl: string): Promise<Map<string, number>> {
  const res = await fetch(`${httpUrl}/metrics`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  const samples = new Map<string, number>();
  for (const line of (await res.text()).split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    samples.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return samples;
}

function sample(samples: Map<string, number>, key: string): number {
  const v = samples.get(key);
  assert.notEqual(v, undefined, `no sample ${key}`);
  return v as number;
}

describe('an open broker', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack();
  });
  after(async () => {
    await stack[Symbol.asyncDispose]();
  });

  test('counts what was published and subscribed, and reads the node state', async () => {
    const t = randomName('t-');
    const sub = await stack.ws();
    sub.subscribe('s', t);
    await sub.waitFor((f) => f.type === 'live' && f.id === 's');
    const idle = await scrape(stack.httpUrl);
    assert.equal(sample(idle, 'runstream_subscriptions{transport="websocket"}'), 1);
    assert.equal(sample(idle, 'runstream_connections{transport="websocket"}'), 1);
    assert.equal(sample(idle, 'runstream_connections{transport="sse"}'), 0);
    assert.equal(idle.get('runstream_ingest_requests_total{ack="ACCEPTED",outcome="ok"}'), undefined);

    // 3 ACCEPTED requests of 5 events, 2 PERSISTED of 4, and one refused (a bad event id).
    for (let r = 0; r < 3; r++) {
      await stack.client.publish(
        Array.from({ length: 5 }, (_, k) => tokenEvent(t, r * 5 + k + 1)),
        'ACCEPTED',
      );
    }
    for (let r = 0; r < 2; r++) {
      await stack.client.publish(
        Array.from({ length: 4 }, (_, k) => tokenEvent(t, 15 + r * 4 + k + 1)),
        'PERSISTED',
      );
    }
    await assert.rejects(
      stack.client.publish([tokenEvent(t, 99, { event_id: 'bad id!' }), tokenEvent(t, 100)], 'ACCEPTED'),
    );
    await sub.waitFor((f) => f.type === 'event' && f.event.seq === 23);
    await waitFor(
      async () =>
        (await stack.db.query('SELECT 1 FROM run_events WHERE thread_id = $1', [t])).rowCount === 23,
    );

    const m = await scrape(stack.httpUrl);
    assert.equal(sample(m, 'runstream_ingest_requests_total{ack="ACCEPTED",outcome="ok"}'), 3);
    assert.equal(sample(m, 'runstream_ingest_events_total{ack="ACCEPTED",outcome="ok"}'), 15);
    assert.equal(sample(m, 'runstream_ingest_requests_total{ack="PERSISTED",outcome="ok"}'), 2);
    assert.equal(sample(m, 'runstream_ingest_events_total{ack="PERSISTED",outcome="ok"}'), 8);
    assert.equal(sample(m, 'runstream_ingest_requests_total{ack="ACCEPTED",outcome="invalid_argument"}'), 1);
    assert.equal(sample(m, 'runstream_ingest_events_total{ack="ACCEPTED",outcome="invalid_argument"}'), 2);
    // Every accepted request went to the log once; the refused one never did.
    assert.equal(sample(m, 'runstream_log_publish_seconds_count'), 5);
    // Every stored event was in exactly one batch; each batch is one commit.
    assert.equal(sample(m, 'runstream_persister_batch_events_sum'), 23);
    const batches = sample(m, 'runstream_persister_batch_events_count');
    assert.ok(batches >= 1 && batches <= 5, `${batches} batches`);
    assert.equal(sample(m, 'runstream_persister_commit_seconds_count'), batches);
    // Each batch was announced to this node, which delivered it to the subscriber.
    assert.equal(sample(m, 'runstream_persisted_to_delivered_seconds_count'), batches);
    assert.equal(sample(m, 'runstream_persister_lag_messages'), 0);
    assert.equal(sample(m, 'runstream_persister_position'), 5);
    assert.equal(sample(m, 'runstream_subscriptions{transport="websocket"}'), 1);
    assert.equal(sample(m, 'runstream_slow_consumer_cutoffs_total{transport="websocket"}'), 0);
    assert.equal(sample(m, 'runstream_fanout_feeds'), 2); // events and deletions of one thread
    assert.ok(sample(m, 'runstream_fanout_queued_bytes') >= 0);
    assert.ok(sample(m, 'runstream_fanout_held_bytes') >= 0);
    // Process and event-loop metrics (prom-client's defaults).
    assert.ok(sample(m, 'process_resident_memory_bytes') > 0);
    assert.ok(sample(m, 'nodejs_eventloop_lag_p99_seconds') >= 0);

    // An SSE stream counts as an SSE connection and subscription while it is open.
    const ac = new AbortController();
    const sse = await fetch(`${stack.httpUrl}/v1/threads/${t}/stream`, { signal: ac.signal });
    assert.equal(sse.status, 200);
    const withSse = await scrape(stack.httpUrl);
    assert.equal(sample(withSse, 'runstream_connections{transport="sse"}'), 1);
    ac.abort();
    await sub.close();
    await waitFor(async () => {
      const s = await scrape(stack.httpUrl);
      return (
        s.get('runstream_subscriptions{transport="websocket"}') === 0 &&
        s.get('runstream_subscriptions{transport="sse"}') === 0 &&
        s.get('runstream_connections{transport="websocket"}') === 0 &&
        s.get('runstream_connections{transport="sse"}') === 0
      );
    });
  });

  test('every metric the Grafana dashboard queries is exported', async () => {
    const dashboard = readFileSync(new URL('../../deploy/grafana-dashboard.json', import.meta.url), 'utf8');
    const queried = new Set(
      [...dashboard.matchAll(/\b((?:runstream|nodejs|process)_[a-z0-9_]+)/g)].map((m) => m[1]),
    );
    assert.ok(queried.size >= 10, `${queried.size} metrics queried`);
    const text = await (await fetch(`${stack.httpUrl}/metrics`)).text();
    const exported = new Set([...text.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1] as string));
    const series = (name: string) =>
      exported.has(name) || exported.has(name.replace(/_(bucket|sum|count)$/, ''));
    assert.deepEqual(
      [...queried].filter((n) => !series(n as string)),
      [],
    );
  });

  test('/metrics, /healthz and /readyz answer GET and HEAD, and refuse other methods with 405 and Allow', async () => {
    const head = await fetch(`${stack.httpUrl}/metrics`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    for (const path of ['/metrics', '/healthz', '/readyz']) {
      for (const method of ['POST', 'PUT', 'DELETE']) {
        const res = await fetch(`${stack.httpUrl}${path}`, { method });
        assert.equal(res.status, 405, `${method} ${path}`);
        assert.equal(res.headers.get('allow'), 'GET, HEAD', `${method} ${path}`);
        const body = (await res.json()) as { error?: { code?: string; message?: string } };
        assert.match(body.error?.message ?? '', new RegExp(`${method} not allowed`), JSON.stringify(body));
      }
      assert.equal((await fetch(`${stack.httpUrl}${path}`, { method: 'HEAD' })).status, 200, `HEAD ${path}`);
    }
  });
});

describe('a broker with authentication', () => {
  const SECRET = 'metrics-test-secret-of-at-least-32-bytes!';
  let stack: Stack;
  before(async () => {
    stack = await startStack({ jwtSecret: SECRET });
  });
  after(async () => {
    await stack[Symbol.asyncDispose]();
  });

  test('counts refused tokens and refused rights', async () => {
    const t = randomName('t-');
    const token = await new SignJWT({ threads: 'other-thread', scope: 'read publish' })
      .setProtectedHeader({ alg: 'HS256' })
      .setExpirationTime('5m')
      .sign(new TextEncoder().encode(SECRET));
    await assert.rejects(stack.client.publish([tokenEvent(t, 1)], 'ACCEPTED')); // no token
    const scoped = new IngestClient(stack.grpcTarget, { token });
    try {
      await assert.rejects(scoped.publish([tokenEvent(t, 1)], 'ACCEPTED')); // another thread
    } finally {
      scoped.close();
    }
    await assert.rejects(WsConnection.open(stack.wsUrl, { token: 'not-a-jwt' }));
    const m = await scrape(stack.httpUrl);
    assert.equal(sample(m, 'runstream_auth_refusals_total{reason="unauthenticated"}'), 2);
    assert.equal(sample(m, 'runstream_auth_refusals_total{reason="permission_denied"}'), 1);
    assert.equal(sample(m, 'runstream_auth_refusals_total{reason="token_expired"}'), 0);
    assert.equal(sample(m, 'runstream_ingest_requests_total{ack="ACCEPTED",outcome="unauthenticated"}'), 1);
    assert.equal(sample(m, 'runstream_ingest_requests_total{ack="ACCEPTED",outcome="permission_denied"}'), 1);
  });
});
