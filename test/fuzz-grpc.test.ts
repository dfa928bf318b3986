// Fuzzing the gRPC port with raw bytes: random and mutated protobuf to every method of
// Ingest, Subscriber and History, sent through a grpc-js client with pass-through
// serializers so any bytes go out; hand-written Publish requests with hostile fields; and
// content_json / metadata_json at and over the documented limits (256 KiB, strings of `\\`
// that double when escaped, JSON nested 100 000 deep with and without `\u` escapes, `\u0000`,
// lone surrogates, numbers past a double's range). The broker is a child process.
//
// What a correct broker does (docs/protocol.md §3, §4, §7, §12; docs/api.md "Errors"): bytes
// that are not the request message get INVALID_ARGUMENT, never INTERNAL or UNKNOWN; a request
// that decodes is judged by the validation rules (the first faulty event, then the field, in
// the documented order) and refused with INVALID_ARGUMENT and `<field>: <problem>`; a valid
// Publish is acked and its events are stored — an event the store cannot hold is refused at
// ingest naming the field, never accepted and then left to fail in Postgres.
//
// FUZZ_SEED overrides the seed, FUZZ_SCALE multiplies the case counts, FUZZ_COLLECT=1 lists
// every distinct failure instead of stopping at the first.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import fc from 'fast-check';
import { IngestClient } from '../src/client/ingest-client.js';
import { DEFAULT_MAX_GRPC_MESSAGE_BYTES } from '../src/config.js';
import { NotUtf8Error, notUtf8Field, StrictReader } from '../src/grpc/strict-utf8.js';
import { loadProto } from '../src/proto.js';
import {
  assertServing,
  Findings,
  FuzzBroker,
  fcParams,
  fuzzBody,
  fuzzRuns,
  fuzzSeed,
} from './helpers/fuzz.js';
import { lenField, message, tag, varint, varintField, WIRE } from './helpers/protobuf-bytes.js';
import { waitFor } from './helpers/wait.js';

const MAX_CONTENT_BYTES = 256 * 1024; // RS_MAX_CONTENT_BYTES default
const MAX_EVENTS = 5000; // RS_MAX_EVENTS_PER_REQUEST default
const DEADLINE_MS = 30_000;

const ID = /^[A-Za-z0-9_-]{1,128}$/;
const EVENT_TYPE = /^[\x21-\x7e]{1,64}$/;
const CATEGORIES = ['MESSAGE', 'TRACE', 'LIFECYCLE'];
const RUN_STATUSES = ['PENDING', 'RUNNING', 'SUCCESS', 'ERROR', 'INTERRUPTED', 'CANCELLED'].map(
  (s) => `RUN_STATUS_${s}`,
);
const MIN_TS = Date.UTC(1970, 0, 1) / 1000;
const MAX_TS = Date.UTC(9999, 11, 31) / 1000;
const STATUS_NAME = Object.fromEntries(Object.entries(grpc.status).map(([k, v]) => [v, k])) as Record<
  number,
  string
>;

// ---------------------------------------------------------------------------------------------
// The methods, as the server decodes them

interface Method {
  readonly service: string;
  readonly name: string;
  readonly path: string;
  readonly requestStream: boolean;
  readonly responseStream: boolean;
  /** The server's own request decoder (proto-loader, the options src/proto.ts uses). */
  readonly decode: (b: Buffer) => Record<string, unknown>;
  readonly encode: (o: Record<string, unknown>) => Buffer;
  readonly decodeResponse: (b: Buffer) => Record<string, unknown>;
}

const PKG = loadProto().packageDefinition;
const METHODS: readonly Method[] = [
  'runstream.v1.Ingest',
  'runstream.v1.Subscriber',
  'runstream.v1.History',
].flatMap((service) =>
  Object.entries(PKG[service] as grpc.ServiceDefinition).map(([name, d]) => ({
    service,
    name,
    path: d.path,
    requestStream: d.requestStream,
    responseStream: d.responseStream,
    decode: d.requestDeserialize as (b: Buffer) => Record<string, unknown>,
    encode: d.requestSerialize as (o: Record<string, unknown>) => Buffer,
    decodeResponse: d.responseDeserialize as (b: Buffer) => Record<string, unknown>,
    // fast-check prints a counterexample's method by its name.
    [fc.toStringMethod]: () => name,
  })),
);
const method = (name: string): Method => METHODS.find((m) => m.name === name) as Method;

// ---------------------------------------------------------------------------------------------
// Raw calls

interface Answer {
  readonly code: grpc.status;
  readonly details: string;
  readonly responses: Buffer[];
  /** A server-streaming call answered with a message, and the client ended it. */
  readonly streamed: boolean;
}

const identity = (b: Buffer): Buffer => b;

class RawClient {
  #client: grpc.Client | undefined;
  #target = '';

  constructor(readonly broker: FuzzBroker) {}

  get client(): grpc.Client {
    if (this.#client === undefined || this.#target !== this.broker.grpcTarget) {
      this.#client?.close();
      this.#target = this.broker.grpcTarget;
      this.#client = new grpc.Client(this.#target, grpc.credentials.createInsecure(), {
        'grpc.max_send_message_length': 128 * 1024 * 1024,
        'grpc.max_receive_message_length': -1,
      });
    }
    return this.#client;
  }

  call(m: Method, messages: readonly Buffer[]): Promise<Answer> {
    const options = { deadline: Date.now() + DEADLINE_MS };
    const md = new grpc.Metadata();
    return new Promise((resolve) => {
      const responses: Buffer[] = [];
      if (!m.requestStream && !m.responseStream) {
        this.client.makeUnaryRequest(
          m.path,
          identity,
          identity,
          messages[0] as Buffer,
          md,
          options,
          (err, res) => {
            if (res) responses.push(res);
            resolve({
              code: err?.code ?? grpc.status.OK,
              details: err?.details ?? '',
              responses,
              streamed: false,
            });
          },
        );
        return;
      }
      if (!m.requestStream) {
        const call = this.client.makeServerStreamRequest(
          m.path,
          identity,
          identity,
          messages[0] as Buffer,
          md,
          options,
        );
        let streamed = false;
        call.on('data', (d: Buffer) => {
          responses.push(d);
          if (!streamed) {
            streamed = true;
            call.cancel(); // the first message answers the request; the rest is live
          }
        });
        call.on('error', () => undefined);
        call.on('status', (s: grpc.StatusObject) =>
          resolve({ code: s.code, details: s.details, responses, streamed }),
        );
        return;
      }
      const call = this.client.makeBidiStreamRequest(m.path, identity, identity, md, options);
      call.on('data', (d: Buffer) => responses.push(d));
      call.on('error', () => undefined);
      call.on('status', (s: grpc.StatusObject) =>
        resolve({ code: s.code, details: s.details, responses, streamed: false }),
      );
      for (const msg of messages) call.write(msg);
      call.end();
    });
  }

  close(): void {
    this.#client?.close();
    this.#client = undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// The oracle

/** What a call should end with. */
type Expected =
  | { kind: 'invalid'; fields?: readonly string[]; why: string }
  | { kind: 'ok'; events?: number }
  | { kind: 'any-of'; codes: readonly grpc.status[]; why: string };

const isSafe = (v: unknown, min = 0): boolean => typeof v === 'number' && Number.isSafeInteger(v) && v >= min;
const idOk = (v: unknown): boolean => typeof v === 'string' && ID.test(v);
const optId = (v: unknown): boolean => v === '' || idOk(v);

/**
 * Every string in a JSON value (keys too) is well-formed UTF-16 without NUL, and every number
 * within a double's range (JSON.parse gives ±Infinity past it); walked without recursion.
 */
function storable(value: unknown): boolean {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === 'string') {
      if (!v.isWellFormed() || v.includes('\0')) return false;
    } else if (typeof v === 'number') {
      if (!Number.isFinite(v)) return false;
    } else if (Array.isArray(v)) stack.push(...v);
    else if (v !== null && typeof v === 'object') {
      for (const [k, x] of Object.entries(v)) stack.push(k, x);
    }
  }
  return true;
}

function jsonFault(text: string, mustBeObject: boolean): boolean {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return true;
  }
  if (mustBeObject && (v === null || typeof v !== 'object' || Array.isArray(v))) return true;
  return !storable(v);
}

/** docs/protocol.md §4, in its order; the content/metadata pair may be reported either way round. */
function eventFaults(e: Record<string, unknown>): string[] {
  if (!idOk(e.thread_id)) return ['thread_id'];
  if (!idOk(e.run_id)) return ['run_id'];
  if (!optId(e.event_id)) return ['event_id'];
  if (!optId(e.user_id)) return ['user_id'];
  if (typeof e.event_type !== 'string' || !EVENT_TYPE.test(e.event_type)) return ['event_type'];
  if (!CATEGORIES.includes(e.category as string)) return ['category'];
  if (e.seq !== 0) return ['seq'];
  if (e.offset !== 0) return ['offset'];
  const content = e.content_json as string;
  const metadata = (e.metadata_json as string) === '' ? '{}' : (e.metadata_json as string);
  const contentBad =
    Buffer.byteLength(content) > MAX_CONTENT_BYTES || content === '' || jsonFault(content, false);
  const metadataBad = Buffer.byteLength(metadata) > MAX_CONTENT_BYTES || jsonFault(metadata, true);
  if (contentBad) return metadataBad ? ['content_json', 'metadata_json'] : ['content_json'];
  if (metadataBad) return ['metadata_json'];
  const ts = e.created_at as { seconds: number; nanos: number } | null;
  if (ts) {
    const s = Number(ts.seconds);
    if (
      !(s >= MIN_TS && s <= MAX_TS) ||
      !Number.isInteger(ts.nanos) ||
      ts.nanos < 0 ||
      ts.nanos > 999_999_999
    ) {
      return ['created_at'];
    }
  }
  return [];
}

function publishExpected(req: Record<string, unknown>): Expected {
  if (!['ACK_LEVEL_UNSPECIFIED', 'ACCEPTED', 'PERSISTED'].includes(req.ack as string)) {
    return { kind: 'invalid', fields: ['ack'], why: `ack ${String(req.ack)}` };
  }
  const events = req.events as Record<string, unknown>[];
  if (events.length === 0 || events.length > MAX_EVENTS) {
    return { kind: 'invalid', fields: ['events'], why: `${events.length} events` };
  }
  for (let i = 0; i < events.length; i++) {
    const f = eventFaults(events[i] as Record<string, unknown>);
    if (f.length > 0)
      return { kind: 'invalid', fields: f.map((x) => `events[${i}].${x}`), why: `event ${i}` };
  }
  return { kind: 'ok', events: events.length };
}

function subscribeExpected(r: Record<string, unknown>): Expected {
  const bad: string[] = [];
  if (!idOk(r.thread_id)) return { kind: 'invalid', fields: ['thread_id'], why: 'thread_id' };
  if (r.start === 'after_seq' && !isSafe(r.after_seq)) bad.push('after_seq');
  if (r.start === 'from_offset' && !isSafe(r.from_offset, 1)) bad.push('from_offset');
  if (r.start === 'live_only' && r.live_only !== true) bad.push('live_only');
  if (bad.length > 0) return { kind: 'invalid', fields: bad, why: 'start' };
  const cats = r.categories as unknown[];
  const types = r.event_types as unknown[];
  if (r.run_id !== '' && !idOk(r.run_id)) bad.push('run_id');
  if (cats.length > 64 || cats.some((c) => !CATEGORIES.includes(c as string))) bad.push('categories');
  if (types.length > 64 || types.some((t) => typeof t !== 'string' || !EVENT_TYPE.test(t)))
    bad.push('event_types');
  if (bad.length > 0) return { kind: 'invalid', fields: bad, why: 'filters' };
  // A valid subscription answers with its catch-up or live, or a cursor past the head / log.
  return { kind: 'any-of', codes: [grpc.status.OK, grpc.status.OUT_OF_RANGE], why: 'a valid subscribe' };
}

function historyExpected(name: string, r: Record<string, unknown>): Expected {
  const bad: string[] = [];
  if (!idOk(r.thread_id)) bad.push('thread_id');
  const runRequired = ['ListMessagesByRun', 'DeleteRun', 'GetRun'].includes(name);
  if ('run_id' in r && (runRequired ? !idOk(r.run_id) : !optId(r.run_id))) bad.push('run_id');
  if ('user_id' in r && !optId(r.user_id)) bad.push('user_id');
  if ('after_seq' in r && !isSafe(r.after_seq)) bad.push('after_seq');
  if ('before_seq' in r && !isSafe(r.before_seq)) bad.push('before_seq');
  if ('limit' in r && !(r.limit === 0 || (isSafe(r.limit, 1) && (r.limit as number) <= 1000)))
    bad.push('limit');
  const list = (v: unknown, ok: (x: unknown) => boolean): boolean =>
    Array.isArray(v) && (v.length > 64 || v.some((x) => !ok(x)));
  if (name === 'ListEvents') {
    if (list(r.categories, (c) => CATEGORIES.includes(c as string))) bad.push('categories');
    if (list(r.event_types, (t) => typeof t === 'string' && EVENT_TYPE.test(t))) bad.push('event_types');
  }
  if (name === 'ListRuns' && list(r.statuses, (s) => RUN_STATUSES.includes(s as string)))
    bad.push('statuses');
  if (bad.length > 0) return { kind: 'invalid', fields: bad, why: name };
  if (name === 'GetRun')
    return { kind: 'any-of', codes: [grpc.status.OK, grpc.status.NOT_FOUND], why: 'GetRun' };
  return { kind: 'ok' };
}

/** The expected end of a call with these request messages. */
function expectedFor(m: Method, messages: readonly Buffer[]): Expected {
  const decoded: Record<string, unknown>[] = [];
  for (const [i, msg] of messages.entries()) {
    try {
      decoded.push(m.decode(new StrictReader(msg) as unknown as Buffer));
    } catch (err) {
      if (err instanceof NotUtf8Error) {
        // Refused as it is decoded, named when the bytes say which field it is. On a stream
        // a request before it may be judged (and refused) first: either answer is right.
        const field = notUtf8Field(m.path, msg);
        if (field === undefined) return { kind: 'invalid', why: 'a string field that is not UTF-8' };
        const fields = [`${m.requestStream ? `request ${i}: ` : ''}${field}`];
        if (m.service === 'runstream.v1.Ingest') {
          const earlier = decoded
            .map((req, j) => ({ j, e: publishExpected(req) }))
            .find((x) => x.e.kind === 'invalid');
          if (earlier?.e.kind === 'invalid')
            fields.push(...(earlier.e.fields ?? []).map((f) => `request ${earlier.j}: ${f}`));
        }
        return { kind: 'invalid', fields, why: 'a string field that is not UTF-8' };
      }
      // Everything before it may be answered; the bytes themselves are the client's fault.
      return {
        kind: 'invalid',
        why: `bytes that do not decode as ${m.name}'s request (${(err as Error).message})`,
      };
    }
  }
  if (m.service === 'runstream.v1.Ingest') {
    for (const [i, req] of decoded.entries()) {
      const e = publishExpected(req);
      if (e.kind === 'invalid') {
        const prefix = m.requestStream ? `request ${i}: ` : '';
        return { ...e, fields: e.fields?.map((f) => `${prefix}${f}`) };
      }
    }
    return { kind: 'ok' };
  }
  if (m.name === 'Subscribe') return subscribeExpected(decoded[0] as Record<string, unknown>);
  return historyExpected(m.name, decoded[0] as Record<string, unknown>);
}

/** `<field>: <problem>`, optionally after `request N: ` on PublishStream. */
function fieldOf(details: string): string | undefined {
  return /^((?:request \d+: )?[A-Za-z_][A-Za-z0-9_.[\]]*): \S/.exec(details)?.[1];
}

function judgeAnswer(e: Expected, a: Answer): string[] {
  const got = `${STATUS_NAME[a.code]}${a.streamed ? ' (streamed)' : ''} ${JSON.stringify(a.details.slice(0, 300))}`;
  const p: string[] = [];
  if (a.code === grpc.status.INTERNAL || a.code === grpc.status.UNKNOWN)
    p.push(`${STATUS_NAME[a.code]} for client input`);
  switch (e.kind) {
    case 'invalid':
      if (a.code !== grpc.status.INVALID_ARGUMENT) p.push(`expected INVALID_ARGUMENT (${e.why}); got ${got}`);
      else if (e.fields) {
        const f = fieldOf(a.details);
        if (f === undefined || !e.fields.includes(f))
          p.push(`expected the field ${e.fields.join(' or ')}; got ${got}`);
      }
      break;
    case 'ok':
      if (a.code !== grpc.status.OK && !a.streamed) p.push(`expected OK; got ${got}`);
      break;
    case 'any-of':
      if (!a.streamed && !e.codes.includes(a.code)) {
        p.push(`expected ${e.codes.map((c) => STATUS_NAME[c]).join(' or ')} (${e.why}); got ${got}`);
      }
      break;
  }
  return [...new Set(p)];
}

// ---------------------------------------------------------------------------------------------
// Generators

const THREADS = ['fz-g1', 'fz-g2', 'fz-g3'];
let uniq = 0;

/** A valid request object for each method. */
function validRequest(name: string): fc.Arbitrary<Record<string, unknown>> {
  const thread = fc.constantFrom(...THREADS);
  const run = fc.constantFrom('r1', 'r2');
  const paging = fc.record({
    after_seq: fc.nat({ max: 5 }),
    before_seq: fc.constantFrom(0, 3),
    limit: fc.constantFrom(0, 1, 10, 1000),
    user_id: fc.constantFrom('', 'u1'),
  });
  switch (name) {
    case 'Publish':
    case 'PublishStream':
      return fc
        .record({
          events: fc.array(
            fc.record({
              thread_id: thread,
              run_id: run,
              event_type: fc.constantFrom('ai_chunk', 'tool_call', 'run_start'),
              category: fc.constantFrom(...CATEGORIES),
              content_json: fc.constantFrom('{"a":1}', 'null', '"x"', '[1,2]', '{"content":"h\\u00e9"}'),
              metadata_json: fc.constantFrom('', '{}', '{"id":"m1"}'),
              event_id: fc.constant(''),
              user_id: fc.constantFrom('', 'u1'),
              created_at: fc.option(
                fc.record({
                  seconds: fc.integer({ min: 0, max: 4_000_000_000 }),
                  nanos: fc.nat({ max: 999_999_999 }),
                }),
                { nil: undefined },
              ),
            }),
            { minLength: 1, maxLength: 3 },
          ),
          ack: fc.constantFrom('ACCEPTED', 'ACCEPTED', 'PERSISTED', 'ACK_LEVEL_UNSPECIFIED'),
        })
        .map((r) => ({ ...r, events: r.events.map((e) => ({ ...e, event_id: `ev${++uniq}` })) }));
    case 'Subscribe':
      return fc
        .record({
          thread_id: thread,
          start: fc.oneof(
            fc.constant({}),
            fc.nat({ max: 5 }).map((n) => ({ after_seq: n })),
            fc.constant({ from_offset: 1 }),
            fc.constant({ live_only: true }),
          ),
          run_id: fc.constantFrom('', 'r1'),
          categories: fc.subarray(CATEGORIES),
          event_types: fc.constantFrom([], ['ai_chunk']),
        })
        .map(({ start, ...r }) => ({ ...r, ...start }));
    case 'ListEvents':
      return fc
        .tuple(
          thread,
          fc.constantFrom('', 'r1'),
          fc.subarray(CATEGORIES),
          fc.constantFrom([], ['ai_chunk']),
          paging,
        )
        .map(([thread_id, run_id, categories, event_types, p]) => ({
          thread_id,
          run_id,
          categories,
          event_types,
          ...p,
        }));
    case 'ListMessages':
      return fc.tuple(thread, paging).map(([thread_id, p]) => ({ thread_id, ...p }));
    case 'ListMessagesByRun':
    case 'ListChatMessages':
      return fc.tuple(thread, run, paging).map(([thread_id, run_id, p]) => ({ thread_id, run_id, ...p }));
    case 'CountMessages':
    case 'GetRun':
      return fc.record({ thread_id: thread, run_id: run, user_id: fc.constantFrom('', 'u1') });
    case 'DeleteRun':
      return fc.record({
        thread_id: fc.constantFrom('fz-del1', 'fz-del2'),
        run_id: run,
        user_id: fc.constantFrom('', 'u1'),
      });
    case 'DeleteThread':
      // Never the threads the other cases publish to.
      return fc.record({
        thread_id: fc.constantFrom('fz-del1', 'fz-del2'),
        user_id: fc.constantFrom('', 'u1'),
      });
    case 'ListRuns':
      return fc.record({
        thread_id: thread,
        before_seq: fc.constantFrom(0, 4),
        limit: fc.constantFrom(0, 5),
        statuses: fc.subarray(RUN_STATUSES),
        user_id: fc.constantFrom('', 'u1'),
      });
    default:
      throw new Error(`no generator for ${name}`);
  }
}

type ByteMutation = (b: Buffer) => Buffer;
const EXTRA_FIELDS: readonly Buffer[] = [
  varintField(99, 1), // unknown field
  varintField(1, 5), // field 1 with the wrong wire type
  Buffer.concat([tag(1, WIRE.fixed32), Buffer.from([1, 2, 3, 4])]),
  Buffer.concat([tag(1, WIRE.len), varint(0xffffffff)]), // a length past the end
  Buffer.concat([tag(1, WIRE.len), varint(2n ** 63n)]),
  Buffer.concat([tag(1, WIRE.startGroup)]),
  Buffer.concat([tag(2, WIRE.endGroup)]),
  Buffer.from([0x0e]), // wire type 6
  Buffer.from([0x0f]), // wire type 7
  Buffer.from([0x00]), // field number 0
  Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]), // an 11-byte varint
  lenField(1, Buffer.from([0xff, 0xfe, 0xfd])), // invalid UTF-8 in field 1
  varintField(2, -1), // ack / after_seq / run_id: -1 as a 10-byte varint
  varintField(2, 2n ** 64n - 1n),
  varintField(3, 2n ** 53n + 1n),
  varintField(4, 2n ** 32n),
];
const byteMutation: fc.Arbitrary<ByteMutation> = fc.oneof(
  fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })).map(
    ([at, v]): ByteMutation =>
      (b) => {
        if (b.length === 0) return Buffer.from([v]);
        const c = Buffer.from(b);
        c[at % c.length] = v;
        return c;
      },
  ),
  fc.tuple(fc.nat(), fc.integer({ min: 0, max: 7 })).map(
    ([at, bit]): ByteMutation =>
      (b) => {
        if (b.length === 0) return b;
        const c = Buffer.from(b);
        c[at % c.length] = (c[at % c.length] as number) ^ (1 << bit);
        return c;
      },
  ),
  fc.tuple(fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 8 })).map(
    ([at, ins]): ByteMutation =>
      (b) => {
        const i = at % (b.length + 1);
        return Buffer.concat([b.subarray(0, i), Buffer.from(ins), b.subarray(i)]);
      },
  ),
  fc.tuple(fc.nat(), fc.integer({ min: 1, max: 16 })).map(
    ([at, n]): ByteMutation =>
      (b) => {
        const i = at % (b.length + 1);
        return Buffer.concat([b.subarray(0, i), b.subarray(i + n)]);
      },
  ),
  fc.nat().map(
    (at): ByteMutation =>
      (b) =>
        b.subarray(0, at % (b.length + 1)),
  ),
  fc.tuple(fc.nat(), fc.integer({ min: 1, max: 16 })).map(
    ([at, n]): ByteMutation =>
      (b) => {
        const i = at % (b.length + 1);
        return Buffer.concat([b.subarray(0, i + n), b.subarray(i)]);
      },
  ),
  fc.constantFrom(...EXTRA_FIELDS).map(
    (f): ByteMutation =>
      (b) =>
        Buffer.concat([b, f]),
  ),
  fc.constantFrom(...EXTRA_FIELDS).map(
    (f): ByteMutation =>
      (b) =>
        Buffer.concat([f, b]),
  ),
);

/** A method, and messages for it: random bytes, or a valid request with byte mutations. */
const methodArb = fc.constantFrom(...METHODS);
const randomCase = fc.tuple(
  methodArb,
  fc.array(
    fc.uint8Array({ maxLength: 300 }).map((a) => Buffer.from(a)),
    { minLength: 1, maxLength: 3 },
  ),
);
const mutatedCase = methodArb.chain((m) =>
  fc.tuple(
    fc.constant(m),
    fc.array(
      fc
        .tuple(validRequest(m.name), fc.array(byteMutation, { maxLength: 3 }))
        .map(([req, ms]) => ms.reduce((b, f) => f(b), m.encode(req))),
      { minLength: 1, maxLength: m.requestStream ? 3 : 1 },
    ),
  ),
);

// Hand-written Publish requests: any bytes in any field.
const HOSTILE_STRINGS: readonly (string | Buffer)[] = [
  '',
  ' ',
  'a.b',
  'x'.repeat(128),
  'x'.repeat(129),
  'a\u0000b',
  '\u00e9',
  'ok-id',
  Buffer.from([0xff, 0xfe]),
  Buffer.from([0xed, 0xa0, 0x80]), // a UTF-8-encoded lone surrogate
  Buffer.from([0xc0, 0xaf]), // overlong
];
const CONTENTS: readonly string[] = [
  '{}',
  'null',
  '""',
  ' {"a":1} ',
  '1e400',
  '-0',
  '"\\ud83d\\ude00"', // a valid pair
  '{"k":"\\u00e9"}',
  '',
  ' ',
  'NaN',
  'Infinity',
  '{',
  '{}x',
  '"a\nb"', // a raw control character in a string
  '"\\u0000"',
  '{"\\u0000":1}',
  '"\\ud800"',
  '["\\udc00x"]',
  '{"a":"\\ud800\\ud800"}',
  '"\\u000"',
  '"\\x41"',
  `"${'x'.repeat(1000)}"`,
  `${'['.repeat(500)}${']'.repeat(500)}`,
  `${'['.repeat(500)}"\\u0041"${']'.repeat(500)}`,
  `{"a":${'{"b":'.repeat(300)}1${'}'.repeat(300)}}`,
];
const eventBytes = fc
  .record(
    {
      thread_id: fc.oneof(
        { weight: 4, arbitrary: fc.constantFrom(...THREADS) },
        fc.constantFrom(...HOSTILE_STRINGS),
      ),
      run_id: fc.oneof({ weight: 4, arbitrary: fc.constant('r1') }, fc.constantFrom(...HOSTILE_STRINGS)),
      event_type: fc.oneof(
        { weight: 4, arbitrary: fc.constant('ai_chunk') },
        fc.constantFrom<string | Buffer>('a b', 'x'.repeat(65), '\u00e9', 'ok|ns', ''),
      ),
      category: fc.oneof(
        { weight: 4, arbitrary: fc.constantFrom(1, 2, 3) },
        fc.constantFrom<number | bigint>(0, 4, 9, -1, 2n ** 32n, 2n ** 64n - 1n),
      ),
      content_json: fc.oneof(
        { weight: 2, arbitrary: fc.constantFrom('{"a":1}') },
        fc.constantFrom<string | Buffer>(...CONTENTS, Buffer.from([0x22, 0xff, 0x22])),
      ),
      metadata_json: fc.constantFrom<string | Buffer>(
        '',
        '{}',
        '[]',
        'null',
        '{"a":"\\ud800"}',
        '{"\\u0000":0}',
        '{',
        `{"a":${'['.repeat(400)}${']'.repeat(400)}}`,
      ),
      event_id: fc.constantFrom<string | Buffer>('', 'fresh', 'fresh', ...HOSTILE_STRINGS),
      created_at: fc.constantFrom<Buffer | undefined>(
        undefined,
        message(varintField(1, 1_700_000_000), varintField(2, 5)),
        message(varintField(1, -1)),
        message(varintField(1, 253_402_300_800)), // 10000-01-01
        message(varintField(1, 253_402_214_400)), // 9999-12-31, the last second allowed
        message(varintField(2, 1_000_000_000)),
        message(varintField(2, -1)),
        message(varintField(1, 2n ** 63n - 1n)),
        Buffer.from([0xff]), // not a Timestamp
      ),
      user_id: fc.constantFrom<string | Buffer>('', 'u1', 'a b'),
      seq: fc.constantFrom<bigint | undefined>(undefined, undefined, 0n, 1n, 2n ** 64n - 1n),
      offset: fc.constantFrom<bigint | undefined>(undefined, undefined, 7n),
    },
    { requiredKeys: ['thread_id', 'run_id', 'event_type', 'category', 'content_json'] },
  )
  .map((e) => {
    const id = e.event_id === 'fresh' ? `hw${++uniq}` : e.event_id;
    const str = (field: number, v: string | Buffer | undefined): Buffer[] =>
      v === undefined ? [] : [lenField(field, v)];
    return message(
      ...str(1, e.thread_id),
      ...str(2, e.run_id),
      ...str(3, e.event_type),
      varintField(4, e.category),
      ...str(5, e.content_json),
      ...str(6, e.metadata_json),
      ...str(7, id),
      ...(e.created_at === undefined ? [] : [lenField(8, e.created_at)]),
      ...str(9, e.user_id),
      ...(e.seq === undefined ? [] : [varintField(16, e.seq)]),
      ...(e.offset === undefined ? [] : [varintField(17, e.offset)]),
    );
  });
const publishBytes = fc
  .tuple(
    fc.array(eventBytes, { minLength: 0, maxLength: 3 }),
    fc.constantFrom<number | undefined>(undefined, 1, 1, 2, 0, 3, 7, -1),
  )
  .map(([events, ack]) =>
    message(...events.map((e) => lenField(1, e)), ...(ack === undefined ? [] : [varintField(2, ack)])),
  );

// ---------------------------------------------------------------------------------------------
// Running a case

let b: FuzzBroker;
let raw: RawClient;
const findings = new Findings();

before(async () => {
  b = await FuzzBroker.start();
  raw = new RawClient(b);
});
after(async () => {
  raw?.close();
  await b?.[Symbol.asyncDispose]();
});

/** The events a successful Publish acked are in Postgres: accepted is never "left to fail". */
async function stored(
  broker: FuzzBroker,
  m: Method,
  messages: readonly Buffer[],
  a: Answer,
): Promise<string[]> {
  if (m.service !== 'runstream.v1.Ingest' || a.code !== grpc.status.OK) return [];
  const problems: string[] = [];
  const want: [string, string][] = [];
  messages.forEach((msg, i) => {
    const events = m.decode(msg).events as { thread_id: string }[];
    const res = a.responses[i];
    const acks = (res === undefined ? [] : (m.decodeResponse(res).acks ?? [])) as { event_id: string }[];
    if (acks.length !== events.length)
      problems.push(`request ${i}: ${acks.length} acks for ${events.length} events`);
    for (const [k, ack] of acks.entries()) want.push([events[k]?.thread_id ?? '', ack.event_id]);
  });
  const missing = async (): Promise<[string, string][]> => {
    const out: [string, string][] = [];
    for (const [thread, id] of want) {
      const { rows } = await broker.servers.db.query(
        'SELECT 1 FROM run_events WHERE thread_id = $1 AND event_id = $2',
        [thread, id],
      );
      if (rows.length === 0) out.push([thread, id]);
    }
    return out;
  };
  const left = await waitFor(async () => ((await missing()).length === 0 ? [] : false), {
    timeoutMs: 30_000,
    what: 'acked events in Postgres',
  }).catch(async () => missing());
  if (left.length > 0) problems.push(`acked but never stored: ${JSON.stringify(left.slice(0, 5))}`);
  return problems;
}

async function runCase(label: string, m: Method, messages: readonly Buffer[]): Promise<void> {
  await findings.before(b, fc.pre);
  const expected = expectedFor(m, messages);
  const a = await raw.call(m, messages);
  const suspicious =
    a.code === grpc.status.UNAVAILABLE || a.code === grpc.status.INTERNAL || a.code === grpc.status.UNKNOWN;
  if (suspicious && !(await b.confirmAlive())) {
    findings.fail(
      `${label} ${m.name}: the broker died`,
      `${m.name} ${messages.map((x) => x.toString('hex').slice(0, 400)).join(' | ')}\n${b.deathReport()}`,
    );
    return;
  }
  const problems = [...judgeAnswer(expected, a), ...(await stored(b, m, messages, a))];
  if (problems.length > 0) {
    // One finding per kind of input: undecodable bytes, a fault in a given field, or a valid request.
    const kind =
      expected.kind === 'invalid'
        ? expected.fields
          ? `bad ${(expected.fields[0] ?? '').replace(/\d+/g, 'N')}`
          : 'undecodable'
        : 'valid';
    findings.fail(
      `${label} ${m.name} (${kind}): ${problems.map((p) => p.replace(/[;(].*$/s, '').replace(/\d+/g, 'N')).join('; ')}`,
      `${m.name} request bytes (hex): ${messages.map((x) => x.toString('hex').slice(0, 600)).join(' | ')}\n${problems.join('\n')}`,
    );
  }
}

test('gRPC property: random bytes to every method of Ingest, Subscriber and History get INVALID_ARGUMENT, never INTERNAL', async (t) => {
  t.diagnostic(`FUZZ_SEED=${fuzzSeed()}`);
  await fuzzBody(t, b, async () => {
    await fc.assert(
      fc.asyncProperty(randomCase, async ([m, messages]) => runCase('random bytes', m, messages)),
      fcParams(600),
    );
    findings.report(t);
  });
});

test('gRPC property: mutated valid requests to every method get the documented status and field', async (t) => {
  await fuzzBody(t, b, async () => {
    await fc.assert(
      fc.asyncProperty(mutatedCase, async ([m, messages]) => runCase('mutated', m, messages)),
      fcParams(1000),
    );
    findings.report(t);
  });
});

test('gRPC property: hand-written Publish requests with hostile fields are refused naming the field, or acked and stored', async (t) => {
  await fuzzBody(t, b, async () => {
    const publish = method('Publish');
    const stream = method('PublishStream');
    await fc.assert(
      fc.asyncProperty(
        fc.array(publishBytes, { minLength: 1, maxLength: 3 }),
        fc.boolean(),
        async (messages, onStream) =>
          onStream
            ? runCase('hand-written', stream, messages)
            : runCase('hand-written', publish, messages.slice(0, 1)),
      ),
      fcParams(800),
    );
    findings.report(t);
  });
});

// ---------------------------------------------------------------------------------------------
// The documented limits, and content the store cannot hold. Each case runs on its own
// broker, so an event that wedges the persister cannot hide the next case's result.

const T = 'fz-limits';
const str = (n: number, unit = 'x'): string => unit.repeat(n);
/** A JSON string literal of exactly `bytes` bytes made of escaped backslashes (`\\`), which double when escaped again. */
const backslashes = (bytes: number): string => `"${'\\\\'.repeat((bytes - 2) / 2)}"`;
/** A JSON object literal `{"k":"…"}` of exactly `bytes` bytes of escaped backslashes. */
const backslashObject = (bytes: number): string => `{"k":"${'\\\\'.repeat((bytes - 8) / 2)}"}`;
const nested = (depth: number, inner = ''): string => `${'['.repeat(depth)}${inner}${']'.repeat(depth)}`;

interface LimitCase {
  readonly name: string;
  readonly events: { content_json: string; metadata_json?: string }[];
  /** Refused naming this field, or (undefined) acked at PERSISTED and readable back. */
  readonly refused?: string | readonly string[];
  /** Refusal or storage are both right (the store's own limits are not documented). */
  readonly either?: string;
}

const LIMIT_CASES: readonly LimitCase[] = [
  {
    name: 'content_json of exactly 262 144 bytes',
    events: [{ content_json: `"${str(MAX_CONTENT_BYTES - 2)}"` }],
  },
  {
    name: 'content_json of 262 145 bytes',
    events: [{ content_json: `"${str(MAX_CONTENT_BYTES - 1)}"` }],
    refused: 'events[0].content_json',
  },
  {
    name: 'metadata_json of exactly 262 144 bytes',
    events: [{ content_json: '{}', metadata_json: `{"k":"${str(MAX_CONTENT_BYTES - 8)}"}` }],
  },
  {
    name: 'metadata_json of 262 145 bytes',
    events: [{ content_json: '{}', metadata_json: `{"k":"${str(MAX_CONTENT_BYTES - 7)}"}` }],
    refused: 'events[0].metadata_json',
  },
  {
    name: 'content_json of 262 144 bytes of \\\\',
    events: [{ content_json: backslashes(MAX_CONTENT_BYTES) }],
  },
  {
    name: 'content_json and metadata_json of 262 144 bytes of \\\\ each (2 × 262 144)',
    events: [
      { content_json: backslashes(MAX_CONTENT_BYTES), metadata_json: backslashObject(MAX_CONTENT_BYTES) },
    ],
  },
  {
    name: 'four events of 262 144 bytes of \\\\ in one request',
    events: Array.from({ length: 4 }, () => ({ content_json: backslashes(MAX_CONTENT_BYTES) })),
  },
  {
    name: 'content_json of 262 144 bytes of \\u00e9 escapes',
    events: [
      {
        content_json: `"${'\\u00e9'.repeat((MAX_CONTENT_BYTES - 2) / 6)}${'x'.repeat((MAX_CONTENT_BYTES - 2) % 6)}"`,
      },
    ],
  },
  {
    name: 'content_json of 131 072 two-byte characters (262 146 bytes)',
    events: [{ content_json: `"${'\u00e9'.repeat(131_072)}"` }],
    refused: 'events[0].content_json',
  },
  // RS_MAX_JSON_DEPTH (default 512) is the documented nesting limit, far below Postgres' own.
  { name: 'content_json nested 512 deep (at RS_MAX_JSON_DEPTH)', events: [{ content_json: nested(512) }] },
  {
    name: 'content_json nested 512 deep around a \\u escape',
    events: [{ content_json: nested(512, '"\\u0041"') }],
  },
  {
    name: 'content_json nested 513 deep',
    events: [{ content_json: nested(513) }],
    refused: 'events[0].content_json',
  },
  {
    name: 'content_json nested 10 000 deep',
    events: [{ content_json: nested(10_000) }],
    refused: 'events[0].content_json',
  },
  {
    name: 'content_json nested 100 000 deep',
    events: [{ content_json: nested(100_000) }],
    refused: 'events[0].content_json',
  },
  {
    name: 'content_json nested 5 000 deep with a \\u escape',
    events: [{ content_json: nested(5_000, '"\\u0041"') }],
    refused: 'events[0].content_json',
  },
  {
    name: 'content_json nested 100 000 deep with a \\u escape',
    events: [{ content_json: nested(100_000, '"\\u0041"') }],
    refused: 'events[0].content_json',
  },
  {
    name: 'content_json nested 100 000 deep with a \\u0000',
    events: [{ content_json: nested(100_000, '"\\u0000"') }],
    refused: 'events[0].content_json',
  },
  {
    name: 'content_json nested 131 071 deep (at the size limit)',
    events: [{ content_json: nested(131_071) }],
    refused: 'events[0].content_json',
  },
  {
    name: 'metadata_json nested 100 000 deep',
    events: [{ content_json: '{}', metadata_json: `{"a":${nested(100_000)}}` }],
    refused: 'events[0].metadata_json',
  },
  {
    name: 'content_json with \\u0000 in a key',
    events: [{ content_json: '{"a\\u0000":1}' }],
    refused: 'events[0].content_json',
  },
  {
    name: 'content_json with a lone surrogate',
    events: [{ content_json: '["ok","\\udfff"]' }],
    refused: 'events[0].content_json',
  },
  {
    name: 'metadata_json with a lone surrogate',
    events: [{ content_json: '{}', metadata_json: '{"\\ud800":1}' }],
    refused: 'events[0].metadata_json',
  },
  { name: 'content_json with a surrogate pair', events: [{ content_json: '"\\ud83d\\ude00"' }] },
  {
    name: 'content_json with 256 KiB of digits, one run: a number past a double',
    events: [{ content_json: `[${'7'.repeat(256 * 1024 - 2)}]` }],
    refused: 'events[0].content_json',
  },
  {
    name: 'content_json with 256 KiB of 308-digit numbers: each within a double',
    events: [{ content_json: `[${Array.from({ length: 840 }, () => `1${'0'.repeat(307)}`).join(',')}]` }],
  },
  {
    name: '5 000 events in one request',
    events: Array.from({ length: MAX_EVENTS }, (_, i) => ({ content_json: String(i) })),
  },
  {
    name: '5 001 events in one request',
    events: Array.from({ length: MAX_EVENTS + 1 }, (_, i) => ({ content_json: String(i) })),
    refused: 'events',
  },
  {
    name: 'the second event refused: nothing stored',
    events: [{ content_json: '{}' }, { content_json: '"\\u0000"' }],
    refused: 'events[1].content_json',
  },
];

test(`gRPC limits: ${LIMIT_CASES.length} events at and over the documented limits are stored whole, or refused naming the field`, async (t) => {
  // Its own broker: a case that wedges the persister gets a fresh stream for the next one.
  const u = await FuzzBroker.start();
  try {
    for (const k of LIMIT_CASES) {
      await t.test(k.name, async () => {
        if (!u.alive) await u.respawnFresh();
        const thread = `${T}-${++uniq}`;
        const events = k.events.map((e, i) => ({
          thread_id: thread,
          run_id: 'r1',
          event_id: `e${i}`,
          event_type: 'ai_chunk',
          category: 'MESSAGE' as const,
          ...e,
        }));
        const logMark = u.stdout.length;
        // A batch the store refuses is retried for ever, and the persister logs each retry:
        // that line ends the wait for a PERSISTED ack that cannot come.
        const failingLine = (): string | undefined =>
          u.stdout
            .slice(Math.max(0, logMark - 2000))
            .split('\n')
            .find((l) => l.includes('storing a batch failed'));
        const client = new IngestClient(u.grpcTarget);
        let failing: string | undefined;
        let outcome: { code: grpc.status; details: string; seqs?: number[] };
        try {
          outcome = await new Promise((resolve) => {
            const watch = setInterval(() => {
              failing = failingLine();
              if (failing) call.cancel();
            }, 50);
            const call = client.raw.Publish(
              { events, ack: 'PERSISTED' },
              client.metadata(),
              { deadline: Date.now() + 120_000 },
              (err, res) => {
                clearInterval(watch);
                resolve(
                  err
                    ? { code: err.code, details: err.details ?? err.message }
                    : {
                        code: grpc.status.OK,
                        details: '',
                        seqs: (res?.acks ?? []).map((x) => Number(x.seq)),
                      },
                );
              },
            );
          });
        } finally {
          client.close();
        }
        failing ??= failingLine();
        const alive = await u.confirmAlive();
        const { rows } = await u.servers.db.query<{ event_id: string }>(
          'SELECT event_id FROM run_events WHERE thread_id = $1 ORDER BY seq',
          [thread],
        );
        const answer =
          failing && outcome.code === grpc.status.CANCELLED
            ? 'no PERSISTED ack (the test cancelled the call once the persister logged the failure)'
            : `${STATUS_NAME[outcome.code]} ${JSON.stringify(outcome.details.slice(0, 300))}`;
        const got = `${answer}; ${rows.length} rows stored`;
        const problems: string[] = [];
        if (!alive) problems.push(`the broker died\n${u.deathReport()}`);
        if (failing) {
          problems.push(
            `the events were taken into the log and fail in Postgres on every retry, so the persister, which reads the log in order, retries this batch for ever and stores nothing after it: ${failing.slice(0, 400)}`,
          );
        }
        const refusedFields =
          k.refused === undefined ? [] : typeof k.refused === 'string' ? [k.refused] : k.refused;
        const allowed = k.either ? ['events[0].content_json', 'events[0].metadata_json'] : refusedFields;
        const refusedRight =
          outcome.code === grpc.status.INVALID_ARGUMENT && allowed.includes(fieldOf(outcome.details) ?? '');
        const storedRight =
          outcome.code === grpc.status.OK &&
          rows.length === events.length &&
          (outcome.seqs ?? []).every((s) => s > 0) &&
          rows.every((r, i) => r.event_id === `e${i}`);
        if (k.refused !== undefined) {
          if (!refusedRight)
            problems.push(`expected INVALID_ARGUMENT naming ${allowed.join(' or ')}; got ${got}`);
          if (rows.length > 0) problems.push(`a refused request stored ${rows.length} rows`);
        } else if (k.either) {
          if (!refusedRight && !storedRight) {
            problems.push(
              `expected INVALID_ARGUMENT naming ${allowed.join(' or ')} (${k.either}), or every event stored at PERSISTED; got ${got}`,
            );
          }
        } else if (!storedRight) {
          problems.push(`expected every event acked at PERSISTED and stored; got ${got}`);
        }
        if (!alive || failing) await u.respawnFresh();
        assert.deepEqual(problems, [], k.name);
      });
    }
  } finally {
    await u[Symbol.asyncDispose]();
  }
});

test('gRPC: a message over RS_MAX_GRPC_MESSAGE_BYTES (16 MiB by default) gets RESOURCE_EXHAUSTED, and the broker stays within its memory bound', async (t) => {
  await fuzzBody(t, b, async () => {
    const big = lenField(1, Buffer.alloc(DEFAULT_MAX_GRPC_MESSAGE_BYTES + 16, 0x61));
    for (const m of [method('Publish'), method('PublishStream'), method('ListEvents')]) {
      const a = await raw.call(m, [big]);
      assert.ok(await b.confirmAlive(), b.deathReport());
      assert.equal(STATUS_NAME[a.code], 'RESOURCE_EXHAUSTED', `${m.name}: ${a.details}`);
    }
  });
});

test('after the gRPC fuzzing the broker is alive and serves a publish → WebSocket → History round trip', async (t) => {
  const crash = await b.ensureUp();
  if (crash) t.diagnostic(`restarted after a crash: ${crash.exit}`);
  t.diagnostic(
    `crashes during this file: ${b.crashes.length}; cases: ~${fuzzRuns(2400) + LIMIT_CASES.length}`,
  );
  for (const c of b.crashes) t.diagnostic(`crash of pid ${c.pid}: ${c.exit}\n${c.stderr.slice(-1500)}`);
  await assertServing(b);
  assert.equal(b.crashes.length, 0, 'the broker crashed during the gRPC fuzzing (see the diagnostics)');
});
