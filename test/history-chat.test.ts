// The chat projection on a recorded realistic run (../shared/fixtures/agent-runs.jsonl:
// tokens, three tool calls, an error), on both transports: tokens merged by message id,
// tool calls on their assistant message, results paired by call id with the tool's name,
// trace and lifecycle left out, each message with its seq range, paged by seq both ways.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { ChatMessage__Output } from '../src/gen/runstream/v1/ChatMessage.js';
import { HistoryClient } from '../src/history/client.js';
import { ev, fixtureEvents, http } from './helpers/history.js';
import { randomName, type Stack, startStack } from './helpers/stack.js';

let stack: Stack;
let client: HistoryClient;
let F: string;

before(async () => {
  stack = await startStack();
  client = new HistoryClient(stack.grpcTarget);
  F = randomName('fx-');
  await stack.client.publish(fixtureEvents(F, 'u1'), 'PERSISTED');
});
after(async () => {
  client.close();
  await stack[Symbol.asyncDispose]();
});

interface ChatJson {
  role: string;
  id: string;
  run_id: string;
  user_id: string;
  content: string;
  tool_calls?: { id: string; name: string; arguments: string; seq: number }[];
  tool_call_id?: string;
  name?: string;
  is_error?: boolean;
  first_seq: number;
  last_seq: number;
  event_count: number;
  created_at: string;
  metadata: Record<string, unknown>;
}
interface ChatPage {
  messages: ChatJson[];
  next_after_seq?: number;
  next_before_seq?: number;
  has_more: boolean;
}

const R1 = 'run-01J8Z';
const R2 = 'run-01J90';

/** What the fixture projects to: [role, id, content, tool calls, first_seq, last_seq]. */
const EXPECTED = [
  ['human', 'msg-h1', '请客观评价一下张邦昌', [], 2, 2],
  [
    'assistant',
    'msg-a1',
    '我先查一下相关史料。',
    [['call_00_a', 'web_search', '{"query": "张邦昌 评价"}', 8]],
    4,
    8,
  ],
  ['tool', 'call_00_a', '张邦昌（1081—1127），北宋末年大臣……', [], 9, 9],
  [
    'assistant',
    'msg-a2',
    '张邦昌在靖康之变后被金人立为伪楚皇帝，但仅三十三天后便还政于赵构。',
    [['call_01_b', 'note', '{"action": "create", "task_id": 1}', 22]],
    10,
    22,
  ],
  ['tool', 'call_01_b', '✅ 笔记创建成功\nID: note_4c2', [], 23, 23],
  ['human', 'msg-h2', 'What is 1+2*3? Use the calculator.', [], 27, 27],
  ['assistant', 'msg-a3', '', [['call_02_c', 'calculator', '{"expression": "1+2*3"}', 28]], 28, 28],
  ['tool', 'call_02_c', '7.0', [], 29, 29],
  ['assistant', 'msg-a4', '1 + 2 × 3 = 7', [], 30, 32],
] as const;

const compact = (m: ChatJson) => [
  m.role,
  m.id,
  m.content,
  (m.tool_calls ?? []).map((c) => [c.id, c.name, c.arguments, c.seq]),
  m.first_seq,
  m.last_seq,
];

async function chat(path: string, query: Record<string, string | number>): Promise<ChatPage> {
  const q = new URLSearchParams({ view: 'chat' });
  for (const [k, v] of Object.entries(query)) q.set(k, String(v));
  const { status, body } = await http<ChatPage>(`${stack.httpUrl}${path}?${q}`);
  assert.equal(status, 200, JSON.stringify(body));
  return body;
}

test('HTTP view=chat: the recorded runs as human, assistant and tool messages, trace and lifecycle left out', async () => {
  const page = await chat(`/v1/threads/${F}/messages`, {});
  assert.deepEqual(page.messages.map(compact), EXPECTED);
  assert.deepEqual([page.next_after_seq, page.has_more], [32, false]);
  const [, a1, toolA, a2, toolB] = page.messages as ChatJson[];
  // Tool results are paired with their call: id, the tool's name, success.
  assert.deepEqual([toolA?.tool_call_id, toolA?.name, toolA?.is_error], ['call_00_a', 'web_search', false]);
  assert.deepEqual([toolB?.tool_call_id, toolB?.name], ['call_01_b', 'note']);
  assert.deepEqual(toolB?.metadata, { stream_token: 'task_1' });
  assert.equal(a1?.event_count, 5, 'four tokens and a tool call');
  assert.equal(a2?.event_count, 13);
  assert.deepEqual([a1?.run_id, a1?.user_id, a1?.metadata], [R1, 'u1', { id: 'msg-a1' }]);
  assert.match(String(a1?.created_at), /^\d{4}-\d\d-\d\dT/);
  assert.equal(toolA?.tool_calls, undefined, 'tool_calls only on assistant messages');
  // Nothing of the 9 trace/lifecycle events (seqs 1, 3, 24, 25, 26, 33) is in any message.
  const covered = page.messages.flatMap((m) => [m.first_seq, m.last_seq]);
  for (const s of [1, 3, 24, 25, 26, 33]) assert.ok(!covered.includes(s), `seq ${s} left out`);
  assert.ok(!page.messages.some((m) => m.content.includes('timeout')), 'the error is lifecycle, not chat');
});

test('gRPC ListChatMessages: the same projection', async () => {
  const page = await client.listChatMessages({ thread_id: F });
  const roles: Record<string, string> = {
    CHAT_ROLE_HUMAN: 'human',
    CHAT_ROLE_ASSISTANT: 'assistant',
    CHAT_ROLE_TOOL: 'tool',
  };
  assert.deepEqual(
    page.messages.map((m: ChatMessage__Output) => [
      roles[m.role],
      m.id,
      m.content,
      m.tool_calls.map((c) => [c.id, c.name, c.arguments, c.seq]),
      m.first_seq,
      m.last_seq,
    ]),
    EXPECTED,
  );
  const tool = page.messages[2] as ChatMessage__Output;
  assert.deepEqual([tool.tool_call_id, tool.name, tool.is_error], ['call_00_a', 'web_search', false]);
  assert.equal(JSON.parse((page.messages[4] as ChatMessage__Output).metadata_json).stream_token, 'task_1');
  assert.deepEqual([page.next_after_seq, page.has_more], [32, false]);
});

test('paged by seq both ways: pages partition the log, and a result on a later page than its call is still named', async () => {
  // Ascending, two messages a page.
  const up: ChatJson[] = [];
  const ranges: number[] = [];
  let after = 0;
  for (let i = 0; i < 20; i++) {
    const page = await chat(`/v1/threads/${F}/messages`, { after_seq: after, limit: 2 });
    assert.ok(page.messages.length <= 2);
    up.push(...page.messages);
    after = page.next_after_seq as number;
    ranges.push(after);
    if (!page.has_more) break;
  }
  assert.deepEqual(up.map(compact), EXPECTED);
  assert.deepEqual(ranges, [8, 22, 27, 29, 32]);
  assert.equal(up[2]?.name, 'web_search', 'call on page 1, result on page 2');

  // Descending on gRPC, one message a page: newest first down to the first.
  const down: ChatMessage__Output[] = [];
  let beforeSeq = 34;
  for (let i = 0; i < 20; i++) {
    const page = await client.listChatMessages({ thread_id: F, before_seq: beforeSeq, limit: 1 });
    down.push(...page.messages);
    beforeSeq = page.next_before_seq;
    if (!page.has_more) break;
  }
  assert.deepEqual(
    down.map((m) => [m.id, m.first_seq, m.last_seq]),
    EXPECTED.map((e) => [e[1], e[4], e[5]]).reverse(),
  );
  assert.equal(
    down.find((m) => m.id === 'call_02_c')?.name,
    'calculator',
    'its call is on the next (older) page',
  );

  // HTTP descending, three a page: newest first within a page too.
  const p = await chat(`/v1/threads/${F}/messages`, { before_seq: 34, limit: 3 });
  assert.deepEqual(
    p.messages.map((m) => m.id),
    ['msg-a4', 'call_02_c', 'msg-a3'],
  );
  assert.deepEqual([p.next_before_seq, p.has_more], [28, true]);
});

test('one run’s chat, and the user scope', async () => {
  const page = await chat(`/v1/threads/${F}/runs/${R2}/messages`, {});
  assert.deepEqual(page.messages.map(compact), EXPECTED.slice(5));
  const g = await client.listChatMessages({ thread_id: F, run_id: R1 });
  assert.deepEqual(
    g.messages.map((m) => m.id),
    EXPECTED.slice(0, 5).map((e) => e[1]),
  );
  assert.equal((await chat(`/v1/threads/${F}/messages`, { user_id: 'someone-else' })).messages.length, 0);
  assert.equal((await chat(`/v1/threads/${F}/messages`, { user_id: 'u1' })).messages.length, 9);
});

test('interleaved messages come in parts with one id, every event on exactly one page; anonymous chunks group', async () => {
  const t = randomName('il-');
  const chunk = (n: number, id: string | undefined, text: string) =>
    ev(t, 'r', n, { type: 'ai_chunk', content: { content: text }, metadata: id === undefined ? {} : { id } });
  await stack.client.publish(
    [
      chunk(1, 'A', 'x1'),
      chunk(2, 'B', 'y1'),
      chunk(3, 'A', 'x2'),
      chunk(4, 'B', 'y2'),
      chunk(5, 'A', 'x3'),
      ev(t, 'r', 6, { type: 'llm_end', category: 'TRACE' }),
      chunk(7, undefined, 'an'),
      chunk(8, undefined, 'on'),
      ev(t, 'r', 9, {
        type: 'tool_call',
        category: 'TRACE',
        content: { call_id: 'k', name: 'calc', arguments: { x: 1 } },
      }),
      ev(t, 'r', 10, {
        type: 'tool_result',
        content: { call_id: 'k', content: [{ type: 'text', text: '42' }] },
      }),
      chunk(11, undefined, 'ymous'),
      ev(t, 'r', 12, { type: 'ai_message', content: { content: 'whole' }, metadata: { id: 'W' } }),
    ],
    'PERSISTED',
  );
  const whole = await chat(`/v1/threads/${t}/messages`, {});
  assert.deepEqual(
    whole.messages.map((m) => [m.role, m.id, m.content, m.first_seq, m.last_seq, m.event_count]),
    [
      ['assistant', 'A', 'x1x2x3', 1, 5, 3],
      ['assistant', 'B', 'y1y2', 2, 4, 2],
      ['assistant', 'seq-7', 'anon', 7, 9, 3],
      ['tool', 'k', '42', 10, 10, 1],
      ['assistant', 'seq-11', 'ymous', 11, 11, 1],
      ['assistant', 'W', 'whole', 12, 12, 1],
    ],
  );
  assert.deepEqual(whole.messages[2]?.tool_calls, [{ id: 'k', name: 'calc', arguments: '{"x":1}', seq: 9 }]);
  assert.equal(whole.messages[3]?.name, 'calc');

  // One message a page: every event lands on exactly one page; merging parts by id gives the whole text.
  const parts: ChatJson[] = [];
  let after = 0;
  for (let i = 0; i < 30; i++) {
    const page = await chat(`/v1/threads/${t}/messages`, { after_seq: after, limit: 1 });
    parts.push(...page.messages);
    after = page.next_after_seq as number;
    if (!page.has_more) break;
  }
  assert.equal(
    parts.reduce((n, m) => n + m.event_count, 0),
    11,
    'the 11 chat events, each once',
  );
  const merged = new Map<string, string>();
  for (const m of parts) merged.set(m.id, (merged.get(m.id) ?? '') + m.content);
  assert.equal(merged.get('A'), 'x1x2x3');
  assert.equal(merged.get('B'), 'y1y2');
});
