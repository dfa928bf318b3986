// Routing cancels to producers costs the broker no NATS subscription per run: a process
// listens to every run's control subject with one subscription, whatever its streams
// publish. With a subscription per run, a producer of a new run per request (10,000
// threads, one run each) made the broker and nats-server pay a SUB, a PING and an UNSUB
// for every request.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type Broker, startBroker } from '../src/broker.js';
import { IngestClient } from '../src/client/ingest-client.js';
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
