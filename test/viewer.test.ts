// The viewer page the broker serves at `/` (viewer/, src/http/viewer.ts), in a real headless
// Chromium (Debian's `chromium` driven by playwright-core, as test/client-browser.test.ts; no
// browser download). The page lists the thread, a click opens it, tokens merge into one bubble;
// the broker is killed -9 while the page is open, the page shows its reconnecting state, the
// rest of the run is published while the broker is down and restarted, and the page ends with
// exactly the whole text, the tool call and its result, and every trace and lifecycle event once.
// RS_UPDATE_SCREENSHOT=1 writes the final page to docs/viewer.png (the README's screenshot).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { HistoryClient } from '@runstream/client';
import { type PublishEvent, Publisher } from '@runstream/client/node';
import { type JWTPayload, SignJWT } from 'jose';
import { chromium } from 'playwright-core';
import { loadScript, runDemo } from '../src/cli/demo-agent.js';
import { CHROMIUM, CHROMIUM_FLAGS } from './helpers/browser.js';
import { freePort } from './helpers/proc.js';
import { brokerConfig, randomName, spawnBroker, startServers } from './helpers/stack.js';

const WAIT_MS = 60_000;
/** The page's document, as the functions run in the page see it (this file has no DOM types). */
interface Doc {
  document: {
    querySelector(s: string): { textContent: string | null } | null;
    querySelectorAll(s: string): { length: number };
  };
}
const SCREENSHOT = fileURLToPath(new URL('../../docs/viewer.png', import.meta.url));

test('the viewer files: fixed list, content types, cache and security headers, no traversal', async () => {
  await using servers = await startServers();
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const broker = await spawnBroker(brokerConfig(servers, { grpcPort, httpPort }));
  const base = `http://127.0.0.1:${httpPort}`;
  try {
    const page = await fetch(`${base}/`);
    assert.equal(page.status, 200);
    assert.equal(page.headers.get('content-type'), 'text/html; charset=utf-8');
    assert.equal(page.headers.get('cache-control'), 'no-cache');
    assert.equal(page.headers.get('x-content-type-options'), 'nosniff');
    assert.equal(page.headers.get('x-frame-options'), 'DENY');
    assert.equal(page.headers.get('referrer-policy'), 'no-referrer');
    const csp = page.headers.get('content-security-policy') ?? '';
    for (const d of [
      "default-src 'none'",
      "script-src 'self'",
      "connect-src 'self'",
      "frame-ancestors 'none'",
    ]) {
      assert.ok(csp.includes(d), `CSP ${csp} lacks ${d}`);
    }
    assert.match(await page.text(), /<script type="module" src="\/viewer\/app.js">/);
    const etag = page.headers.get('etag') ?? '';
    assert.match(etag, /^"[A-Za-z0-9_-]+"$/);
    const again = await fetch(`${base}/`, { headers: { 'if-none-match': etag } });
    assert.equal(again.status, 304);
    assert.equal(await again.text(), '');
    // Event text goes into the page as text only: no HTML sink in the page's module.
    const app = await (await fetch(`${base}/viewer/app.js`)).text();
    assert.doesNotMatch(app, /innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/);
    const head = await fetch(`${base}/viewer/app.js`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(head.headers.get('content-type'), 'text/javascript; charset=utf-8');
    assert.ok(Number(head.headers.get('content-length')) > 0);
    assert.equal(
      (await fetch(`${base}/viewer/viewer.css`)).headers.get('content-type'),
      'text/css; charset=utf-8',
    );
    for (const f of ['index.js', 'subscriber.js', 'chat-view.js', 'history.js']) {
      const r = await fetch(`${base}/viewer/client/${f}`);
      assert.equal(r.status, 200, f);
      assert.equal(r.headers.get('content-type'), 'text/javascript; charset=utf-8', f);
    }
    // Only the fixed list: nothing else of the client (node.js is Node-only), nor any other file.
    for (const path of [
      '/viewer/index.html',
      '/viewer/client/node.js',
      '/viewer/client/publisher.js',
      '/viewer/client/index.d.ts',
      '/viewer/..%2fpackage.json',
      '/viewer/%2e%2e%2f%2e%2e%2fpackage.json',
      '/viewer/client/..%2f..%2f..%2f..%2fpackage.json',
      '/viewer/',
      '/index.html',
    ]) {
      const r = await fetch(base + path);
      assert.equal(r.status, 404, path);
      assert.equal(((await r.json()) as { error: { code: string } }).error.code, 'not_found', path);
    }
    const post = await fetch(`${base}/`, { method: 'POST' });
    assert.equal(post.status, 405);
    assert.match(post.headers.get('allow') ?? '', /GET/);
  } finally {
    await broker.stop();
  }
});

test('in headless Chromium, the viewer merges tokens into a bubble and continues across a broker kill -9 with no gap', async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: run make deps (apt-get install chromium)`);
  await using servers = await startServers();
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const config = brokerConfig(servers, { grpcPort, httpPort });
  let broker = await spawnBroker(config);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_FLAGS, headless: true });
  const thread = randomName('viewer-');
  const run = 'run-1';
  const ev = (eventType: string, category: string, content: unknown, metadata?: Record<string, unknown>) =>
    ({
      threadId: thread,
      runId: run,
      eventType,
      category,
      content,
      ...(metadata ? { metadata } : {}),
    }) as PublishEvent;
  const N = 60;
  // Markup in a token must show as text, never become elements.
  const tokens = Array.from({ length: N }, (_, i) => (i === 7 ? '<b>bold?</b> ' : `tok${i} `));
  const chunk = (i: number) => ev('ai_chunk', 'message', tokens[i], { id: 'msg-a1' });
  const first: PublishEvent[] = [
    ev('run_start', 'lifecycle', {}),
    ev('human_message', 'message', 'what is runstream?', { id: 'msg-h1' }),
    ev('llm_start', 'trace', { model: 'demo' }),
    ...Array.from({ length: N / 2 }, (_, i) => chunk(i)),
  ];
  const second: PublishEvent[] = [
    ...Array.from({ length: N / 2 }, (_, i) => chunk(N / 2 + i)),
    ev(
      'tool_call',
      'trace',
      { call_id: 'call-1', name: 'web_search', arguments: '{"q":"runstream"}' },
      { id: 'msg-a1' },
    ),
    ev('llm_end', 'trace', { tokens: N }),
    ev('tool_result', 'message', { call_id: 'call-1', content: 'a broker for agent run events' }),
    ev('run_end', 'lifecycle', { status: 'success' }),
  ];
  const traceAndLifecycle = [...first, ...second].filter((e) => e.category !== 'message').length;
  // PERSISTED: the thread list the page reads comes from Postgres.
  await using pub = new Publisher({
    target: `127.0.0.1:${grpcPort}`,
    ack: 'PERSISTED',
    idPrefix: randomName('ev-'),
    retry: { initialDelayMs: 20, maxDelayMs: 300, maxAttempts: 10_000 },
    deadlineMs: 5_000,
  });
  const problems: string[] = [];
  try {
    await pub.publishMany(first);
    const page = await browser.newPage({ viewport: { width: 1280, height: 760 } });
    page.setDefaultTimeout(WAIT_MS);
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    page.on('console', (m) => {
      if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(`console: ${m.text()}`);
    });
    await page.goto(`http://127.0.0.1:${httpPort}/`);
    await page.waitForSelector('body[data-ready="true"]');
    const threadButton = `button.thread[data-thread="${thread}"]`;
    await page.click(threadButton);
    await page.waitForSelector('#status[data-state="live"]');
    const assistant = '.bubble.role-assistant .text';
    const firstText = tokens.slice(0, N / 2).join('');
    await page.waitForFunction(
      ([sel, text]) =>
        (globalThis as unknown as Doc).document.querySelector(sel as string)?.textContent === text,
      [assistant, firstText],
    );
    assert.equal(await page.textContent('.bubble.role-human .text'), 'what is runstream?');

    await broker.kill();
    await page.waitForSelector('#status[data-state="reconnecting"]');
    const published = pub.publishMany(second);
    broker = await spawnBroker(config);
    await published;
    // The tool result comes after every chunk: once its bubble is there, all chunks are applied.
    await page.waitForSelector('.bubble.role-tool');
    await page.waitForSelector('#status[data-state="live"]');
    assert.equal(await page.textContent(assistant), tokens.join(''));
    assert.equal(await page.locator('.bubble.role-assistant').count(), 1);
    assert.equal(await page.locator('.bubble.role-assistant b').count(), 0);
    assert.equal(await page.locator('.bubble').count(), 3);
    assert.equal(await page.textContent('.bubble.role-tool .text'), 'a broker for agent run events');
    assert.equal(await page.textContent('.bubble.role-assistant .tool-name'), '→ web_search');
    assert.equal(await page.textContent('.bubble.role-assistant .tool-args'), '{"q":"runstream"}');
    assert.ok(Number(await page.getAttribute('body', 'data-reconnects')) >= 1);
    // Trace and lifecycle events, once each and in seq order, shown by the toggles.
    await page.waitForFunction(
      (n) => (globalThis as unknown as Doc).document.querySelectorAll('#events .ev').length >= n,
      traceAndLifecycle,
    );
    const seqs = await page.$$eval('#events .ev', (rows) =>
      rows.map((r) => Number((r as unknown as { dataset: Record<string, string> }).dataset.seq)),
    );
    assert.equal(seqs.length, traceAndLifecycle);
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => a - b),
    );
    assert.equal(new Set(seqs).size, seqs.length);
    assert.equal(await page.isVisible('#events-pane'), false);
    await page.check('#show-lifecycle');
    assert.equal(await page.isVisible('#events .cat-lifecycle >> nth=0'), true);
    assert.equal(await page.isVisible('#events .cat-trace >> nth=0'), false);
    await page.check('#show-trace');
    assert.equal(await page.isVisible('#events .cat-trace >> nth=0'), true);
    // The run's status, from History once its run_end arrived.
    await page.waitForSelector(`#runs .run[data-run="${run}"] .status-success`);
    await page.waitForSelector(`${threadButton} .status-success`);

    // Start from any seq: seq 1-3 are run_start, the question and llm_start, then chunk i is
    // seq 4 + i. After chunk 9: no question, and the assistant's text from chunk 10 on.
    const from = 3 + 10;
    await page.fill('#after-seq', String(from));
    await page.click('#open button[type="submit"]');
    await page.waitForSelector('.bubble.role-tool');
    assert.equal(await page.locator('.bubble.role-human').count(), 0);
    assert.equal(await page.textContent(assistant), tokens.slice(10).join(''));
    assert.equal(new URL(page.url()).searchParams.get('after_seq'), String(from));

    await page.fill('#after-seq', '0');
    await page.click('#open button[type="submit"]');
    await page.waitForSelector('.bubble.role-tool');
    await page.waitForSelector('#status[data-state="live"]');
    const shot =
      process.env.RS_UPDATE_SCREENSHOT === '1'
        ? SCREENSHOT
        : join(await mkdtemp(join(tmpdir(), 'viewer-')), 'viewer.png');
    await page.screenshot({ path: shot });
    assert.deepEqual(problems, []);
  } finally {
    await browser.close();
    await broker.stop();
  }
});

test('with auth on, the viewer asks for a token and then shows the thread', async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: run make deps (apt-get install chromium)`);
  const secret = 'viewer-test-secret-of-at-least-32-bytes!';
  const sign = (claims: JWTPayload) =>
    new SignJWT(claims)
      .setProtectedHeader({ alg: 'HS256' })
      .setIssuedAt()
      .setExpirationTime(Math.floor(Date.now() / 1000) + 600)
      .sign(new TextEncoder().encode(secret));
  await using servers = await startServers();
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const broker = await spawnBroker(brokerConfig(servers, { grpcPort, httpPort }), { RS_JWT_SECRET: secret });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_FLAGS, headless: true });
  const thread = randomName('viewer-auth-');
  try {
    await using pub = new Publisher({
      target: `127.0.0.1:${grpcPort}`,
      ack: 'PERSISTED',
      token: await sign({ sub: 'agent', threads: '*', scope: 'publish' }),
    });
    await pub.publishMany(
      ['signed ', 'in'].map((t) => ({
        threadId: thread,
        runId: 'r1',
        eventType: 'ai_chunk',
        category: 'message',
        content: t,
        metadata: { id: 'a1' },
      })),
    );
    const page = await browser.newPage();
    page.setDefaultTimeout(WAIT_MS);
    // The page is served without a token: only the data behind it needs one.
    await page.goto(`http://127.0.0.1:${httpPort}/`);
    await page.waitForSelector('#auth input#token');
    await page.waitForSelector('#status[data-state="auth"]');
    assert.equal(await page.locator('button.thread').count(), 0);
    await page.fill('#token', await sign({ sub: 'viewer', threads: '*', scope: 'read' }));
    await page.click('#auth button[type="submit"]');
    await page.click(`button.thread[data-thread="${thread}"]`);
    await page.waitForSelector('#status[data-state="live"]');
    await page.waitForFunction(
      (text) =>
        (globalThis as unknown as Doc).document.querySelector('.bubble.role-assistant .text')?.textContent ===
        text,
      'signed in',
    );
    await page.waitForSelector('#runs .run[data-run="r1"]');
  } finally {
    await browser.close();
    await broker.stop();
  }
});

test("in headless Chromium, the demo agent's run shows in the viewer exactly as History's chat view", async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: run make deps (apt-get install chromium)`);
  await using servers = await startServers();
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const broker = await spawnBroker(brokerConfig(servers, { grpcPort, httpPort }));
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_FLAGS, headless: true });
  const thread = randomName('demo-thread-');
  try {
    const page = await browser.newPage();
    page.setDefaultTimeout(WAIT_MS);
    // Opened by its address before the thread exists, as `make run` prints it.
    await page.goto(`http://127.0.0.1:${httpPort}/?thread=${thread}`);
    await page.waitForSelector('#status[data-state="live"]');
    const script = loadScript(undefined).runs;
    await runDemo(
      { target: `127.0.0.1:${grpcPort}`, threadId: thread, intervalMs: 0, runs: 1, script, log: () => {} },
      new AbortController().signal,
    );
    // The run's last event is its run_end: once the page shows the run ended, all of it is stored.
    await page.waitForSelector('#runs .run .badge:not(.status-running):not(.status-pending)');
    const history = new HistoryClient({ url: `http://127.0.0.1:${httpPort}` });
    const { messages } = await history.listChatMessages(thread, { limit: 1000 });
    const last = messages.at(-1);
    assert.ok(last && messages.length >= 2, 'the demo run has chat messages');
    assert.ok(
      messages.some((m) => m.role === 'assistant' && m.event_count > 1),
      'it streams tokens',
    );
    // Frames arrive in seq order: once the last message is at its last seq, all are applied.
    await page.waitForSelector(
      `.bubble[data-first-seq="${last.first_seq}"][data-last-seq="${last.last_seq}"]`,
    );
    const shown = await page.$$eval('#chat .bubble', (bubbles) =>
      bubbles.map((b) => {
        const q = (s: string) =>
          (b as unknown as { querySelectorAll(s: string): { textContent: string }[] }).querySelectorAll(s);
        return {
          firstSeq: Number((b as unknown as { dataset: Record<string, string> }).dataset.firstSeq),
          text: q('.text')[0]?.textContent,
          calls: Array.from(q('.tool-name'), (c) => c.textContent),
        };
      }),
    );
    assert.deepEqual(
      shown,
      messages.map((m) => ({
        firstSeq: m.first_seq,
        text: m.content,
        calls: (m.tool_calls ?? []).map((c) => `→ ${c.name}`),
      })),
    );
  } finally {
    await browser.close();
    await broker.stop();
  }
});
