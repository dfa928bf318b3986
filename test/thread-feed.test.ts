// ThreadFeeds (src/log/thread-feed.ts): a listener sees everything published after it was
// added, the listeners of a thread share one subscription, and it goes with the last one.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { ThreadFeeds } from '../src/log/thread-feed.js';
import { createLogger } from '../src/logger.js';
import { startNatsServer } from './helpers/nats-server.js';

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

test('listeners of a thread share one subscription, which goes with the last of them; a listener after that subscribes anew', async () => {
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
    );
    const got: string[] = [];
    const send = async (v: string): Promise<void> => {
      pub.publish('feed.a', v);
      await pub.flush();
      await nc.flush(); // anything the server routed to nc has arrived before this PONG
    };

    const removeA = await feeds.listenMany(['a'], (t, v) => got.push(`A:${t}:${v}`));
    const removeB = await feeds.listen('a', (v) => got.push(`B:${v}`));
    assert.equal(counting.count(), 1, 'one subscription for both listeners');
    await send('1');
    removeA();
    assert.equal(feeds.size, 1, 'B still listens');
    await send('2');
    removeB();
    assert.equal(feeds.size, 0, 'gone with its last listener');
    await send('3');
    assert.deepEqual(got, ['A:a:1', 'B:1', 'B:2'], 'nothing after the feed was dropped');

    const removeC = await feeds.listen('a', (v) => got.push(`C:${v}`));
    assert.equal(counting.count(), 2, 'subscribed anew');
    await send('4');
    removeC();
    assert.deepEqual(got.slice(3), ['C:4']);
  } finally {
    await pub.close();
    await nc.close();
  }
});
