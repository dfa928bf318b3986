// The browser build of @runstream/client in a real headless Chromium (Debian's `chromium`,
// driven by playwright-core; nothing downloads a browser). A page on another origin loads
// clients/typescript/dist as plain ES modules, subscribes over the browser's own WebSocket,
// the broker is killed -9 and restarted on the same ports, and the page ends with exactly 1..N.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, normalize } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Publisher } from '@runstream/client/node';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_FLAGS } from './helpers/browser.js';
import { freePort } from './helpers/proc.js';
import { chunk } from './helpers/publish-events.js';
import { brokerConfig, randomName, spawnBroker, startServers } from './helpers/stack.js';

const DIST = fileURLToPath(new URL('../../clients/typescript/dist/', import.meta.url));
const WAIT_MS = 60_000;

const PAGE = `<!doctype html><meta charset="utf-8"><title>runstream client</title>
<script type="module">
  import { HistoryClient, subscribe } from '/dist/index.js';
  window.rs = { HistoryClient, subscribe };
  window.ready = true;
</script>`;

/** Serves the page and the package's dist/ (the browser build) on 127.0.0.1. */
async function servePage(): Promise<{ url: string; close: () => Promise<void> }> {
  const server = createServer((req, res) => {
    void (async () => {
      const path = new URL(req.url ?? '/', 'http://x').pathname;
      if (path === '/') {
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(PAGE);
        return;
      }
      const rel = normalize(path.replace(/^\/dist\//, ''));
      if (!path.startsWith('/dist/') || rel.startsWith('..')) {
        res.writeHead(404).end();
        return;
      }
      try {
        const body = await readFile(DIST + rel);
        const type = extname(rel) === '.js' ? 'text/javascript' : 'application/octet-stream';
        res.writeHead(200, { 'content-type': type }).end(body);
      } catch {
        res.writeHead(404).end();
      }
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

test('in headless Chromium, the browser build resumes across a broker kill -9 and restart: exactly 1..N', async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: run make deps (apt-get install chromium)`);
  await using servers = await startServers();
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const config = brokerConfig(servers, { grpcPort, httpPort });
  let broker = await spawnBroker(config);
  const site = await servePage();
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_FLAGS, headless: true });
  const thread = randomName('tsb-');
  const N = 200;
  // PERSISTED: the page's History count below reads Postgres.
  await using pub = new Publisher({
    target: `127.0.0.1:${grpcPort}`,
    ack: 'PERSISTED',
    retry: { initialDelayMs: 20, maxDelayMs: 300, maxAttempts: 10_000 },
    deadlineMs: 5_000,
  });
  try {
    await pub.publishMany(Array.from({ length: N / 2 }, (_, i) => chunk(thread, i + 1)));
    const page = await browser.newPage();
    page.setDefaultTimeout(WAIT_MS);
    await page.goto(site.url);
    await page.waitForFunction(() => (globalThis as unknown as { ready?: boolean }).ready === true);
    await page.evaluate(
      ({ url, threadId, httpUrl }) => {
        const w = globalThis as unknown as Record<string, unknown> & {
          rs: {
            subscribe: (o: unknown) => AsyncIterable<{ type: string; event?: { seq: number } }>;
            HistoryClient: new (o: unknown) => { countMessages: (t: string) => Promise<number> };
          };
        };
        w.items = [];
        w.seqs = [];
        const sub = w.rs.subscribe({ url, threadId, backoff: { initialDelayMs: 20, maxDelayMs: 300 } });
        w.sub = sub;
        void (async () => {
          for await (const item of sub) {
            (w.items as string[]).push(item.type);
            if (item.event) (w.seqs as number[]).push(item.event.seq);
          }
        })();
        w.count = new w.rs.HistoryClient({ url: httpUrl }).countMessages(threadId);
      },
      { url: `ws://127.0.0.1:${httpPort}/v1/ws`, threadId: thread, httpUrl: `http://127.0.0.1:${httpPort}` },
    );
    assert.equal(
      await page.evaluate(() => (globalThis as unknown as { count: Promise<number> }).count),
      N / 2,
    );
    await page.waitForFunction((n) => (globalThis as unknown as { seqs: number[] }).seqs.length >= n, N / 2);

    await broker.kill();
    const second = pub.publishMany(Array.from({ length: N / 2 }, (_, i) => chunk(thread, N / 2 + i + 1)));
    await page.waitForFunction(() =>
      (globalThis as unknown as { items: string[] }).items.includes('reconnecting'),
    );
    broker = await spawnBroker(config);
    await second;
    await page.waitForFunction((n) => (globalThis as unknown as { seqs: number[] }).seqs.length >= n, N);
    const seqs = await page.evaluate(() => {
      const w = globalThis as unknown as { seqs: number[]; sub: { close: () => void } };
      w.sub.close();
      return w.seqs;
    });
    assert.deepEqual(
      seqs,
      Array.from({ length: N }, (_, i) => i + 1),
    );
  } finally {
    await browser.close();
    await site.close();
    await broker.stop();
  }
});
