// Pure pieces of the SSE transport: framing, cutting content out of an event's JSON,
// query parsing, LangGraph stream modes and the run statuses the LangGraph routes report.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { eventJson, type StoredEvent } from '../src/domain/event.js';
import { classify, langGraphStatus } from '../src/domain/run-lifecycle.js';
import { eventJsonParts } from '../src/fanout/core/event-json-parts.js';
import { LangGraphDialect, langGraphMode, parseStreamModes } from '../src/fanout/langgraph/join.js';
import { lastEventIdSeq, parseStreamQuery } from '../src/fanout/sse/params.js';
import { formatSse } from '../src/fanout/sse/stream.js';

function stored(content_json: string, metadata_json = '{}', event_type = 'x'): StoredEvent {
  return {
    seq: 7,
    offset: 9,
    thread_id: 't',
    run_id: 'r',
    event_id: 'e',
    event_type,
    category: 'message',
    user_id: '',
    created_at: '2026-01-01T00:00:00.000Z',
    content_json,
    metadata_json,
  };
}

test('eventJsonParts cuts out the exact content and metadata texts, whatever they hold', () => {
  const cases: [string, string, string?][] = [
    ['{"a":1}', '{}'],
    ['{"a":1,"metadata":{"x":"},\\"metadata\\":"}}', '{"metadata":{"y":[1,2]}}'],
    ['" ,\\"content\\": {}"', '{}', 'a,"content":'],
    ['  [1, {"b": [true, null]}, "]"]  ', '{ }'],
    ['-12.5e3', '{}'],
    ['null', '{"k":"v"}'],
    ['{\n  "pretty": "yes"\n}', '{}'],
  ];
  for (const [content, metadata, type] of cases) {
    const parts = eventJsonParts(eventJson(stored(content, metadata, type)));
    assert.equal(parts.content, content.trim(), content);
    assert.equal(parts.metadata, metadata.trim(), content);
    assert.deepEqual(JSON.parse(parts.content), JSON.parse(content));
  }
});

test('formatSse writes fields in order and splits line breaks into data lines', () => {
  assert.equal(
    formatSse({ id: 3, event: 'ai_chunk', data: '{"a":1}' }),
    'id: 3\nevent: ai_chunk\ndata: {"a":1}\n\n',
  );
  assert.equal(formatSse({ comment: 'keep-alive' }), ': keep-alive\n\n');
  assert.equal(formatSse({ comment: 'keep-alive', id: 9 }), ': keep-alive\nid: 9\n\n');
  assert.equal(formatSse({ data: '{\n"a":\r\n1\r}' }), 'data: {\ndata: "a":\ndata: 1\ndata: }\n\n');
});

test('parseStreamQuery: one cursor at most, Last-Event-ID wins, lists are comma-separated or repeated', () => {
  const q = (s: string, h?: string) => parseStreamQuery(new URL(`http://x/v1/threads/t/stream${s}`), h);
  assert.deepEqual(q('').start, { kind: 'after_seq', seq: 0 });
  assert.deepEqual(q('?live_only=true').start, { kind: 'live' });
  assert.deepEqual(q('?live_only=false').start, { kind: 'after_seq', seq: 0 });
  assert.deepEqual(q('?from_offset=5').start, { kind: 'from_offset', offset: 5 });
  assert.deepEqual(q('?live_only=1', '12'), {
    start: { kind: 'after_seq', seq: 12 },
    filter: q('').filter,
    view: 'events',
    resumed: true,
  });
  assert.equal(q('?view=chat').view, 'chat');
  assert.throws(
    () => q('?aftr_seq=3'),
    /^InvalidArgumentError: aftr_seq: is not a field of the stream query/,
  );
  const f = q('?categories=message,trace&event_types=a&event_types=b,c&run_id=r1').filter;
  assert.deepEqual([...(f.categories ?? [])], ['message', 'trace']);
  assert.deepEqual([...(f.eventTypes ?? [])], ['a', 'b', 'c']);
  assert.equal(f.runId, 'r1');
  assert.throws(
    () => q('?after_seq=1&live_only=true'),
    /^InvalidArgumentError: live_only: cannot be combined/,
  );
  assert.throws(() => q('?event_types=a,,b'), /event_types/);
  assert.equal(lastEventIdSeq(undefined), undefined);
  assert.equal(lastEventIdSeq(' '), undefined);
  assert.equal(lastEventIdSeq('-1', true), 0);
  assert.throws(() => lastEventIdSeq('-1'), /Last-Event-ID/);
  assert.throws(() => lastEventIdSeq('1e3'), /Last-Event-ID/);
});

test('LangGraph stream modes: names, subgraph namespaces, and the accepted spellings of stream_mode', () => {
  assert.equal(langGraphMode('updates|agent:1|tools'), 'updates');
  assert.equal(langGraphMode('messages'), 'messages-tuple');
  assert.equal(langGraphMode('messages/partial'), 'messages');
  assert.equal(langGraphMode('ai_chunk'), undefined);
  const modes = (q: string) => [...(parseStreamModes(new URL(`http://x/?${q}`)) ?? [])];
  assert.deepEqual(modes('stream_mode=values&stream_mode=updates'), ['values', 'updates']);
  assert.deepEqual(modes('stream_mode=values,custom'), ['values', 'custom']);
  assert.deepEqual(modes(`stream_mode=${encodeURIComponent('["events","debug"]')}`), ['events', 'debug']);
  assert.equal(parseStreamModes(new URL('http://x/')), undefined);
  assert.throws(() => modes('stream_mode=everything'), /^InvalidArgumentError: stream_mode/);
});

test('LangGraph statuses come from the one run lifecycle: the event type, and an `end`’s content', () => {
  const status = (eventType: string, content: unknown) => {
    const signal = classify('lifecycle', eventType, JSON.stringify(content));
    assert.equal(signal.kind, 'terminal', eventType);
    return langGraphStatus((signal as { status: Parameters<typeof langGraphStatus>[0] }).status);
  };
  assert.equal(status('end', {}), 'success');
  assert.equal(status('run_end', { status: 'error' }), 'error');
  assert.equal(status('end', { status: 'failed' }), 'error', 'History says error: so does LangGraph');
  assert.equal(status('run_end', { status: 'weird' }), 'success');
  assert.equal(status('error', null), 'error');
  assert.equal(status('run_cancelled', 'x'), 'interrupted', 'LangGraph has no cancelled');
  assert.equal(status('interrupted', { status: 'timeout' }), 'interrupted');
});

test('the LangGraph dialect keeps `end`/`error` outside lifecycle from ending the SDK stream', () => {
  const d = new LangGraphDialect('t', 'r', undefined);
  const e = (event_type: string, category: string, content = '{"k":1}') => {
    const json = eventJson({ ...stored(content, '{}', event_type), category: category as 'message' });
    return { seq: 7, run_id: 'r', category, event_type, json: () => json };
  };
  assert.equal(d.event(e('end', 'message'))[0]?.event, 'custom');
  assert.equal(d.event(e('error', 'trace'))[0]?.event, 'custom');
  // A terminal lifecycle event is no part of its own: the run's end, when it is one, is.
  assert.deepEqual(d.event(e('error', 'lifecycle', '{"error":"Boom","message":"it broke"}')), []);
  assert.deepEqual(
    d.end('r', 7, 'error').map((f) => [f.event, JSON.parse(f.data ?? 'null')]),
    [
      ['error', { error: 'Boom', message: 'it broke' }],
      ['end', { run_id: 'r', status: 'error' }],
    ],
  );
  assert.deepEqual(
    d.end('r', 9, 'success').map((f) => f.event),
    ['end'],
  );
});
