// Every page is bounded by bytes as well as by count (RS_MAX_PAGE_BYTES): a History page,
// a chat view page (which may then end inside a message, continued under the same id on
// the next page) and a subscriber's catch-up reads. A page always holds at least one event,
// and paging on from its cursor loses nothing.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Event } from '../src/client/ingest-client.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

const PAGE_BYTES = 64 * 1024;
const CHUNK = 'z'.repeat(10_000);
const CHUNKS = 40;

let stack: Stack;
let t: string;
before(async () => {
  stack = await startStack({ maxPageBytes: PAGE_BYTES, catchupPageSize: 500 });
  t = randomName('t-');
  // One assistant message of 40 chunks of 10 kB (400 kB), then a small human message.
  const events: Event[] = Array.from({ length: CHUNKS }, (_, i) => ({
    thread_id: t,
    run_id: 'r',
    event_id: `c${i}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ content: `${i}:${CHUNK}` }),
    metadata_json: '{"id":"msg-1"}',
  }));
  events.push({
    thread_id: t,
    run_id: 'r',
    event_id: 'h',
    event_type: 'human_message',
    category: 'MESSAGE',
    content_json: '{"content":"thanks"}',
  });
  await stack.client.publish(events, 'PERSISTED');
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

async function get<T>(path: string): Promise<T> {
  const res = await fetch(`${stack.httpUrl}${path}`);
  assert.equal(res.status, 200, path);
  return (await res.json()) as T;
}

test('a History page of large events stops at its byte budget; the cursor pages on without loss', async () => {
  const seqs: number[] = [];
  let after = 0;
  let pages = 0;
  for (;;) {
    const page = await get<{ events: { seq: number }[]; next_after_seq: number; has_more: boolean }>(
      `/v1/threads/${t}/events?limit=1000&after_seq=${after}`,
    );
    pages++;
    assert.ok(page.events.length >= 1 || !page.has_more);
    assert.ok(
      page.events.length <= Math.ceil(PAGE_BYTES / CHUNK.length) + 1,
      `${page.events.length} events in a page`,
    );
    seqs.push(...page.events.map((e) => e.seq));
    after = page.next_after_seq;
    if (!page.has_more) break;
  }
  assert.deepEqual(
    seqs,
    Array.from({ length: CHUNKS + 1 }, (_, i) => i + 1),
  );
  assert.ok(pages >= 6, `${pages} pages`);
});

test('a chat page ends at its byte budget even inside a message; pages merged by id give the whole message', async () => {
  const parts: string[] = [];
  let after = 0;
  let last: { role: string; content: string } | undefined;
  for (let n = 0; n < 50; n++) {
    const page = await get<{
      messages: { id: string; role: string; content: string }[];
      next_after_seq: number;
      has_more: boolean;
    }>(`/v1/threads/${t}/messages?view=chat&limit=1&after_seq=${after}`);
    const [m] = page.messages;
    assert.ok(m, `page ${n} holds a message`);
    assert.ok(
      m.content.length <= PAGE_BYTES + CHUNK.length + 100,
      `a page of ${m.content.length} characters`,
    );
    if (m.id === 'msg-1') parts.push(m.content);
    else last = m;
    after = page.next_after_seq;
    if (!page.has_more) break;
  }
  assert.ok(parts.length > 1, 'the long message came in several pages');
  assert.equal(parts.join(''), Array.from({ length: CHUNKS }, (_, i) => `${i}:${CHUNK}`).join(''));
  assert.deepEqual(last && [last.role, last.content], ['human', 'thanks']);
});

test('a subscriber catching up over large events gets them all, in order', async () => {
  const c = await stack.ws();
  c.subscribe('s', t);
  await c.waitFor((f) => f.type === 'live' && f.id === 's');
  assert.deepEqual(
    c.events('s').map((e) => e.seq),
    Array.from({ length: CHUNKS + 1 }, (_, i) => i + 1),
  );
});
