// Fuzzing WebSocket frames after a good upgrade: random and mutated subscribe / unsubscribe /
// cancel frames (wrong types, huge, negative, float and NaN-ish cursors, unknown keys), any
// JSON value, deep JSON, binary frames, invalid UTF-8, frames at and over the size limit,
// and rapid subscribe / unsubscribe. The broker is a child process.
//
// What a correct broker does (docs/protocol.md §9): a frame it cannot accept gets an
// `{"type":"error","id":<the frame's id if a string, else null>,"code","message"}` frame,
// `invalid_argument` with `<field>: <problem>` for a malformed one, the field being the first
// problem in the documented order (id, thread_id, start, filters, on_disconnect, duplicate
// id); the connection stays open and answers the next frame. Only the documented closes end
// it: 1009 for a frame over RS_WS_MAX_PAYLOAD_BYTES, and (RFC 6455 §8.1) 1007 for a text
// frame that is not UTF-8. A valid subscribe is answered by its catch-up (events in seq order
// from its cursor), `live` or `end`, or a cursor error with its seq.
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
  FrameLog,
  FuzzBroker,
  fcParams,
  fuzzBody,
  fuzzRuns,
  fuzzSeed,
} from './helpers/fuzz.js';

/** Subscribed to: HEAD events, run RUN running, run ENDED ended at seq 5. Never written to by the cases. */
const THREAD = 'fz-ws-thread';
/** Cancelled: cancel frames may store events here. */
const CANCEL_THREAD = 'fz-ws-cancel';
/** Rapid subscribe/unsubscribe reads this one. */
const RAPID_THREAD = 'fz-ws-rapid';
const RUN = 'fz-run';
const ENDED = 'fz-ended';
const HEAD = 6;
/** The seq of ENDED's run_end. */
const ENDED_AT = 5;
const RAPID_HEAD = 4;
const MAX_PAYLOAD_BYTES = 64 * 1024; // RS_WS_MAX_PAYLOAD_BYTES default
/** Cursors this far past the head are ahead whatever the cases have added meanwhile. */
const FAR = 1_000_000_000;

const ID = /^[A-Za-z0-9_-]{1,128}$/;
const EVENT_TYPE = /^[\x21-\x7e]{1,64}$/;
const CATEGORIES = ['message', 'trace', 'lifecycle'];
/** Categories are an open set: any lower-case identifier (docs/protocol.md, categories). */
const CATEGORY_NAME = /^[a-z][a-z0-9_]{0,63}$/;
const SERVER_FRAME_TYPES = ['event', 'live', 'end', 'deleted', 'unsubscribed', 'cancel_requested', 'error'];
const ERROR_CODES = [
  'invalid_argument',
  'permission_denied',
  'resource_exhausted',
  'not_found',
  'run_ended',
  'unavailable',
  'internal',
  'cursor_ahead',
  'offset_expired',
  'slow_consumer',
  'token_expired',
];

let b: FuzzBroker;
/** The log's last stream sequence after seeding: from_offset up to it + 1 is in range. */
let lastOffset = 0;

before(async () => {
  b = await FuzzBroker.start();
  const client = new IngestClient(b.grpcTarget);
  try {
    const ev = (thread: string, run: string, n: number, type = 'ai_chunk', lifecycle = false) => ({
      thread_id: thread,
      run_id: run,
      event_id: `${run}-${n}`,
      event_type: type,
      category: lifecycle ? ('LIFECYCLE' as const) : ('MESSAGE' as const),
      content_json: JSON.stringify({ n }),
    });
    for (const thread of [THREAD, CANCEL_THREAD]) {
      const acks = await client.publish(
        [
          ev(thread, RUN, 1, 'run_start', true),
          ev(thread, ENDED, 1, 'run_start', true),
          ev(thread, RUN, 2),
          ev(thread, ENDED, 2),
          ev(thread, ENDED, 3, 'run_end', true),
          ev(thread, RUN, 3),
        ],
        'PERSISTED',
      );
      assert.deepEqual(
        acks.map((a) => a.seq),
        [1, 2, 3, 4, 5, 6],
      );
      lastOffset = Math.max(lastOffset, ...acks.map((a) => a.offset));
    }
    await client.publish(
      Array.from({ length: RAPID_HEAD }, (_, i) => ev(RAPID_THREAD, RUN, i + 1)),
      'PERSISTED',
    );
  } finally {
    client.close();
  }
});
after(async () => {
  await b?.[Symbol.asyncDispose]();
});

// ---------------------------------------------------------------------------------------------
// A connection that answers a probe after every case, so each case's synchronous answers are
// exactly the frames between it and the probe's `not_found`.

class Session {
  #log: FrameLog | undefined;
  #probe = 0;
  /** Subscription ids active on the current connection (as the broker should see them). */
  readonly active = new Set<string>();
  /** A subscription kept open so a frame can reuse its id. */
  static readonly KEEPER = 'keeper';

  async conn(): Promise<FrameLog> {
    if (this.#log && !this.#log.closed) return this.#log;
    this.#log = await FrameLog.open(b.wsUrl);
    this.active.clear();
    this.#log.ws.send(
      JSON.stringify({ type: 'subscribe', id: Session.KEEPER, thread_id: THREAD, live_only: true }),
    );
    const live = await this.#log.next((f) => f.id === Session.KEEPER);
    assert.ok('frame' in live && live.frame.type === 'live', `keeper: ${JSON.stringify(live)}`);
    this.active.add(Session.KEEPER);
    return this.#log;
  }

  /**
   * Sends `payload` (then a probe); returns the frames that came before the probe's answer,
   * or how the connection closed.
   */
  async exchange(
    payload: string | Buffer,
    binary = false,
  ): Promise<{
    frames: Record<string, unknown>[];
    raw: string[];
    closed?: { code: number; reason: string };
  }> {
    const log = await this.conn();
    const mark = log.frames.length;
    const probe = `probe-${++this.#probe}`;
    log.ws.send(payload, { binary });
    log.ws.send(JSON.stringify({ type: 'unsubscribe', id: probe }));
    const answer = await log.next((f) => f.id === probe, mark);
    const got = log.frames.slice(mark).filter((f) => f.json?.id !== probe);
    const result = { frames: got.flatMap((f) => (f.json ? [f.json] : [])), raw: got.map((f) => f.text) };
    if ('closed' in answer) return { ...result, closed: answer.closed };
    if ('timeout' in answer) return { ...result, closed: { code: -1, reason: 'no answer to the probe' } };
    const a = answer.frame;
    if (a.type !== 'error' || a.code !== 'not_found' || checkFrame(a).length > 0) {
      return { ...result, closed: { code: -2, reason: `probe answered ${JSON.stringify(a)}` } };
    }
    return result;
  }

  /** The first frame with this id from `from` on (catch-up answers are asynchronous). */
  async answerFor(id: string, from = 0): Promise<Record<string, unknown> | undefined> {
    const log = await this.conn();
    const f = await log.next((x) => x.id === id && x.type !== 'unsubscribed', from);
    return 'frame' in f ? f.frame : undefined;
  }

  get frameCount(): number {
    return this.#log?.frames.length ?? 0;
  }

  async close(): Promise<void> {
    await this.#log?.close();
  }
}

/** Every frame the server sends is a JSON object of a documented type; error frames have their fields. */
function checkFrame(f: Record<string, unknown>): string[] {
  const p: string[] = [];
  if (!SERVER_FRAME_TYPES.includes(f.type as string))
    p.push(`a frame of unknown type ${JSON.stringify(f.type)}`);
  if (f.type === 'error') {
    if (typeof f.code !== 'string' || !ERROR_CODES.includes(f.code))
      p.push(`an error frame with code ${JSON.stringify(f.code)}`);
    if (typeof f.message !== 'string') p.push('an error frame without a message');
    if (!(f.id === null || typeof f.id === 'string'))
      p.push('an error frame whose id is neither a string nor null');
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// The oracle: the answer docs/protocol.md §9 gives a frame.

type Expected =
  | { kind: 'error'; code: string; fields?: readonly string[]; id: string | null }
  | { kind: 'subscribed'; id: string; start: Start; runId: string | undefined; threadId: string }
  | { kind: 'unsubscribed'; id: string }
  | { kind: 'cancel'; id: string; threadId: string; runId: string };
type Start = { kind: 'after_seq'; seq: number } | { kind: 'from_offset'; offset: number } | { kind: 'live' };

const absent = (v: unknown): boolean => v === undefined || v === null;
const isSafeInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v);

/** The keys each client frame may carry (docs/protocol.md §9): any other is refused, named. */
const FRAME_KEYS: Readonly<Record<string, readonly string[]>> = {
  subscribe: [
    'type',
    'id',
    'thread_id',
    'after_seq',
    'from_offset',
    'live_only',
    'run_id',
    'categories',
    'event_types',
    'view',
    'on_disconnect',
  ],
  unsubscribe: ['type', 'id'],
  cancel: ['type', 'id', 'thread_id', 'run_id', 'reason'],
};

/** Unknown keys of a frame of `type`, as an error names them: the key, or `frame` when it is no name. */
function unknownKeys(type: string, m: Record<string, unknown>): string[] {
  const known = FRAME_KEYS[type] ?? [];
  return Object.keys(m)
    .filter((k) => !known.includes(k))
    .map((k) => (/^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(k) ? k : 'frame'));
}

function expectedFor(text: string, binary: boolean, active: ReadonlySet<string>): Expected {
  const bad = (fields: string[], id: string | null): Expected => ({
    kind: 'error',
    code: 'invalid_argument',
    fields,
    id,
  });
  if (binary) return bad(['frame'], null);
  let msg: unknown;
  try {
    msg = JSON.parse(text);
  } catch {
    return bad(['frame'], null);
  }
  if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) return bad(['frame'], null);
  const m = msg as Record<string, unknown>;
  const sid = typeof m.id === 'string' ? m.id : null;
  const idOk = typeof m.id === 'string' && m.id.length >= 1 && m.id.length <= 128;
  const idMatch = (v: unknown): boolean => typeof v === 'string' && ID.test(v);
  // Keys come first: a frame with a key its type does not define is refused for it.
  const unknown = typeof m.type === 'string' && m.type in FRAME_KEYS ? unknownKeys(m.type, m) : [];
  if (unknown.length > 0) return bad(unknown, sid);
  switch (m.type) {
    case 'subscribe': {
      if (!idOk) return bad(['id'], sid);
      if (!idMatch(m.thread_id)) return bad(['thread_id'], sid);
      const given = ['after_seq', 'from_offset', 'live_only'].filter((k) => !absent(m[k]));
      const startBad: string[] = [];
      if (given.length > 1) startBad.push(...given.slice(1));
      if (!absent(m.live_only) && m.live_only !== true) startBad.push('live_only');
      if (!absent(m.from_offset) && !(isSafeInt(m.from_offset) && m.from_offset >= 1))
        startBad.push('from_offset');
      if (!absent(m.after_seq) && !(isSafeInt(m.after_seq) && m.after_seq >= 0)) startBad.push('after_seq');
      if (startBad.length > 0) return bad(startBad, sid);
      const list = (v: unknown, ok: (x: string) => boolean): boolean =>
        absent(v) ||
        (Array.isArray(v) &&
          v.length >= 1 &&
          v.length <= 64 &&
          v.every((x) => typeof x === 'string' && ok(x)));
      const filterBad: string[] = [];
      if (!absent(m.run_id) && !idMatch(m.run_id)) filterBad.push('run_id');
      if (!list(m.categories, (x) => CATEGORY_NAME.test(x))) filterBad.push('categories');
      if (!list(m.event_types, (x) => EVENT_TYPE.test(x))) filterBad.push('event_types');
      if (filterBad.length > 0) return bad(filterBad, sid);
      if (!(absent(m.view) || m.view === 'events' || m.view === 'chat')) return bad(['view'], sid);
      if (m.view === 'chat' && (!absent(m.categories) || !absent(m.event_types))) {
        return bad(['categories', 'event_types'], sid);
      }
      const od = m.on_disconnect;
      if (!(absent(od) || od === 'none' || (od === 'cancel' && !absent(m.run_id))))
        return bad(['on_disconnect'], sid);
      if (active.has(m.id as string)) return bad(['id'], sid);
      const start: Start = !absent(m.live_only)
        ? { kind: 'live' }
        : !absent(m.from_offset)
          ? { kind: 'from_offset', offset: m.from_offset as number }
          : { kind: 'after_seq', seq: absent(m.after_seq) ? 0 : (m.after_seq as number) };
      return {
        kind: 'subscribed',
        id: m.id as string,
        start,
        runId: absent(m.run_id) ? undefined : (m.run_id as string),
        threadId: m.thread_id as string,
      };
    }
    case 'unsubscribe':
      if (!idOk) return bad(['id'], sid);
      return active.has(m.id as string)
        ? { kind: 'unsubscribed', id: m.id as string }
        : { kind: 'error', code: 'not_found', id: sid };
    case 'cancel': {
      if (!idOk) return bad(['id'], sid);
      if (!idMatch(m.thread_id)) return bad(['thread_id'], sid);
      if (!idMatch(m.run_id)) return bad(['run_id'], sid);
      const reason = m.reason ?? '';
      if (typeof reason !== 'string' || reason.length > 1024) return bad(['reason'], sid);
      return {
        kind: 'cancel',
        id: m.id as string,
        threadId: m.thread_id as string,
        runId: m.run_id as string,
      };
    }
    default:
      return bad(['type'], sid);
  }
}

const FIELD_MESSAGE = /^([A-Za-z_][A-Za-z0-9_.[\]-]*): \S/;

/** Sends one frame and judges everything it got back. Returns the problems found. */
async function judgeFrame(s: Session, text: string | Buffer, binary = false): Promise<string[]> {
  const bytes = Buffer.from(text);
  if (bytes.length > MAX_PAYLOAD_BYTES) {
    const r = await s.exchange(text, binary);
    return r.closed?.code === 1009
      ? []
      : [`a ${bytes.length}-byte frame did not get close 1009: ${JSON.stringify(r.closed ?? r.raw)}`];
  }
  const decoded = bytes.toString('utf8');
  if (!binary && !Buffer.from(decoded).equals(bytes)) {
    const r = await s.exchange(bytes, false);
    return r.closed?.code === 1007
      ? []
      : [`a text frame of invalid UTF-8 did not get close 1007: ${JSON.stringify(r.closed ?? r.raw)}`];
  }
  // Connect first: a new connection brings a new keeper, which the expectation must see.
  await s.conn();
  const expected = expectedFor(decoded, binary, s.active);
  const from = s.frameCount;
  const r = await s.exchange(typeof text === 'string' && !binary ? text : bytes, binary);
  const problems: string[] = [];
  if (r.closed) return [`the connection did not stay usable: ${JSON.stringify(r.closed)}`];
  if (r.raw.length !== r.frames.length)
    problems.push(`a frame that is not a JSON object: ${JSON.stringify(r.raw)}`);
  for (const f of r.frames) problems.push(...checkFrame(f));
  const errors = r.frames.filter((f) => f.type === 'error');
  switch (expected.kind) {
    case 'error': {
      const e = errors.find((f) => f.id === expected.id || expected.id === null) ?? errors[0];
      if (!e) {
        problems.push(
          `no error frame (expected ${expected.code} ${expected.fields?.join('|') ?? ''}); got ${JSON.stringify(r.frames)}`,
        );
        break;
      }
      if (e.code !== expected.code)
        problems.push(
          `error code ${JSON.stringify(e.code)}, expected ${expected.code} (${JSON.stringify(e.message)})`,
        );
      if (e.id !== expected.id)
        problems.push(`error frame id ${JSON.stringify(e.id)}, expected ${JSON.stringify(expected.id)}`);
      if (expected.fields) {
        const field = FIELD_MESSAGE.exec(String(e.message))?.[1];
        if (field === undefined || !expected.fields.includes(field)) {
          problems.push(
            `the error names ${JSON.stringify(field)}, expected ${expected.fields.join(' or ')} (${JSON.stringify(e.message)})`,
          );
        }
      }
      break;
    }
    case 'unsubscribed': {
      const u = r.frames.find((f) => f.type === 'unsubscribed' && f.id === expected.id);
      if (!u) problems.push(`no unsubscribed frame; got ${JSON.stringify(r.frames)}`);
      else if (!isSafeInt(u.seq)) problems.push(`an unsubscribed frame without a seq: ${JSON.stringify(u)}`);
      s.active.delete(expected.id);
      if (expected.id === Session.KEEPER) await s.close(); // a fresh connection brings a new keeper
      break;
    }
    case 'subscribed': {
      if (errors.some((f) => f.id === expected.id && f.code === 'invalid_argument')) {
        problems.push(`a valid subscribe was refused: ${JSON.stringify(errors)}`);
        break;
      }
      s.active.add(expected.id);
      const first = await s.answerFor(expected.id, from);
      if (!first) {
        problems.push('a valid subscribe got no answer');
        break;
      }
      problems.push(...subscribeAnswerProblems(expected, first));
      // Rapid unsubscribe: the id is free again either way.
      const log = await s.conn();
      log.ws.send(JSON.stringify({ type: 'unsubscribe', id: expected.id }));
      await log.next(
        (f) => f.id === expected.id && (f.type === 'unsubscribed' || f.code === 'not_found'),
        from,
      );
      s.active.delete(expected.id);
      break;
    }
    case 'cancel': {
      const a = await s.answerFor(expected.id, from);
      const ok =
        a !== undefined &&
        (a.type === 'cancel_requested'
          ? a.thread_id === expected.threadId && a.run_id === expected.runId && typeof a.event_id === 'string'
          : a.type === 'error' && ['not_found', 'run_ended'].includes(a.code as string));
      if (!ok) problems.push(`a valid cancel got ${JSON.stringify(a)}`);
      break;
    }
  }
  return problems;
}

/** What the first frame of a valid subscription must be (docs/protocol.md §8). */
function subscribeAnswerProblems(
  e: Extract<Expected, { kind: 'subscribed' }>,
  f: Record<string, unknown>,
): string[] {
  const known = e.threadId === THREAD || e.threadId === CANCEL_THREAD;
  // A run subscription resumed at or past its run's end ends there, even past the head.
  if (known && e.runId === ENDED && e.start.kind === 'after_seq' && e.start.seq >= ENDED_AT) {
    return f.type === 'end' && f.run_id === ENDED && f.seq === ENDED_AT
      ? []
      : [`a cursor at or past the run's end got ${JSON.stringify(f)}, not its end frame`];
  }
  const aheadSeq = e.start.kind === 'after_seq' && (e.start.seq > FAR || (!known && e.start.seq > 0));
  const aheadOffset = e.start.kind === 'from_offset' && e.start.offset > FAR;
  if (aheadSeq || aheadOffset) {
    return f.type === 'error' && f.code === 'cursor_ahead' && isSafeInt(f.seq)
      ? []
      : [`a cursor past the head got ${JSON.stringify(f)}, not a cursor_ahead error with a seq`];
  }
  if (f.type === 'error') {
    const inRange =
      (e.start.kind === 'after_seq' && e.start.seq <= HEAD) ||
      (e.start.kind === 'from_offset' && e.start.offset <= lastOffset + 1);
    if (inRange || !['cursor_ahead', 'offset_expired'].includes(f.code as string)) {
      return [`a valid subscribe failed: ${JSON.stringify(f)}`];
    }
    return [];
  }
  if (f.type === 'event') {
    const ev = f.event as { seq?: unknown; thread_id?: unknown; run_id?: unknown } | undefined;
    const p: string[] = [];
    if (ev?.thread_id !== e.threadId) p.push(`an event of another thread: ${JSON.stringify(f)}`);
    if (e.runId !== undefined && ev?.run_id !== e.runId)
      p.push(`an event of another run: ${JSON.stringify(f)}`);
    if (e.start.kind === 'after_seq' && !(isSafeInt(ev?.seq) && ev.seq > e.start.seq)) {
      p.push(`a first event at or below the cursor ${e.start.seq}: ${JSON.stringify(f)}`);
    }
    return p;
  }
  if (f.type === 'live' || f.type === 'end') {
    return isSafeInt(f.seq) ? [] : [`a ${f.type} frame without a seq: ${JSON.stringify(f)}`];
  }
  return [`a valid subscribe was first answered with ${JSON.stringify(f)}`];
}

// ---------------------------------------------------------------------------------------------
// Generators

/** A JSON token that JSON.stringify cannot make: written into the frame text as is. */
class Raw {
  constructor(readonly text: string) {}
  /** How fast-check prints it in a counterexample: long ones abbreviated. */
  [fc.toStringMethod](): string {
    const t = this.text;
    return t.length <= 60 ? `Raw(${t})` : `Raw(${t.length} chars: ${t.slice(0, 24)}…${t.slice(-24)})`;
  }
}
const RAW_NUMBERS = [
  'NaN',
  'Infinity',
  '-Infinity',
  '1e400',
  '-1e400',
  '9007199254740993',
  '-0',
  '1.0',
  '1e2',
  '0.1e1',
  '12345678901234567890123',
  '-1',
  '0x10',
  '01',
  '.5',
  '5.',
  '+1',
];

function frameText(v: unknown): string {
  const raws: string[] = [];
  const text = JSON.stringify(v, (_k, x: unknown) => {
    if (x instanceof Raw) {
      raws.push(x.text);
      return `\u0000raw${raws.length - 1}\u0000`;
    }
    return x;
  });
  return (text ?? 'undefined').replace(
    /"\\u0000raw(\d+)\\u0000"/g,
    (_m, i: string) => raws[Number(i)] as string,
  );
}

const deep = (depth: number, open = '[', close = ']', inner = '0'): Raw =>
  new Raw(`${open.repeat(depth)}${inner}${close.repeat(depth)}`);
const DEEP = [
  deep(100),
  deep(5000),
  deep(30_000),
  deep(30_000, '[', ']', '"\\u0000"'),
  deep(20_000, '{"a":', '}'),
  deep(10_000, '[', ']', '"\\ud800"'),
];

const hostile: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.constantFrom<unknown>(
      null,
      true,
      false,
      0,
      -1,
      1.5,
      2 ** 53,
      2 ** 53 - 1,
      2 ** 64,
      1e308,
      -1e-300,
      '',
      ' ',
      '0',
      '1',
      'true',
      'x'.repeat(129),
      'x'.repeat(128),
      [],
      {},
      ['message'],
      ['MESSAGE'],
      [null],
      [1],
      [''],
      ['message', 'message'],
      Array.from({ length: 65 }, () => 'trace'),
      Array.from({ length: 64 }, () => 'trace'),
      'message',
      'cancel',
      'none',
      'Cancel',
      { toString: 'x' },
      '__proto__',
      '\u0000',
      '\ud800',
      'a b',
      'a.b',
    ),
  },
  { weight: 2, arbitrary: fc.constantFrom(...RAW_NUMBERS).map((t) => new Raw(t)) },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 20 }) },
  { weight: 1, arbitrary: fc.integer() },
  { weight: 1, arbitrary: fc.double().map((d) => (Number.isFinite(d) ? d : new Raw(String(d)))) },
  { weight: 1, arbitrary: fc.constantFrom(...DEEP) },
);

let unique = 0;
const validSubscribe = fc
  .record(
    {
      thread_id: fc.constantFrom(THREAD, THREAD, CANCEL_THREAD, 'fz-ws-empty'),
      start: fc.oneof(
        fc.constant({}),
        fc.integer({ min: 0, max: HEAD }).map((n) => ({ after_seq: n })),
        fc.constant({ after_seq: FAR + 1 }),
        fc.integer({ min: 1, max: 3 }).map((n) => ({ from_offset: n })),
        fc.constant({ from_offset: FAR + 1 }),
        fc.constant({ live_only: true }),
      ),
      run_id: fc.option(fc.constantFrom(RUN, ENDED, 'fz-other'), { nil: undefined }),
      categories: fc.option(fc.subarray(CATEGORIES, { minLength: 1 }), { nil: undefined }),
      event_types: fc.option(fc.constantFrom(['ai_chunk'], ['run_end', 'run_start'], ['x']), {
        nil: undefined,
      }),
      on_disconnect: fc.option(fc.constantFrom('none', null), { nil: undefined }),
    },
    { requiredKeys: ['thread_id', 'start'] },
  )
  .map(({ start, ...rest }) => ({ type: 'subscribe', ...rest, ...start }) as Record<string, unknown>);
const validUnsubscribe = fc.constant<Record<string, unknown>>({ type: 'unsubscribe' });
const validCancel = fc
  .record({
    run_id: fc.constantFrom(ENDED, 'fz-unknown', RUN),
    reason: fc.option(fc.constantFrom('stop', '', 'r'.repeat(1024)), { nil: undefined }),
  })
  .map((c) => ({ type: 'cancel', thread_id: CANCEL_THREAD, ...c }) as Record<string, unknown>);

const KEYS = [
  'type',
  'id',
  'thread_id',
  'after_seq',
  'from_offset',
  'live_only',
  'run_id',
  'categories',
  'event_types',
  'on_disconnect',
  'reason',
];
type FrameMutation = (f: Record<string, unknown>) => Record<string, unknown>;
const frameMutation: fc.Arbitrary<FrameMutation> = fc.oneof(
  fc.tuple(fc.constantFrom(...KEYS), hostile).map(
    ([k, v]): FrameMutation =>
      (f) => ({ ...f, [k]: v }),
  ),
  fc.constantFrom(...KEYS).map(
    (k): FrameMutation =>
      (f) => {
        const { [k]: _drop, ...rest } = f;
        return rest;
      },
  ),
  fc.tuple(fc.string({ maxLength: 10 }), hostile).map(
    ([k, v]): FrameMutation =>
      (f) => ({ ...f, [k]: v }),
  ),
  fc.constantFrom('subscribe', 'unsubscribe', 'cancel', 'SUBSCRIBE', 'event', '').map(
    (t): FrameMutation =>
      (f) => ({ ...f, type: t }),
  ),
  fc.constant<FrameMutation>((f) => ({ ...f, id: Session.KEEPER })),
);

/** A frame: a valid one with 0–3 mutations, with a fresh id unless a mutation changed it. */
const mutatedFrame = fc
  .tuple(
    fc.oneof({ weight: 3, arbitrary: validSubscribe }, validUnsubscribe, validCancel),
    fc.array(frameMutation, { maxLength: 3 }),
  )
  .map(([f, ms]) => ms.reduce((acc, m) => m(acc), { ...f, id: '\u0000fresh' } as Record<string, unknown>));

/** The frame's text; a placeholder id is replaced by a fresh one when the case runs. */
function caseText(f: Record<string, unknown>): string {
  const withId = f.id === '\u0000fresh' ? { ...f, id: `c${++unique}` } : f;
  return frameText(withId);
}

// ---------------------------------------------------------------------------------------------
// Hand-picked frames

const CORPUS: readonly { name: string; text: string | Buffer; binary?: boolean }[] = [
  { name: 'not JSON', text: 'hello' },
  { name: 'empty text frame', text: '' },
  { name: 'a JSON array', text: '[1,2]' },
  { name: 'a JSON string', text: '"subscribe"' },
  { name: 'null', text: 'null' },
  { name: 'no type', text: '{"id":"x"}' },
  { name: 'unknown type', text: '{"type":"publish","id":"x"}' },
  { name: 'type is an object', text: '{"type":{"a":1},"id":"x"}' },
  { name: 'type nested 5 000 deep', text: `{"type":${'['.repeat(5000)}${']'.repeat(5000)},"id":"x"}` },
  { name: 'type nested 30 000 deep', text: `{"type":${'['.repeat(30_000)}${']'.repeat(30_000)},"id":"x"}` },
  {
    name: 'categories nested 30 000 deep',
    text: `{"type":"subscribe","id":"d1","thread_id":"t","categories":[${'['.repeat(30_000)}${']'.repeat(30_000)}]}`,
  },
  {
    name: 'event_types with a 20 000-deep object',
    text: `{"type":"subscribe","id":"d2","thread_id":"t","event_types":[${'{"a":'.repeat(20_000)}0${'}'.repeat(20_000)}]}`,
  },
  { name: 'the frame itself 30 000 deep', text: `${'['.repeat(30_000)}${']'.repeat(30_000)}` },
  { name: 'after_seq NaN', text: '{"type":"subscribe","id":"n1","thread_id":"t","after_seq":NaN}' },
  { name: 'after_seq 1e400', text: '{"type":"subscribe","id":"n2","thread_id":"t","after_seq":1e400}' },
  { name: 'after_seq -1', text: '{"type":"subscribe","id":"n3","thread_id":"t","after_seq":-1}' },
  { name: 'after_seq 1.5', text: '{"type":"subscribe","id":"n4","thread_id":"t","after_seq":1.5}' },
  {
    name: 'after_seq 2^53',
    text: '{"type":"subscribe","id":"n5","thread_id":"t","after_seq":9007199254740992}',
  },
  { name: 'after_seq "5"', text: '{"type":"subscribe","id":"n6","thread_id":"t","after_seq":"5"}' },
  {
    name: 'after_seq -0 (is 0)',
    text: `{"type":"subscribe","id":"n7","thread_id":"${THREAD}","after_seq":-0}`,
  },
  { name: 'from_offset 0', text: '{"type":"subscribe","id":"n8","thread_id":"t","from_offset":0}' },
  { name: 'live_only false', text: '{"type":"subscribe","id":"n9","thread_id":"t","live_only":false}' },
  {
    name: 'two start options',
    text: '{"type":"subscribe","id":"n10","thread_id":"t","after_seq":0,"live_only":true}',
  },
  { name: 'id of 129 characters', text: `{"type":"subscribe","id":"${'i'.repeat(129)}","thread_id":"t"}` },
  { name: 'id a number', text: '{"type":"subscribe","id":5,"thread_id":"t"}' },
  { name: 'thread_id with a dot', text: '{"type":"subscribe","id":"t1","thread_id":"a.b"}' },
  { name: 'lone surrogate escape in id', text: '{"type":"subscribe","id":"\\ud800","thread_id":"a.b"}' },
  { name: '\\u0000 in thread_id', text: '{"type":"subscribe","id":"z","thread_id":"a\\u0000"}' },
  {
    name: 'on_disconnect cancel without run_id',
    text: '{"type":"subscribe","id":"o1","thread_id":"t","on_disconnect":"cancel"}',
  },
  { name: 'unsubscribe of an unknown id', text: '{"type":"unsubscribe","id":"nope"}' },
  { name: 'unsubscribe without id', text: '{"type":"unsubscribe"}' },
  {
    name: 'cancel with a reason of 1025',
    text: `{"type":"cancel","id":"k1","thread_id":"t","run_id":"r","reason":"${'r'.repeat(1025)}"}`,
  },
  {
    name: 'cancel with reason 5',
    text: '{"type":"cancel","id":"k2","thread_id":"t","run_id":"r","reason":5}',
  },
  {
    name: 'cancel of an ended run',
    text: `{"type":"cancel","id":"k3","thread_id":"${CANCEL_THREAD}","run_id":"${ENDED}"}`,
  },
  { name: 'duplicate id', text: `{"type":"subscribe","id":"${Session.KEEPER}","thread_id":"${THREAD}"}` },
  {
    name: 'a binary frame',
    text: Buffer.from('{"type":"subscribe","id":"b","thread_id":"t"}'),
    binary: true,
  },
  { name: 'a binary frame of garbage', text: Buffer.from([0, 1, 2, 255]), binary: true },
  { name: 'invalid UTF-8 in a text frame', text: Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]) },
  { name: 'an overlong UTF-8 sequence', text: Buffer.from([0x22, 0xc0, 0xaf, 0x22]) },
  {
    name: 'a frame of exactly 64 KiB',
    text: `{"type":"nope","pad":"${'x'.repeat(MAX_PAYLOAD_BYTES - 24)}"}`,
  },
  { name: 'a frame of 64 KiB + 1', text: `{"type":"nope","pad":"${'x'.repeat(MAX_PAYLOAD_BYTES - 23)}"}` },
  { name: 'a frame of 1 MiB', text: 'x'.repeat(1024 * 1024) },
];

const session = new Session();
after(async () => {
  await session.close();
});

test(`WebSocket corpus: ${CORPUS.length} hand-picked frames each get the documented answer`, async (t) => {
  await fuzzBody(t, b, async () => {
    for (const k of CORPUS) {
      await t.test(k.name, async () => {
        if (await b.ensureUp()) await session.close();
        const problems = await judgeFrame(session, k.text, k.binary);
        if (!(await b.confirmAlive())) assert.fail(b.deathReport());
        assert.deepEqual(problems, [], `${k.name}: ${JSON.stringify(String(k.text).slice(0, 200))}`);
      });
    }
  });
});

const findings = new Findings();

/** One property case: the frame's answer judged, the broker's death reported. */
async function fuzzCase(label: string, text: string | Buffer, binary = false): Promise<void> {
  await findings.before(b, fc.pre);
  let problems: string[];
  try {
    problems = await judgeFrame(session, text, binary);
  } catch (err) {
    problems = [`the case failed: ${(err as Error).message}`];
  }
  if (!(await b.confirmAlive())) {
    await session.close();
    findings.fail(
      `${label}: the broker died`,
      `${JSON.stringify(String(text).slice(0, 500))}\n${b.deathReport()}`,
    );
    return;
  }
  if (problems.length > 0) {
    findings.fail(
      `${label}: ${problems.map((p) => p.replace(/[:(].*$/s, '')).join('; ')}`,
      `${JSON.stringify(String(text).slice(0, 1000))}\n${problems.join('\n')}`,
    );
  }
}

test('WebSocket property: mutated subscribe, unsubscribe and cancel frames get the documented answer', async (t) => {
  t.diagnostic(`FUZZ_SEED=${fuzzSeed()}`);
  await fuzzBody(t, b, async () => {
    await fc.assert(
      fc.asyncProperty(mutatedFrame, async (f) => fuzzCase('mutated frame', caseText(f))),
      fcParams(1500),
    );
    findings.report(t);
  });
});

test('WebSocket property: any JSON value, any string, and binary frames get an error frame and leave the connection usable', async (t) => {
  const anyFrame = fc.oneof(
    fc.jsonValue({ maxDepth: 4 }).map((v) => ({ text: frameText(v), binary: false })),
    fc.string({ unit: 'binary', maxLength: 200 }).map((text) => ({ text, binary: false })),
    fc.uint8Array({ maxLength: 200 }).map((a) => ({ text: Buffer.from(a), binary: true })),
    fc.uint8Array({ maxLength: 50 }).map((a) => ({ text: Buffer.from([0x7b, ...a, 0x7d]), binary: false })),
    fc.constantFrom(...DEEP).map((d) => ({ text: d.text, binary: false })),
    fc.integer({ min: MAX_PAYLOAD_BYTES - 30, max: MAX_PAYLOAD_BYTES + 30 }).map((n) => ({
      text: `{"type":"subscribe","id":"big","thread_id":"t","pad":"${'p'.repeat(Math.max(0, n - 51))}"}`,
      binary: false,
    })),
  );
  await fuzzBody(t, b, async () => {
    await fc.assert(
      fc.asyncProperty(anyFrame, async ({ text, binary }) => fuzzCase('any frame', text, binary)),
      fcParams(800),
    );
    findings.report(t);
  });
});

test('WebSocket property: rapid subscribe/unsubscribe bursts keep every subscription gap-free, in order, and answered', async (t) => {
  type Op = { op: 'sub'; id: string; after: number } | { op: 'unsub'; id: string };
  const ops = fc.array(
    fc.oneof(
      fc.record({
        op: fc.constant('sub' as const),
        id: fc.constantFrom('a', 'b', 'c'),
        after: fc.integer({ min: 0, max: RAPID_HEAD }),
      }),
      fc.record({ op: fc.constant('unsub' as const), id: fc.constantFrom('a', 'b', 'c') }),
    ),
    { minLength: 1, maxLength: 30 },
  );
  await fuzzBody(t, b, async () => {
    await fc.assert(
      fc.asyncProperty(ops, async (burst: Op[]) => {
        await findings.before(b, fc.pre);
        const log = await FrameLog.open(b.wsUrl);
        try {
          // The broker's state, as the ops leave it, and the cursor of every subscription created.
          const active = new Set<string>();
          const created = new Map<string, number[]>();
          const expect: string[] = [];
          for (const o of burst) {
            if (o.op === 'sub') {
              log.ws.send(
                JSON.stringify({ type: 'subscribe', id: o.id, thread_id: RAPID_THREAD, after_seq: o.after }),
              );
              if (active.has(o.id)) expect.push(`error:${o.id}`);
              else {
                active.add(o.id);
                created.set(o.id, [...(created.get(o.id) ?? []), o.after]);
              }
            } else {
              log.ws.send(JSON.stringify({ type: 'unsubscribe', id: o.id }));
              expect.push(active.delete(o.id) ? `unsubscribed:${o.id}` : `not_found:${o.id}`);
            }
          }
          // Every synchronous answer comes before the probe's; then each still-active
          // subscription's last instance must reach live.
          log.ws.send(JSON.stringify({ type: 'unsubscribe', id: 'probe' }));
          const problems: string[] = [];
          const probe = await log.next((f) => f.id === 'probe');
          if (!('frame' in probe)) problems.push(`no answer to the probe: ${JSON.stringify(probe)}`);
          for (const id of active) {
            const lastUnsub = log.frames.findLastIndex(
              (f) => f.json?.id === id && f.json.type === 'unsubscribed',
            );
            const live = await log.next((f) => f.id === id && f.type === 'live', lastUnsub + 1);
            if (!('frame' in live)) problems.push(`${id}: never went live: ${JSON.stringify(live)}`);
          }
          const frames = log.frames
            .map((f) => f.json)
            .filter((f): f is Record<string, unknown> => f !== undefined && f.id !== 'probe');
          if (frames.length !== log.frames.length - 1) problems.push('a frame that is not a JSON object');
          for (const f of frames) problems.push(...checkFrame(f));
          // The synchronous answers, in op order.
          const sync = frames
            .filter((f) => f.type === 'unsubscribed' || f.type === 'error')
            .map(
              (f) =>
                `${f.type === 'error' ? (f.code === 'not_found' ? 'not_found' : 'error') : 'unsubscribed'}:${String(f.id)}`,
            );
          if (JSON.stringify(sync) !== JSON.stringify(expect)) {
            problems.push(`answers ${JSON.stringify(sync)}, expected ${JSON.stringify(expect)}`);
          }
          // Each subscription instance (split at its `unsubscribed`): the events after its cursor,
          // gap-free and in order, then live at the head; nothing of an earlier instance after its end.
          for (const id of ['a', 'b', 'c']) {
            const instances: Record<string, unknown>[][] = [[]];
            for (const f of frames.filter((x) => x.id === id && x.type !== 'error')) {
              (instances.at(-1) as Record<string, unknown>[]).push(f);
              if (f.type === 'unsubscribed') instances.push([]);
            }
            const cursors = created.get(id) ?? [];
            instances.forEach((inst, i) => {
              if (inst.length === 0) return;
              const start = cursors[i];
              if (start === undefined) {
                problems.push(`${id}: frames of a subscription never created: ${JSON.stringify(inst)}`);
                return;
              }
              let next = start + 1;
              for (const f of inst) {
                if (f.type === 'event') {
                  const seq = (f.event as { seq: number }).seq;
                  if (seq !== next) problems.push(`${id}#${i}: event ${seq}, expected ${next}`);
                  next = seq + 1;
                } else if (f.type === 'live') {
                  if (f.seq !== RAPID_HEAD || next !== RAPID_HEAD + 1) {
                    problems.push(
                      `${id}#${i}: live at ${String(f.seq)} after event ${next - 1}; head ${RAPID_HEAD}`,
                    );
                  }
                } else if (f.type === 'unsubscribed') {
                  if (typeof f.seq !== 'number' || f.seq < next - 1) {
                    problems.push(`${id}#${i}: unsubscribed at ${String(f.seq)} after event ${next - 1}`);
                  }
                } else {
                  problems.push(`${id}#${i}: unexpected ${JSON.stringify(f)}`);
                }
              }
            });
          }
          if (problems.length > 0)
            findings.fail(
              `rapid: ${problems[0]?.replace(/\d+/g, 'N')}`,
              `${JSON.stringify(burst)}\n${problems.join('\n')}`,
            );
        } finally {
          await log.close();
        }
      }),
      fcParams(300),
    );
    findings.report(t);
  });
});

test('after the WebSocket fuzzing the broker is alive and serves a publish → WebSocket → History round trip', async (t) => {
  await session.close();
  const crash = await b.ensureUp();
  if (crash) t.diagnostic(`restarted after a crash: ${crash.exit}`);
  t.diagnostic(`crashes during this file: ${b.crashes.length}; cases: ~${fuzzRuns(2600) + CORPUS.length}`);
  for (const c of b.crashes) t.diagnostic(`crash of pid ${c.pid}: ${c.exit}\n${c.stderr.slice(-1500)}`);
  await assertServing(b);
  assert.equal(b.crashes.length, 0, 'the broker crashed during the WebSocket fuzzing (see the diagnostics)');
});
