// Routing cancels to producers costs the broker no NATS subscription per run: a process
// listens to every run's control subject with one subscription, whatever its streams
// publish. With a subscription per run, a producer of a new run per request (10,000
// threads, one run each) made the broker and nats-server pay a SUB, a PING and an UNSUB
// for every request.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect } from '@nats-io/transport-node';
import { type Broker, startBroker } from '../src/broker.js';
import { IngestClient } from '../src/client/ingest-client.js';
import type { LogRecord } from '../src/domain/event.js';
import { ControlFeeds, StreamControls } from '../src/ingest/control.js';
import { Subjects } from '../src/log/subjects.js';
import { createLogger } from '../src/logger.js';
import { tokenEvent } from './helpers/events.js';
import { brokerConfig, randomName, type Servers, startServers } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

let servers: Servers;
let broker: Broker;
let client: IngestClient;
before(async () => {
  servers = await startServers({ own: true, monitor: true });
  const config = brokerConfig(servers);
  broker = await startBroker(config, createLogger(config.logLevel));
  client = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
});
after(async () => {
  client.close();
  await broker.close();
  await servers[Symbol.asyncDispose]();
});

/**
 * The broker's subscriptions to control subjects, from nats-server's /connz (the broker's
 * connection is named after the pid): only these, as the broker's other subscriptions (a
 * partition consumer reopened under load, say) may come and go meanwhile.
 */
async function controlSubscriptions(): Promise<string[]> {
  const res = await fetch(`${servers.nats.monitorUrl}/connz?subs=1&limit=1024`);
  const body = (await res.json()) as {
    connections: { name?: string; subscriptions_list?: string[] }[];
  };
  const mine = body.connections.filter((c) => c.name === `runstream-${process.pid}`);
  assert.equal(mine.length, 1, 'one NATS connection of the broker');
  return (mine[0]?.subscriptions_list ?? []).filter((subject) => subject.includes('.ctl.'));
}

/** Event `i` of run `run-<r>` of thread `t`. */
const ev = (t: string, r: number, i: number) => tokenEvent(t, i, { run_id: `run-${r}` });

test('a stream publishing 202 runs holds one control subscription, and a cancel still reaches the run it names', async () => {
  const t = randomName('t-');
  const stream = client.openStream();
  try {
    for (let r = 0; r <= 200; r++) await stream.send([ev(t, r, r)], 'ACCEPTED');
    await stream.send([ev(t, 201, 201)], 'PERSISTED');
    const subjects = await controlSubscriptions();
    assert.equal(
      subjects.length,
      1,
      `control subscriptions after 202 runs on one stream (${subjects.slice(0, 3).join(', ')}, …)`,
    );
    assert.match(subjects[0] as string, /\.ctl\.\*\.\*$/, 'one subscription to every run');

    const res = await fetch(`http://127.0.0.1:${broker.httpPort}/v1/threads/${t}/runs/run-150/cancel`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'enough' }),
    });
    assert.equal(res.status, 202);
    const control = await waitFor(() => stream.controls[0], {
      what: 'the cancel on the stream',
      timeoutMs: 20_000,
    });
    assert.equal(control.cancel?.run_id, 'run-150');
    assert.equal(control.cancel?.thread_id, t);
    assert.equal(control.cancel?.reason, 'enough');
  } finally {
    stream.call.cancel();
  }
});

test('control routing: runs past the bound, terminal events and a closed stream leave no listener; a throwing listener or a malformed message stops nothing', async () => {
  const nc = await connect({ servers: servers.nats.url });
  try {
    const subjects = new Subjects(randomName('rsc'));
    const feeds = new ControlFeeds(nc, subjects, createLogger('silent'));
    const got: string[] = [];
    const controls = new StreamControls(feeds, (c) => got.push(c.cancel?.run_id ?? '?'), 3);
    const t = randomName('t-');
    const lifecycle = (r: number, type: string) =>
      ({ thread_id: t, run_id: `run-${r}`, category: 'lifecycle', event_type: type }) as LogRecord;
    controls.observe([0, 1, 2, 3, 4].map((r) => lifecycle(r, 'ai_chunk')));
    assert.equal(controls.size, 3, 'runs over the bound: the oldest are let go');
    assert.equal(feeds.size, 3);

    const cancel = (r: number): void =>
      nc.publish(
        subjects.control(t, `run-${r}`),
        JSON.stringify({ thread_id: t, run_id: `run-${r}`, reason: 'x' }),
      );
    // A listener of run-4 that throws, beside the stream's own.
    const unlisten = feeds.listen(t, 'run-4', () => {
      throw new Error('boom');
    });
    nc.publish(subjects.control(t, 'run-3'), '{not json');
    cancel(0); // let go: not delivered
    cancel(4);
    cancel(2);
    await waitFor(() => got.length >= 2 || undefined, { what: 'two cancels delivered', timeoutMs: 10_000 });
    assert.deepEqual(got, ['run-4', 'run-2']);

    unlisten();
    controls.observe([lifecycle(4, 'run_end')]);
    assert.equal(controls.size, 2, 'a terminal event lets its run go');
    controls.close();
    assert.equal(controls.size, 0);
    assert.equal(feeds.size, 0, 'a closed stream leaves no listener');
  } finally {
    // Bounded: a connection whose reading stopped (what a throwing listener did) never closes.
    await Promise.race([nc.close(), sleep(5_000)]);
  }
});
