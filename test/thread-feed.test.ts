// ThreadFeeds (src/log/thread-feed.ts): a listener sees everything published after it was
// added, a lingering feed is reused without a new subscription, and it is dropped once
// its linger ends.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { ThreadFeeds } from '../src/log/thread-feed.js';
import { createLogger } from '../src/logger.js';
import { startNatsServer } from './helpers/nats-server.js';
import { waitFor } from './helpers/wait.js';

/** The connection, counting its subscribe calls. */
function countingSubscribes(nc: NatsConnection): { nc: NatsConnection; count: () => number } {
  let n = 0;
  const proxy = new Proxy(nc, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (prop === 'subscribe') {
        return (...args: Parameters<NatsConnection['subscribe']>) => {
          n++;
          return target.subscribe(...args);
        };
      }
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { nc: proxy, count: () => n };
}

test('a lingering feed is reused without subscribing again, and dropped when the linger ends', async () => {
  await using nats = await startNatsServer();
  const nc = await connect({ servers: nats.url });
  // Another connection publishes: delivery proves the server has the subscription.
  const pub = await connect({ servers: nats.url });
  try {
    const counting = countingSubscribes(nc);
    const feeds = new ThreadFeeds<string>(
      counting.nc,
      (t) => `feed.${t}`,
      (m) => m.string(),
      createLogger('silent'),
      300,
    );
    const got: string[] = [];
    const send = async (v: string): Promise<void> => {
      pub.publish('feed.a', v);
      await pub.flush();
      await nc.flush(); // anything the server routed to nc has arrived before this PONG
    };

    const removeA = await feeds.listenMany(['a'], (t, v) => got.push(`${t}:${v}`));
    await send('1');
    removeA();
    assert.equal(feeds.size, 1, 'lingers after its last listener left');

    const removeB = await feeds.listenMany(['a'], (t, v) => got.push(`${t}:${v}`));
    assert.equal(counting.count(), 1, 'the lingering subscription serves the new listener');
    await send('2');
    removeB();

    await waitFor(() => feeds.size === 0, { what: 'the linger to end' });
    await send('3');
    assert.deepEqual(got, ['a:1', 'a:2'], 'nothing after the feed was dropped');

    // Without linger a feed goes with its last listener.
    const eager = new ThreadFeeds<string>(
      nc,
      (t) => `feed.${t}`,
      (m) => m.string(),
      createLogger('silent'),
    );
    const remove = await eager.listen('a', (v) => got.push(`eager:${v}`));
    await send('4');
    remove();
    assert.equal(eager.size, 0);
    await send('5');
    assert.deepEqual(got, ['a:1', 'a:2', 'eager:4']);
  } finally {
    await pub.close();
    await nc.close();
  }
});
