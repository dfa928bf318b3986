// Fuzzing the query strings and Last-Event-ID values of the SSE stream
// (`GET /v1/threads/{t}/stream`) and the LangGraph routes (`GET /threads/{t}/runs/{r}/stream`,
// `GET /threads/{t}/runs/{r}`). The broker is a child process.
//
// The oracle is docs/protocol.md §8, §10 and §11 applied to the thread's stored rows (read
// from Postgres before each case): a bad parameter or Last-Event-ID is a 400 naming it; a
// cursor past the head is 416 cursor_ahead; otherwise the stream is exactly the events after
// the cursor that pass the filter (v1: `id`/`event`/`data` per event, then `live` at the head,
// or `end` for a run that ends; LangGraph: the parts of the mapping table, then an id-only
// block at the head, or `end`), and a run whose end is already behind the cursor gets just
// `end` (204 on a v1 reconnect).
//
// FUZZ_SEED overrides the seed, FUZZ_SCALE multiplies the case counts, FUZZ_COLLECT=1 lists
// every distinct failure instead of stopping at the first.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import { IngestClient } from '../src/client/ingest-client.js';
import {
  assertServing,
  Findings,
  FuzzBroker,
  fcParams,
  fuzzBody,
  fuzzRuns,
  fuzzSeed,
} from './helpers/fuzz.js';
import { type HttpCase, judge, send } from './helpers/http-fuzz.js';
import { describeOutcome, type RawOutcome } from './helpers/raw-http.js';
import { waitFor } from './helpers/wait.js';

/** Read by the v1 stream cases; nothing writes to it. */
const SSE_THREAD = 'fz-sse-thread';
/** Read by the LangGraph cases; `cancel_on_disconnect=1` stores cancel_requested events here. */
const LG_THREAD = 'fz-lg-thread';
const EMPTY_THREAD = 'fz-sse-empty';
const RUN = 'fz-run';
const ENDED = 'fz-ended';
const FAILED = 'fz-failed';
/** Cursors and offsets this far out are past anything the cases can write. */
const FAR = 1_000_000_000;

const ID = /^[A-Za-z0-9_-]{1,128}$/;
const EVENT_TYPE = /^[\x21-\x7e]{1,64}$/;
const CATEGORY_NAMES = ['message', 'trace', 'lifecycle'] as const;
const TERMINAL = new Set([
  'end',
  'error',
  'cancelled',
  'interrupted',
  'run_end',
  'run_error',
  'run_cancelled',
  'run_interrupted',
]);
const STREAM_MODES = [
  'values',
  'updates',
  'messages',
  'messages-tuple',
  'custom',
  'events',
  'debug',
  'tasks',
  'checkpoints',
  'tools',
  'lifecycle',
];
/** The stream mode of each LangGraph part name (docs/protocol.md §11). */
const PART_MODE: Record<string, string> = {
  values: 'values',
  updates: 'updates',
  messages: 'messages-tuple',
  'messages/partial': 'messages',
  'messages/complete': 'messages',
  'messages/metadata': 'messages',
  custom: 'custom',
  events: 'events',
  debug: 'debug',
  tasks: 'tasks',
  checkpoints: 'checkpoints',
  tools: 'tools',
  lifecycle: 'lifecycle',
};

/** The fixture, in seq order: runs RUN (running), ENDED (success) and FAILED (error), LangGraph and native parts. */
const FIXTURE: { run: string; type: string; cat: 'MESSAGE' | 'TRACE' | 'LIFECYCLE'; content: unknown }[] = [
  { run: RUN, type: 'run_start', cat: 'LIFECYCLE', content: { assistant_id: 'agent' } },
  { run: RUN, type: 'values', cat: 'MESSAGE', content: { v: 1 } },
  { run: ENDED, type: 'run_start', cat: 'LIFECYCLE', content: {} },
  { run: ENDED, type: 'ai_chunk', cat: 'MESSAGE', content: { content: 'hi' } },
  { run: ENDED, type: 'run_end', cat: 'LIFECYCLE', content: { status: 'success' } },
  { run: RUN, type: 'updates|sub', cat: 'TRACE', content: { u: 2 } },
  { run: RUN, type: 'ai_chunk', cat: 'MESSAGE', content: { content: 'x' } },
  { run: FAILED, type: 'metadata', cat: 'TRACE', content: { run_id: 'ignored' } },
  { run: FAILED, type: 'messages/partial', cat: 'MESSAGE', content: [1] },
  { run: FAILED, type: 'run_error', cat: 'LIFECYCLE', content: { error: 'Boom', message: 'it broke' } },
  { run: RUN, type: 'feedback', cat: 'TRACE', content: { score: 1 } },
  { run: RUN, type: 'end', cat: 'MESSAGE', content: { not: 'terminal' } },
];

let b: FuzzBroker;
/** The largest stream offset of the fixture's rows: from_offset up to it + 1 is in the log. */
let maxOffset = 0;

before(async () => {
  b = await FuzzBroker.start();
  const client = new IngestClient(b.grpcTarget);
  try {
    for (const thread of [SSE_THREAD, LG_THREAD]) {
      const acks = await client.publish(
        FIXTURE.map((f, i) => ({
          thread_id: thread,
          run_id: f.run,
          event_id: `fx-${i + 1}`,
          event_type: f.type,
          category: f.cat,
          content_json: JSON.stringify(f.content),
        })),
        'PERSISTED',
      );
      assert.deepEqual(
        acks.map((a) => a.seq),
        FIXTURE.map((_, i) => i + 1),
      );
      maxOffset = Math.max(maxOffset, ...acks.map((a) => a.offset));
    }
  } finally {
    client.close();
  }
});
after(async () => {
  await b?.[Symbol.asyncDispose]();
});

// ---------------------------------------------------------------------------------------------
// The thread as stored, and SSE parsing

interface Row {
  readonly seq: number;
  readonly run_id: string;
  readonly event_type: string;
  readonly category: (typeof CATEGORY_NAMES)[number];
  readonly content: unknown;
  readonly offset: number;
}

async function rowsOf(thread: string): Promise<Row[]> {
  const { rows } = await b.servers.db.query<{
    seq: string;
    run_id: string;
    event_type: string;
    category: number;
    content: string;
    stream_offset: string;
  }>(
    'SELECT seq, run_id, event_type, category, content::text AS content, stream_offset FROM run_events WHERE thread_id = $1 ORDER BY seq',
    [thread],
  );
  return rows.map((r) => ({
    seq: Number(r.seq),
    run_id: r.run_id,
    event_type: r.event_type,
    category: CATEGORY_NAMES[r.category - 1] as Row['category'],
    content: JSON.parse(r.content) as unknown,
    offset: Number(r.stream_offset),
  }));
}

const isTerminal = (r: Row): boolean => r.category === 'lifecycle' && TERMINAL.has(r.event_type);
const headOf = (rows: readonly Row[]): number => rows.at(-1)?.seq ?? 0;

interface Block {
  readonly id?: string;
  readonly event?: string;
  readonly data?: string;
  readonly comments: string[];
}

/** The complete blocks of an SSE body (WHATWG HTML §9.2.6, for the fields used here). */
function sseBlocks(text: string): Block[] {
  const blocks: Block[] = [];
  const parts = text.split(/\r\n\r\n|\n\n|\r\r/);
  parts.pop(); // the incomplete tail
  for (const part of parts) {
    let id: string | undefined;
    let event: string | undefined;
    const data: string[] = [];
    const comments: string[] = [];
    for (const line of part.split(/\r\n|\n|\r/)) {
      if (line.startsWith(':')) {
        comments.push(line.slice(1).trim());
        continue;
      }
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'id') id = value;
      else if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
    }
    blocks.push({
      ...(id === undefined ? {} : { id }),
      ...(event === undefined ? {} : { event }),
      ...(data.length > 0 ? { data: data.join('\n') } : {}),
      comments,
    });
  }
  return blocks;
}

/**
 * The stream reached a point where nothing more comes before live events: a control frame
 * (v1: its data has a `type` key, which a stored event's never has), LangGraph's `end`, or
 * LangGraph's id-only block.
 */
function settled(body: string, langgraph: boolean): boolean {
  return sseBlocks(body).some((k) => {
    if (langgraph)
      return k.event === 'end' || (k.id !== undefined && k.event === undefined && k.data === undefined);
    const d = dataOf(k);
    return d !== null && typeof d === 'object' && 'type' in d;
  });
}

// ---------------------------------------------------------------------------------------------
// Oracles

interface Fault {
  readonly kind: 'fault';
  readonly fields: string[];
}
/** A frame as the client should see it: `id`, `event`, and what to check of `data`. */
interface Frame {
  readonly id?: string;
  readonly event?: string;
  readonly data?: (d: unknown) => boolean;
  readonly what: string;
}
type Outcome =
  | Fault
  | { kind: 'status'; status: number; code: string }
  | { kind: 'stream'; frames: Frame[]; ends: boolean }
  | { kind: 'no-content' };

function intOk(v: string, min: number): boolean {
  return v === '' || (/^\d+$/.test(v) && Number.isSafeInteger(Number(v)) && Number(v) >= min);
}

/** `Last-Event-ID` as Node hands it over: repeated headers joined with ", ", then trimmed. */
function lastEventIdOf(values: readonly string[]): string | undefined {
  if (values.length === 0) return undefined;
  return values.join(', ').trim();
}

function listFault(
  q: URLSearchParams,
  name: string,
  ok: (v: string) => boolean,
): boolean | string[] | undefined {
  const all = q.getAll(name);
  if (all.length === 0) return undefined;
  const values = all.flatMap((v) => v.split(',')).map((v) => v.trim());
  if (values.some((v) => v === '') || values.length > 64 || !values.every(ok)) return true;
  return values;
}

/** v1 SSE (docs/protocol.md §10): faults, else the exact frames. */
/** The parameters the v1 stream takes; any other is refused, named. */
const V1_PARAMS = new Set([
  'after_seq',
  'from_offset',
  'live_only',
  'run_id',
  'categories',
  'event_types',
  'view',
  'access_token',
]);

function v1Oracle(q: URLSearchParams, lastEventId: string | undefined, rows: readonly Row[]): Outcome {
  // An unknown parameter is named, or (not shaped like a field) reported as the query's.
  const fields: string[] = [...q.keys()]
    .filter((k) => !V1_PARAMS.has(k))
    .map((k) => (/^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(k) ? k : 'query'));
  // A single-valued parameter given twice is refused, named; lists may repeat.
  const keys = [...q.keys()];
  for (const k of new Set(keys)) {
    if (!['categories', 'event_types'].includes(k) && keys.filter((x) => x === k).length > 1) fields.push(k);
  }
  const view = q.get('view');
  if (view !== null && view !== '' && view !== 'events' && view !== 'chat') fields.push('view');
  const given = ['after_seq', 'from_offset', 'live_only'].filter((k) => q.has(k));
  if (given.length > 1) fields.push(...given.slice(1));
  const afterRaw = q.get('after_seq');
  const offsetRaw = q.get('from_offset');
  const liveRaw = q.get('live_only');
  if (afterRaw !== null && !intOk(afterRaw, 0)) fields.push('after_seq');
  if (offsetRaw !== null && !intOk(offsetRaw, 1)) fields.push('from_offset');
  if (liveRaw !== null && !['true', '1', 'false', '0'].includes(liveRaw)) fields.push('live_only');
  const runId = q.get('run_id');
  if (runId !== null && !ID.test(runId)) fields.push('run_id');
  const cats = listFault(q, 'categories', (v) => (CATEGORY_NAMES as readonly string[]).includes(v));
  if (cats === true) fields.push('categories');
  const types = listFault(q, 'event_types', (v) => EVENT_TYPE.test(v));
  if (types === true) fields.push('event_types');
  const leid = lastEventId === '' ? undefined : lastEventId;
  if (leid !== undefined && !(/^\d+$/.test(leid) && Number.isSafeInteger(Number(leid))))
    fields.push('Last-Event-ID');
  if (fields.length > 0) return { kind: 'fault', fields };

  const head = headOf(rows);
  let cursor: number;
  let kind: 'after_seq' | 'from_offset' | 'live';
  if (leid !== undefined) {
    cursor = Number(leid);
    kind = 'after_seq';
  } else if (afterRaw !== null) {
    cursor = afterRaw === '' ? 0 : Number(afterRaw);
    kind = 'after_seq';
  } else if (offsetRaw !== null) {
    const k = offsetRaw === '' ? 1 : Number(offsetRaw);
    if (k > FAR) return { kind: 'status', status: 416, code: 'cursor_ahead' };
    if (k > maxOffset + 1) return { kind: 'status', status: -1, code: 'either' };
    const first = rows.find((r) => r.offset >= k);
    cursor = first ? first.seq - 1 : head;
    kind = 'from_offset';
  } else if (liveRaw === 'true' || liveRaw === '1') {
    cursor = head;
    kind = 'live';
  } else {
    cursor = 0;
    kind = 'after_seq';
  }
  const run = runId ?? undefined;
  const terminal = run === undefined ? undefined : rows.find((r) => r.run_id === run && isTerminal(r));
  const endFrame = (seq: number): Frame => ({
    id: String(seq),
    event: 'end',
    data: (d) =>
      JSON.stringify(d) ===
      JSON.stringify({ type: 'end', run_id: run, seq, status: terminal ? runStatus(terminal) : '' }),
    what: `end at ${seq}`,
  });
  if (terminal && kind === 'after_seq' && cursor > 0 && terminal.seq <= cursor) {
    return leid !== undefined
      ? { kind: 'no-content' }
      : { kind: 'stream', frames: [endFrame(terminal.seq)], ends: true };
  }
  if (kind === 'after_seq' && cursor > head) return { kind: 'status', status: 416, code: 'cursor_ahead' };
  if (terminal && terminal.seq <= cursor)
    return { kind: 'stream', frames: [endFrame(terminal.seq)], ends: true };
  const frames: Frame[] = [];
  const match = (r: Row): boolean =>
    (run === undefined || r.run_id === run) &&
    (!Array.isArray(cats) || cats.includes(r.category)) &&
    (!Array.isArray(types) || types.includes(r.event_type));
  for (const r of rows) {
    if (r.seq <= cursor) continue;
    if (match(r)) {
      frames.push({
        id: String(r.seq),
        event: r.event_type,
        data: (d) => (d as { seq?: unknown; event_type?: unknown }).seq === r.seq,
        what: `event ${r.seq} (${r.event_type})`,
      });
    }
    if (terminal && r.seq === terminal.seq)
      return { kind: 'stream', frames: [...frames, endFrame(r.seq)], ends: true };
  }
  frames.push({
    id: String(head),
    event: 'live',
    data: (d) => JSON.stringify(d) === JSON.stringify({ type: 'live', seq: head }),
    what: `live at ${head}`,
  });
  return { kind: 'stream', frames, ends: false };
}

/** The status a run ends with at its terminal event (docs/protocol.md, the run lifecycle). */
function runStatus(r: Row): string {
  if (r.event_type === 'error' || r.event_type === 'run_error') return 'error';
  if (r.event_type === 'cancelled' || r.event_type === 'run_cancelled') return 'cancelled';
  if (r.event_type === 'interrupted' || r.event_type === 'run_interrupted') return 'interrupted';
  const said = (r.content as { status?: unknown } | null)?.status;
  switch (typeof said === 'string' ? said.toLowerCase() : '') {
    case 'error':
    case 'failed':
    case 'failure':
    case 'timeout':
      return 'error';
    case 'cancelled':
    case 'canceled':
    case 'aborted':
      return 'cancelled';
    case 'interrupted':
    case 'interrupt':
      return 'interrupted';
    default:
      return 'success';
  }
}

/** The same in LangGraph's words: it has no `cancelled`. */
function finalStatus(r: Row): string {
  const s = runStatus(r);
  return s === 'cancelled' ? 'interrupted' : s;
}

function lgTerminalFrames(run: string, r: Row): Frame[] {
  const status = finalStatus(r);
  const end: Frame = {
    id: String(r.seq),
    event: 'end',
    data: (d) => JSON.stringify(d) === JSON.stringify({ run_id: run, status }),
    what: `end (${status}) at ${r.seq}`,
  };
  if (status !== 'error') return [end];
  const c = (r.content ?? {}) as { error?: unknown; message?: unknown };
  const error = {
    error: typeof c.error === 'string' ? c.error : 'Error',
    message: typeof c.message === 'string' ? c.message : `run ${run} failed`,
  };
  return [
    {
      id: String(r.seq),
      event: 'error',
      data: (d) => JSON.stringify(d) === JSON.stringify(error),
      what: `error at ${r.seq}`,
    },
    end,
  ];
}

/** The LangGraph join (docs/protocol.md §11): faults, else the exact parts. */
function joinOracle(
  q: URLSearchParams,
  lastEventId: string | undefined,
  thread: string,
  run: string,
  rows: readonly Row[],
): Outcome {
  const fields: string[] = [];
  let modes: Set<string> | undefined;
  const rawModes = q.getAll('stream_mode');
  if (rawModes.length > 0) {
    const values: unknown[] = [];
    let bad = false;
    for (const v of rawModes) {
      if (v.trimStart().startsWith('[')) {
        try {
          const parsed = JSON.parse(v) as unknown;
          values.push(...(Array.isArray(parsed) ? parsed : [parsed]));
        } catch {
          bad = true;
        }
      } else values.push(...v.split(',').map((s) => s.trim()));
    }
    if (bad || !values.every((v) => typeof v === 'string' && STREAM_MODES.includes(v)))
      fields.push('stream_mode');
    else modes = new Set(values as string[]);
  }
  const cancel = q.get('cancel_on_disconnect');
  if (cancel !== null && !['', '0', 'false', '1', 'true'].includes(cancel))
    fields.push('cancel_on_disconnect');
  const leid = lastEventId === '' ? undefined : lastEventId;
  if (leid !== undefined && leid !== '-1' && !(/^\d+$/.test(leid) && Number.isSafeInteger(Number(leid)))) {
    fields.push('Last-Event-ID');
  }
  if (fields.length > 0) return { kind: 'fault', fields };

  const head = headOf(rows);
  const after = leid === undefined ? head : leid === '-1' ? 0 : Number(leid);
  const mine = rows.filter((r) => r.run_id === run);
  const terminal = mine.find(isTerminal);
  // Ended at or before the start point: "just the `end` part", even for a failed run.
  if (after > 0 && terminal && terminal.seq <= after) {
    return { kind: 'stream', frames: lgTerminalFrames(run, terminal).slice(-1), ends: true };
  }
  if (after > head) return { kind: 'status', status: 416, code: 'cursor_ahead' };
  const wants = (mode: string): boolean => modes === undefined || modes.has(mode);
  const frames: Frame[] = [];
  for (const r of mine) {
    if (r.seq <= after) continue;
    if (isTerminal(r))
      return { kind: 'stream', frames: [...frames, ...lgTerminalFrames(run, r)], ends: true };
    if (r.event_type === 'metadata' || (r.event_type === 'run_start' && r.category === 'lifecycle')) {
      const base =
        r.content !== null && typeof r.content === 'object' && !Array.isArray(r.content) ? r.content : {};
      const expected = { ...base, run_id: run, thread_id: thread };
      frames.push({
        id: String(r.seq),
        event: 'metadata',
        data: (d) => JSON.stringify(d) === JSON.stringify(expected),
        what: `metadata at ${r.seq}`,
      });
      continue;
    }
    if (r.event_type === 'feedback') {
      frames.push({ id: String(r.seq), event: 'feedback', what: `feedback at ${r.seq}` });
      continue;
    }
    const bar = r.event_type.indexOf('|');
    const mode =
      r.event_type === 'end' || r.event_type === 'error'
        ? undefined
        : PART_MODE[bar < 0 ? r.event_type : r.event_type.slice(0, bar)];
    if (mode !== undefined) {
      if (wants(mode)) {
        frames.push({
          id: String(r.seq),
          event: r.event_type,
          data: (d) => JSON.stringify(d) === JSON.stringify(r.content),
          what: `${r.event_type} at ${r.seq}`,
        });
      }
    } else if (wants('custom')) {
      frames.push({
        id: String(r.seq),
        event: 'custom',
        data: (d) => (d as { seq?: unknown }).seq === r.seq,
        what: `custom (${r.event_type}) at ${r.seq}`,
      });
    }
  }
  frames.push({ id: String(head), what: `the id-only block at ${head}` });
  return { kind: 'stream', frames, ends: false };
}

// ---------------------------------------------------------------------------------------------
// Judging an answer against the oracle

function dataOf(block: Block): unknown {
  if (block.data === undefined) return undefined;
  try {
    return JSON.parse(block.data);
  } catch {
    return Symbol('not JSON');
  }
}

function judgeStream(c: HttpCase, o: RawOutcome, expected: Outcome, langgraph: boolean): string[] {
  const base = judge(c, o, { upgrade: false });
  const problems = [...base.problems];
  if (o.kind !== 'response') return problems;
  const res = o.res;
  const body = res.body.toString('utf8');
  const errorMessage = (): string => {
    try {
      return String((JSON.parse(body) as { error?: { message?: string } }).error?.message ?? '');
    } catch {
      return '';
    }
  };
  switch (expected.kind) {
    case 'fault': {
      const field = /^([A-Za-z_][A-Za-z0-9_.[\]-]*): /.exec(errorMessage())?.[1];
      if (res.status !== 400 || field === undefined || !expected.fields.includes(field)) {
        problems.push(
          `expected 400 naming ${expected.fields.join(' or ')}; got ${res.status} ${JSON.stringify(body.slice(0, 200))}`,
        );
      }
      break;
    }
    case 'status':
      if (expected.status === -1) break; // either answer is right
      if (res.status !== expected.status || !body.includes(`"code":"${expected.code}"`)) {
        problems.push(
          `expected ${expected.status} ${expected.code}; got ${res.status} ${JSON.stringify(body.slice(0, 200))}`,
        );
      }
      break;
    case 'no-content':
      if (res.status !== 204)
        problems.push(`expected 204 (a reconnect after the run's end); got ${res.status}`);
      break;
    case 'stream': {
      if (res.status !== 200 || !(res.headers['content-type'] ?? '').startsWith('text/event-stream')) {
        problems.push(`expected a 200 event stream; got ${res.status} ${JSON.stringify(body.slice(0, 200))}`);
        break;
      }
      if (langgraph && !(res.headers.location ?? '').startsWith('/threads/'))
        problems.push('no Location header');
      const blocks = sseBlocks(body).filter(
        (k) => k.id !== undefined || k.event !== undefined || k.data !== undefined,
      );
      const want = expected.frames;
      for (let i = 0; i < Math.max(want.length, blocks.length); i++) {
        const w = want[i];
        const g = blocks[i];
        if (!w) {
          if (expected.ends || res.streaming) problems.push(`an unexpected block ${JSON.stringify(g)}`);
          break;
        }
        if (!g) {
          problems.push(`missing ${w.what}; got ${JSON.stringify(blocks).slice(0, 400)}`);
          break;
        }
        if (g.id !== w.id || g.event !== w.event || (w.data && !w.data(dataOf(g)))) {
          problems.push(`expected ${w.what}, got ${JSON.stringify(g).slice(0, 300)}`);
          break;
        }
      }
      if (expected.ends && res.streaming) problems.push('the response did not end after `end`');
      if (!expected.ends && !res.streaming)
        problems.push('the response ended, though the stream should go on live');
      break;
    }
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------
// Generators

const NUM = [
  '0',
  '1',
  '3',
  '5',
  '7',
  '12',
  '13',
  '-1',
  '-0',
  '1.5',
  '1e1',
  '0x1',
  '+1',
  '01',
  '%202',
  '9007199254740991',
  '9007199254740992',
  '99999999999999999999',
  '',
  String(FAR + 1),
];
const HOSTILE = [
  '%',
  '%E0%A4%A',
  '%zz',
  '%00',
  '%FF',
  '%ED%A0%80',
  '+',
  '%2C',
  ',',
  ',,',
  '"',
  "'",
  'null',
  '[]',
  '[',
  '[1]',
  '{}',
  'true',
  'false',
  'TRUE',
  'yes',
];
const numValue = fc.oneof(fc.constantFrom(...NUM), fc.nat({ max: 20 }).map(String));
const value = (name: string): fc.Arbitrary<string> => {
  const typed: Record<string, fc.Arbitrary<string>> = {
    after_seq: numValue,
    from_offset: fc.oneof(numValue, fc.constant(String(maxOffset)), fc.constant(String(maxOffset + 1))),
    live_only: fc.constantFrom('true', '1', 'false', '0', '', 'yes', 'True', '2'),
    run_id: fc.constantFrom(RUN, ENDED, FAILED, 'fz-none', '', 'a.b', 'x'.repeat(129), '%41'),
    categories: fc.constantFrom(
      'message',
      'trace',
      'lifecycle',
      'message,trace',
      'message,',
      ',message',
      'MESSAGE',
      'chat',
      '%20message',
      Array(65).fill('trace').join(','),
    ),
    event_types: fc.constantFrom(
      'ai_chunk',
      'run_end',
      'values,updates%7Csub',
      'a%20b',
      'x'.repeat(65),
      'ai_chunk,,x',
      'end',
    ),
    stream_mode: fc.constantFrom(
      'values',
      'custom',
      'updates',
      'messages',
      'messages-tuple',
      'values,custom',
      '["values","custom"]',
      '[',
      '["nope"]',
      '[1]',
      '"values"',
      'values,',
      '%5B%22custom%22%5D',
      'unknown',
      '%20values',
    ),
    cancel_on_disconnect: fc.constantFrom('0', '1', 'true', 'false', '', 'yes', '2'),
  };
  return fc.oneof(
    { weight: 4, arbitrary: typed[name] ?? fc.stringMatching(/^[A-Za-z0-9_-]{0,10}$/) },
    fc.constantFrom(...HOSTILE),
  );
};
const PARAMS = [
  'after_seq',
  'from_offset',
  'live_only',
  'run_id',
  'categories',
  'event_types',
  'stream_mode',
  'cancel_on_disconnect',
  'access_token',
  'namespace',
  'checkpoint_id',
  'foo',
  '%',
  'after_seq%00',
];
/** Built once the fixture's offsets are known. */
const queryArb = (): fc.Arbitrary<string> =>
  fc
    .array(
      fc.constantFrom(...PARAMS).chain((name) => value(name).map((v) => [name, v] as const)),
      { maxLength: 4 },
    )
    .map((ps) => (ps.length === 0 ? '' : `?${ps.map(([n, v]) => `${n}=${v}`).join('&')}`));
const lastEventIds = fc.oneof(
  { weight: 3, arbitrary: fc.constant<string[]>([]) },
  {
    weight: 4,
    arbitrary: fc
      .constantFrom(
        '0',
        '1',
        '3',
        '4',
        '5',
        '7',
        '10',
        '12',
        '13',
        '-1',
        '-0',
        '1e1',
        '0x1',
        'abc',
        '',
        '9007199254740991',
        '9007199254740992',
        String(FAR + 1),
      )
      .map((v) => [v]),
  },
  { weight: 1, arbitrary: fc.nat({ max: 14 }).map((n) => [String(n)]) },
  {
    weight: 1,
    arbitrary: fc.tuple(fc.constantFrom('1', '5', 'x'), fc.constantFrom('2', '')).map(([a, c]) => [a, c]),
  },
);

function sseCase(target: string, leids: readonly string[]): HttpCase {
  const headers: [string, string][] = [
    ['Host', '127.0.0.1'],
    ['Accept', 'text/event-stream'],
  ];
  for (const v of leids) headers.push(['Last-Event-ID', v]);
  return { method: 'GET', target, headers };
}

const findings = new Findings();
/** What the cases asked for, by the oracle's outcome: reported, so a skewed generator shows. */
const tally = new Map<string, number>();
function count(key: string): void {
  tally.set(key, (tally.get(key) ?? 0) + 1);
}
function reportTally(t: { diagnostic(m: string): void }): void {
  t.diagnostic(`cases by expected outcome: ${JSON.stringify(Object.fromEntries([...tally].sort()))}`);
  tally.clear();
}

async function runCase(
  label: string,
  c: HttpCase,
  expected: Outcome,
  langgraph: boolean,
): Promise<RawOutcome> {
  count(
    expected.kind === 'status'
      ? `${expected.status === -1 ? 'either' : expected.status}`
      : expected.kind === 'stream'
        ? `stream${expected.ends ? ' ending' : ''} of ${expected.frames.length}`.replace(
            /of \d{2,}/,
            'of 10+',
          )
        : expected.kind,
  );
  const o = await send(b.httpPort, c, { enough: (r) => settled(r.body.toString('utf8'), langgraph) });
  const suspicious = o.kind !== 'response' || o.res.status >= 500;
  if (suspicious ? !(await b.confirmAlive()) : !b.alive) {
    findings.fail(
      `${label}: the broker died`,
      `${c.target} ${JSON.stringify(c.headers)}\n${b.deathReport()}`,
    );
    return o;
  }
  const problems = judgeStream(c, o, expected, langgraph);
  if (problems.length > 0) {
    findings.fail(
      `${label}: ${expected.kind} → ${problems.map((p) => p.replace(/[;(].*$/s, '').replace(/\d+/g, 'N')).join('; ')}`,
      `${c.target} Last-Event-ID=${JSON.stringify(c.headers.filter(([n]) => n === 'Last-Event-ID').map(([, v]) => v))}\n→ ${describeOutcome(o, 600)}\n${problems.join('\n')}`,
    );
  }
  return o;
}

// ---------------------------------------------------------------------------------------------

test('SSE corpus: hand-picked queries and Last-Event-ID values on the v1 stream and the LangGraph routes', async (t) => {
  const v1: [string, string, string[]][] = [
    ['after_seq=%', '?after_seq=%', []],
    ['after_seq=-1', '?after_seq=-1', []],
    ['after_seq=2^53', '?after_seq=9007199254740992', []],
    ['after_seq past the head', '?after_seq=13', []],
    ['after_seq and live_only=false', '?after_seq=1&live_only=false', []],
    ['live_only=yes', '?live_only=yes', []],
    ['from_offset=0', '?from_offset=0', []],
    ['from_offset far past the log', `?from_offset=${FAR + 1}`, []],
    ['run_id empty', '?run_id=', []],
    ['categories with an empty value', '?categories=message,', []],
    ['65 categories', `?categories=${Array(65).fill('trace').join(',')}`, []],
    ['event_types with a space', '?event_types=a%20b', []],
    ['Last-Event-ID abc', '', ['abc']],
    ['Last-Event-ID -1 (not on v1)', '', ['-1']],
    ['Last-Event-ID 2^53', '', ['9007199254740992']],
    ['two Last-Event-ID headers', '', ['1', '2']],
    ['Last-Event-ID past the head', '', ['13']],
    ['Last-Event-ID wins over a bad-free query', '?live_only=1', ['3']],
    ['a reconnect after the run ended (204)', `?run_id=${ENDED}`, ['5']],
    ['after_seq past the run end (200, end only)', `?run_id=${ENDED}&after_seq=6`, []],
    ['the run ENDED from the start', `?run_id=${ENDED}`, []],
    ['filtered by category', '?categories=lifecycle&after_seq=2', []],
    ['live only', '?live_only=true', []],
  ];
  const lg: [string, string, string, string[]][] = [
    ['stream_mode not JSON', RUN, '?stream_mode=[', ['-1']],
    ['stream_mode unknown', RUN, '?stream_mode=nope', ['-1']],
    ['stream_mode JSON non-string', RUN, '?stream_mode=[1]', ['-1']],
    ['cancel_on_disconnect=yes', RUN, '?cancel_on_disconnect=yes', ['-1']],
    ['Last-Event-ID -2', RUN, '', ['-2']],
    ['Last-Event-ID past the head', RUN, '', [String(FAR + 1)]],
    ['replay a finished run', ENDED, '', ['-1']],
    ['join a finished run from now', ENDED, '', []],
    ['replay a failed run', FAILED, '?stream_mode=messages', ['-1']],
    ['replay a running run, values only', RUN, '?stream_mode=values', ['-1']],
    ['join a running run from now', RUN, '', []],
    ['a run with no events', 'fz-none', '', ['-1']],
  ];
  await fuzzBody(t, b, async () => {
    const rows = await rowsOf(SSE_THREAD);
    for (const [name, query, leids] of v1) {
      await t.test(`v1: ${name}`, async (st) => {
        await b.ensureUp();
        const q = new URL(`http://x/${query}`).searchParams;
        await runCase(
          'v1',
          sseCase(`/v1/threads/${SSE_THREAD}/stream${query}`, leids),
          v1Oracle(q, lastEventIdOf(leids), rows),
          false,
        );
        findings.report(st);
      });
    }
    for (const [name, run, query, leids] of lg) {
      await t.test(`LangGraph: ${name}`, async (st) => {
        await b.ensureUp();
        const q = new URL(`http://x/${query}`).searchParams;
        const lgRows = await rowsOf(LG_THREAD);
        const expected = joinOracle(q, lastEventIdOf(leids), LG_THREAD, run, lgRows);
        await runCase(
          'join',
          sseCase(`/threads/${LG_THREAD}/runs/${run}/stream${query}`, leids),
          expected,
          true,
        );
        findings.report(st);
      });
    }
  });
});

test('SSE property: v1 stream queries and Last-Event-ID values get a 400 naming the field, or exactly the documented stream', async (t) => {
  t.diagnostic(`FUZZ_SEED=${fuzzSeed()}`);
  await fuzzBody(t, b, async () => {
    const threads = fc.constantFrom(SSE_THREAD, SSE_THREAD, SSE_THREAD, EMPTY_THREAD);
    const rowsByThread = new Map([
      [SSE_THREAD, await rowsOf(SSE_THREAD)],
      [EMPTY_THREAD, [] as Row[]],
    ]);
    await fc.assert(
      fc.asyncProperty(threads, queryArb(), lastEventIds, async (thread, query, leids) => {
        await findings.before(b, fc.pre);
        const q = new URL(`http://x/${query}`).searchParams;
        const expected = v1Oracle(q, lastEventIdOf(leids), rowsByThread.get(thread) ?? []);
        await runCase('v1', sseCase(`/v1/threads/${thread}/stream${query}`, leids), expected, false);
      }),
      fcParams(900),
    );
    reportTally(t);
    findings.report(t);
  });
});

test('SSE property: LangGraph join queries and Last-Event-ID values get a 400 naming the field, or exactly the documented parts', async (t) => {
  await fuzzBody(t, b, async () => {
    const runs = fc.constantFrom(RUN, RUN, ENDED, FAILED, 'fz-none');
    let cancels = 0;
    await fc.assert(
      fc.asyncProperty(runs, queryArb(), lastEventIds, async (run, query, leids) => {
        await findings.before(b, fc.pre);
        const q = new URL(`http://x/${query}`).searchParams;
        const rows = await rowsOf(LG_THREAD);
        const expected = joinOracle(q, lastEventIdOf(leids), LG_THREAD, run, rows);
        const o = await runCase(
          'join',
          sseCase(`/threads/${LG_THREAD}/runs/${run}/stream${query}`, leids),
          expected,
          true,
        );
        // cancel_on_disconnect=1 on a running run: closing the stream stores a cancel_requested
        // event. Wait for it, so the next case reads the thread as it is.
        const cancel = q.get('cancel_on_disconnect');
        const running =
          rows.some((r) => r.run_id === run) && !rows.some((r) => r.run_id === run && isTerminal(r));
        if (
          (cancel === '1' || cancel === 'true') &&
          running &&
          expected.kind === 'stream' &&
          !expected.ends &&
          o.kind === 'response' &&
          o.res.streaming
        ) {
          const head = headOf(rows);
          cancels++;
          await waitFor(async () => headOf(await rowsOf(LG_THREAD)) > head, {
            what: 'the cancel_requested event of a cancel_on_disconnect join',
            timeoutMs: 30_000,
          }).catch((err: unknown) =>
            findings.fail('join: cancel_on_disconnect stored no cancel', String(err)),
          );
        }
      }),
      fcParams(700),
    );
    reportTally(t);
    t.diagnostic(`cancel_on_disconnect cancels stored: ${cancels}`);
    findings.report(t);
  });
});

test('SSE property: the LangGraph run status answers 200 with the status, or 404, whatever the query', async (t) => {
  await fuzzBody(t, b, async () => {
    const runs = fc.constantFrom(RUN, ENDED, FAILED, 'fz-none');
    await fc.assert(
      fc.asyncProperty(runs, queryArb(), lastEventIds, async (run, query, leids) => {
        await findings.before(b, fc.pre);
        const c = sseCase(`/threads/${LG_THREAD}/runs/${run}${query}`, leids);
        const o = await send(b.httpPort, c);
        if (!(await b.confirmAlive())) {
          findings.fail('run status: the broker died', b.deathReport());
          return;
        }
        const problems = judge(c, o, {
          upgrade: false,
          expect: { status: [run === 'fz-none' ? 404 : 200], why: 'run status' },
        }).problems;
        if (o.kind === 'response' && o.res.status === 200) {
          const body = JSON.parse(o.res.body.toString('utf8')) as { status?: string; run_id?: string };
          const want = run === RUN ? 'running' : run === ENDED ? 'success' : 'error';
          if (body.status !== want || body.run_id !== run)
            problems.push(`status ${body.status}, expected ${want}`);
        }
        if (problems.length > 0)
          findings.fail(`run status: ${problems.join('; ')}`, `${c.target}\n${describeOutcome(o)}`);
      }),
      fcParams(200),
    );
    findings.report(t);
  });
});

test('after the SSE fuzzing the broker is alive and serves a publish → WebSocket → History round trip', async (t) => {
  const crash = await b.ensureUp();
  if (crash) t.diagnostic(`restarted after a crash: ${crash.exit}`);
  t.diagnostic(`crashes during this file: ${b.crashes.length}; cases: ~${fuzzRuns(1800) + 35}`);
  for (const c of b.crashes) t.diagnostic(`crash of pid ${c.pid}: ${c.exit}\n${c.stderr.slice(-1500)}`);
  await assertServing(b);
  assert.equal(b.crashes.length, 0, 'the broker crashed during the SSE fuzzing (see the diagnostics)');
});
