// Fuzzing the HTTP port with raw requests: request lines (methods, targets such as `//[`,
// `/%`, bad percent-encoding, overlong paths), headers (bad, duplicate, huge), query strings
// (bad encoding, repeated and unknown parameters) and bodies, aimed at every route, with and
// without WebSocket upgrade headers. The broker is a child process: a crash is an exit with
// its stderr, not a crashed test runner.
//
// What every answer must be (docs/protocol.md §7, §9, §14; docs/api.md "Errors"): an answer,
// never a 5xx for client input, never a dropped connection (Node's own parser may answer
// 400/431 and close); a broker error carries {"error":{"code","message"}}, and a 400 says
// invalid_argument with `<field>: <problem>`. Where the input has one known fault (a bad path
// segment, a bad parameter, a bad cancel body) the 400 must name that field.
//
// FUZZ_SEED overrides the seed, FUZZ_SCALE multiplies the case counts.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import { IngestClient } from '../src/client/ingest-client.js';
import {
  assertServing,
  brokerDiedOn,
  Findings,
  FuzzBroker,
  fcParams,
  fuzzBody,
  fuzzRuns,
  fuzzSeed,
} from './helpers/fuzz.js';
import { type Expectation, type HttpCase, judge, send } from './helpers/http-fuzz.js';
import { describeOutcome } from './helpers/raw-http.js';

/** A thread with stored events: run RUN is running, run ENDED has ended. */
const THREAD = 'fz-http-thread';
const RUN = 'fz-run';
const ENDED = 'fz-ended';

// The rules the oracle applies, as docs/api.md and docs/protocol.md state them.
const ID = /^[A-Za-z0-9_-]{1,128}$/;
const EVENT_TYPE = /^[\x21-\x7e]{1,64}$/;
const CATEGORIES = ['message', 'trace', 'lifecycle'];
const STATUSES = ['pending', 'running', 'success', 'error', 'interrupted', 'cancelled'];
const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const MAX_CANCEL_BODY_BYTES = 16 * 1024;
const MAX_REASON = 1024;

let b: FuzzBroker;
before(async () => {
  b = await FuzzBroker.start();
  const client = new IngestClient(b.grpcTarget);
  try {
    const ev = (
      run: string,
      n: number,
      type = 'ai_chunk',
      category: 'MESSAGE' | 'LIFECYCLE' = 'MESSAGE',
    ) => ({
      thread_id: THREAD,
      run_id: run,
      event_id: `${run}-${n}`,
      event_type: type,
      category,
      content_json: JSON.stringify({ n }),
    });
    await client.publish(
      [
        ev(RUN, 1, 'run_start', 'LIFECYCLE'),
        ev(RUN, 2),
        ev(ENDED, 1, 'run_start', 'LIFECYCLE'),
        ev(ENDED, 2),
        ev(ENDED, 3, 'run_end', 'LIFECYCLE'),
      ],
      'PERSISTED',
    );
  } finally {
    client.close();
  }
});
after(async () => {
  await b?.[Symbol.asyncDispose]();
});

const HOST: readonly [string, string] = ['Host', '127.0.0.1'];

/** Sends a case; the problems with its answer (a death of the broker is one). */
async function run(
  c: HttpCase,
  opts: { upgrade?: boolean; expect?: Expectation | undefined } = {},
): Promise<{ problems: string[]; detail: string }> {
  const o = await send(b.httpPort, c, {
    // An SSE stream that started is an answer: do not wait for its end.
    enough: (r) => (r.headers['content-type'] ?? '').startsWith('text/event-stream'),
  });
  const head = `${c.method} ${JSON.stringify(c.target).slice(0, 300)}`;
  // A dropped connection or a 5xx may be the process dying: ask it before judging.
  const suspicious = o.kind !== 'response' || o.res.status >= 500;
  if (suspicious ? !(await b.confirmAlive()) : !b.alive) {
    return { problems: ['the broker died'], detail: brokerDiedOn(b, c).message };
  }
  const upgrade = opts.upgrade ?? c.headers.some(([n, v]) => /^upgrade$/i.test(n) && v !== '');
  const verdict = judge(c, o, { upgrade, expect: opts.expect });
  return {
    problems: verdict.problems,
    detail: `${head} → ${describeOutcome(o)}\n${verdict.problems.join('\n')}`,
  };
}

async function assertCase(c: HttpCase, opts: { upgrade?: boolean; expect?: Expectation | undefined } = {}) {
  const { problems, detail } = await run(c, opts);
  assert.deepEqual(problems, [], detail);
}

/** A problem list as a signature: the same fault on other inputs is one finding. */
const signature = (prefix: string, problems: readonly string[]): string =>
  `${prefix}: ${problems.map((p) => p.replace(/\(.*\)/g, '').trim()).join('; ')}`;

const findings = new Findings();

// ---------------------------------------------------------------------------------------------
// The oracle: what a request to a route should get, from the documented rules.

/** `ok`, or the reason a path segment is not a valid id once percent-decoded. */
function segmentBad(raw: string): boolean {
  let v: string;
  try {
    v = decodeURIComponent(raw);
  } catch {
    return true;
  }
  return !ID.test(v);
}

interface Route {
  readonly template: string;
  /** The method the route serves. */
  readonly method: 'GET' | 'POST' | 'DELETE';
  readonly kind: 'history' | 'sse' | 'langgraph' | 'cancel' | 'probe';
  /** History: the query parameters the route reads (docs/api.md). */
  readonly reads?: readonly string[];
}

const PAGING = ['after_seq', 'before_seq', 'limit', 'user_id'];
const ROUTES: readonly Route[] = [
  { template: '/healthz', method: 'GET', kind: 'probe' },
  { template: '/readyz', method: 'GET', kind: 'probe' },
  {
    template: '/v1/threads/{t}/events',
    method: 'GET',
    kind: 'history',
    reads: [...PAGING, 'run_id', 'categories', 'event_types'],
  },
  { template: '/v1/threads/{t}/messages', method: 'GET', kind: 'history', reads: [...PAGING, 'view'] },
  {
    template: '/v1/threads/{t}/messages/count',
    method: 'GET',
    kind: 'history',
    reads: ['run_id', 'user_id'],
  },
  {
    template: '/v1/threads/{t}/runs',
    method: 'GET',
    kind: 'history',
    reads: ['before_seq', 'limit', 'user_id', 'status'],
  },
  { template: '/v1/threads/{t}/runs/{r}', method: 'GET', kind: 'history', reads: ['user_id'] },
  {
    template: '/v1/threads/{t}/runs/{r}/events',
    method: 'GET',
    kind: 'history',
    reads: [...PAGING, 'categories', 'event_types'],
  },
  {
    template: '/v1/threads/{t}/runs/{r}/messages',
    method: 'GET',
    kind: 'history',
    reads: [...PAGING, 'view'],
  },
  { template: '/v1/threads/{t}/runs/{r}/messages/count', method: 'GET', kind: 'history', reads: ['user_id'] },
  { template: '/v1/threads/{t}', method: 'DELETE', kind: 'history', reads: ['user_id'] },
  { template: '/v1/threads/{t}/runs/{r}', method: 'DELETE', kind: 'history', reads: ['user_id'] },
  { template: '/v1/threads/{t}/runs/{r}/cancel', method: 'POST', kind: 'cancel', reads: [] },
  { template: '/v1/threads/{t}/stream', method: 'GET', kind: 'sse' },
  { template: '/threads/{t}/runs/{r}/stream', method: 'GET', kind: 'langgraph' },
  { template: '/threads/{t}/runs/{r}', method: 'GET', kind: 'langgraph' },
];
/** Paths of History, where another method gets 405 (docs/api.md "Operations"). */
const HISTORY_PATHS = new Set(ROUTES.filter((r) => r.kind === 'history').map((r) => r.template));

function intBad(v: string | null, min: number, max: number): boolean {
  if (v === null || v === '') return false;
  return !/^\d+$/.test(v) || !Number.isSafeInteger(Number(v)) || Number(v) < min || Number(v) > max;
}
function idBad(v: string | null): boolean {
  return v !== null && v !== '' && !ID.test(v);
}
function listValues(q: URLSearchParams, name: string): string[] {
  return q
    .getAll(name)
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter((v) => v !== '');
}
function listBad(q: URLSearchParams, name: string, ok: (v: string) => boolean): boolean {
  const vs = listValues(q, name);
  return vs.length > 64 || vs.some((v) => !ok(v));
}

/** The fields a History request's query gets wrong (the route's own parameters only). */
/** Parameters a route takes besides those it reads: the token, and the long-poll of the events routes. */
function takes(route: Route): Set<string> {
  const extra = route.template.endsWith('/events') ? ['wait_ms'] : [];
  return new Set([...(route.reads ?? []), ...extra, 'access_token']);
}

/** Parameters no route takes are refused, named (or, not shaped like a name, as the query's). */
function unknownParams(route: Route, q: URLSearchParams): string[] {
  const known = takes(route);
  return [...q.keys()]
    .filter((k) => !known.has(k))
    .map((k) => (/^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(k) ? k : 'query'));
}

function historyQueryFaults(route: Route, q: URLSearchParams): string[] {
  const bad: string[] = unknownParams(route, q);
  const wait = q.get('wait_ms');
  if (route.template.endsWith('/events') && intBad(wait, 0, 60_000)) bad.push('wait_ms');
  for (const name of route.reads ?? []) {
    const v = q.get(name);
    const wrong =
      name === 'after_seq'
        ? intBad(v, 0, MAX_SAFE)
        : name === 'before_seq'
          ? intBad(v, 1, MAX_SAFE)
          : name === 'limit'
            ? intBad(v, 1, 1000)
            : name === 'user_id' || name === 'run_id'
              ? idBad(v)
              : name === 'categories'
                ? listBad(q, name, (x) => CATEGORIES.includes(x))
                : name === 'event_types'
                  ? listBad(q, name, (x) => EVENT_TYPE.test(x))
                  : name === 'status'
                    ? listBad(q, name, (x) => STATUSES.includes(x))
                    : name === 'view'
                      ? !(v === null || v === '' || v === 'events' || v === 'chat')
                      : false;
    // The run-status filter is named `statuses` in errors, on both transports.
    if (wrong) bad.push(name === 'status' ? 'statuses' : name);
  }
  return bad;
}

/** What a cancel body is wrong about: `body` (size, JSON, not an object), `reason`, or nothing. */
function cancelBodyFault(body: string | Buffer | undefined): 'body' | 'reason' | undefined {
  if (body === undefined) return undefined;
  const bytes = Buffer.from(body);
  if (bytes.length > MAX_CANCEL_BODY_BYTES) return 'body';
  const text = bytes.toString('utf8').trim();
  if (text === '') return undefined;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return 'body';
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return 'body';
  const reason = (v as { reason?: unknown }).reason;
  if (reason === undefined) return undefined;
  return typeof reason === 'string' && reason.length <= MAX_REASON ? undefined : 'reason';
}

interface Targeted {
  readonly route: Route;
  readonly t: string;
  readonly r: string;
  readonly query: string;
  readonly method: string;
  readonly headers: readonly (readonly [string, string])[];
  readonly body: string | undefined;
  readonly chunked: boolean;
}

function targetOf(x: Pick<Targeted, 'route' | 't' | 'r' | 'query'>): string {
  return `${x.route.template.replace('{t}', x.t).replace('{r}', x.r)}${x.query}`;
}

/** Characters RFC 3986 allows in a path (a `%` escape's validity is the segment decoder's to judge). */
const PATH_CHARS = /^[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*$/;

/** A target whose path holds other characters is refused whole: 400 naming `request-target`. */
function badPathChars(target: string): Expectation | undefined {
  if (!target.startsWith('/')) {
    // Absolute-form (a proxy's) keeps its path; anything else (`*`, a bare word) is no path.
    if (/^https?:\/\//i.test(target)) return undefined;
    return {
      status: [400],
      fields: ['request-target'],
      why: 'a target that is no origin- or absolute-form',
      wellFormed: false, // Node's parser may refuse it first
    };
  }
  const end = target.search(/[?#]/);
  const path = end < 0 ? target : target.slice(0, end);
  if (path.split('/').some((s) => /^(?:\.|%2e){1,2}$/i.test(s))) {
    return { status: [400], fields: ['request-target'], why: 'a `.` or `..` segment, raw or escaped' };
  }
  if (PATH_CHARS.test(path)) return undefined;
  return {
    status: [400],
    fields: ['request-target'],
    why: 'a path with characters RFC 3986 forbids there',
    wellFormed: false, // Node's parser may refuse it first
  };
}

/** The expected answer of a well-formed request to a route, from the documented rules. */
function expectationOf(x: Targeted): Expectation | undefined {
  const target = targetOf(x);
  const refused = badPathChars(target);
  if (refused) return refused;
  const url = new URL(target, 'http://localhost');
  // Only when the URL parser leaves the path as written is the route the one we aimed at.
  if (url.pathname !== target.split('?')[0]) return undefined;
  const route = x.route;
  const segs = [
    ...(route.template.includes('{t}') ? [['thread_id', x.t] as const] : []),
    ...(route.template.includes('{r}') ? [['run_id', x.r] as const] : []),
  ];
  const badSegs = segs.filter(([, v]) => segmentBad(v)).map(([f]) => f);
  if (x.method !== route.method) {
    if (HISTORY_PATHS.has(route.template) && ['POST', 'PUT', 'PATCH', 'DELETE', 'GET'].includes(x.method)) {
      const methods = ROUTES.filter((r) => r.template === route.template).map((r) => r.method);
      if (!methods.includes(x.method as Route['method'])) {
        return { status: [405], why: `${x.method} on a History path` };
      }
    }
    return undefined;
  }
  switch (route.kind) {
    case 'probe':
      return { status: [200], why: 'a probe' };
    case 'cancel': {
      // The path is checked before the body: either may be the one named.
      const bodyFault = cancelBodyFault(x.body);
      const faults = [
        ...badSegs,
        ...unknownParams(route, url.searchParams),
        ...(bodyFault ? [bodyFault] : []),
      ];
      if (faults.length > 0) return { status: [400], fields: faults, why: 'a bad cancel request' };
      if (x.t === THREAD && x.r === RUN) return { status: [202], why: 'a cancel of a running run' };
      if (x.t === THREAD && x.r === ENDED) return { status: [409], why: 'a cancel of an ended run' };
      return { status: [404], why: 'a cancel of a run without events' };
    }
    case 'sse':
    case 'langgraph':
      if (badSegs.length > 0) return { status: [400], fields: badSegs, why: 'a bad id in the path' };
      return undefined; // their queries are the subject of fuzz-sse.test.ts
    case 'history': {
      const faults = [...badSegs, ...historyQueryFaults(route, url.searchParams)];
      if (faults.length > 0) return { status: [400], fields: faults, why: 'a bad History request' };
      if (route.template === '/v1/threads/{t}/runs/{r}' && route.method === 'GET') {
        const known = x.t === THREAD && (x.r === RUN || x.r === ENDED);
        return { status: known ? [200] : [404], why: 'GetRun' };
      }
      return { status: [200], why: 'a valid History request' };
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Generators

const validId = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(THREAD, RUN, ENDED) },
  { weight: 2, arbitrary: fc.stringMatching(/^[A-Za-z0-9_-]{1,16}$/) },
  { weight: 1, arbitrary: fc.constant('x'.repeat(128)) },
);
/** Segments that decode to something other than a valid id, or do not decode at all. */
const BAD_SEGMENTS = [
  '%',
  '%%',
  '%2',
  '%zz',
  'a%',
  '%E0%A4%A',
  '%E0%A4',
  '%ED%A0%80', // a lone surrogate, UTF-8 encoded
  '%C0%AF', // overlong UTF-8
  '%FF',
  '%00',
  '%2F',
  'a%2Fb',
  'a%20b',
  'a.b',
  'a:b',
  'a*',
  '[',
  ']',
  '%5B',
  'x'.repeat(129),
  'y'.repeat(5000),
  '%41%42', // decodes to AB: valid
];
const segment = fc.oneof(
  { weight: 3, arbitrary: validId },
  { weight: 3, arbitrary: fc.constantFrom(...BAD_SEGMENTS) },
  {
    weight: 1,
    arbitrary: fc
      .string({ unit: 'grapheme', minLength: 1, maxLength: 12 })
      .map((s) => encodeURIComponent(s).replace(/\./g, 'E')),
  },
);

const NUMBERS = [
  '0',
  '1',
  '5',
  '1000',
  '1001',
  '-1',
  '1.5',
  '1e3',
  '0x10',
  '+1',
  '%201',
  '01',
  '9007199254740991',
  '9007199254740992',
  '99999999999999999999',
  '',
];
const HOSTILE_VALUES = [
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
  '[',
  '%5B%5D',
  '"',
  "'",
  'null',
  'true',
  '[]',
  '{}',
];
const PARAM_NAMES = [
  'after_seq',
  'before_seq',
  'limit',
  'run_id',
  'user_id',
  'categories',
  'event_types',
  'status',
  'view',
  'from_offset',
  'live_only',
  'stream_mode',
  'cancel_on_disconnect',
  'access_token',
  'namespace',
  'checkpoint_id',
];
const paramValue = fc.oneof(
  fc.constantFrom(...NUMBERS),
  fc.constantFrom(...HOSTILE_VALUES),
  validId,
  fc.constantFrom(
    'message',
    'trace',
    'lifecycle',
    'message,trace',
    'chat',
    'events',
    'running',
    'success,bogus',
    'MESSAGE',
    '%20message%20',
  ),
  fc.constant(Array.from({ length: 65 }, () => 'message').join(',')),
  fc.stringMatching(/^[A-Za-z0-9%,._~-]{0,20}$/),
);
const paramName = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...PARAM_NAMES) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      'foo',
      '',
      '%',
      '%E0%A4%A',
      'after_seq%00',
      'AFTER_SEQ',
      'limit[]',
      'a'.repeat(300),
    ),
  },
);
const query = fc
  .array(fc.tuple(paramName, paramValue, fc.boolean()), { maxLength: 6 })
  .chain((ps) =>
    fc
      .constantFrom('?', '?&', '')
      .map((lead) =>
        ps.length === 0
          ? lead === '?'
            ? '?'
            : ''
          : `?${ps.map(([n, v, eq]) => (eq || v !== '' ? `${n}=${v}` : n)).join('&')}`,
      ),
  );

const header = fc.oneof(
  fc.constantFrom(
    ['Last-Event-ID', '5'],
    ['Last-Event-ID', '-1'],
    ['Last-Event-ID', 'abc'],
    ['Last-Event-ID', '99999999999999999999'],
    ['Last-Event-ID', ''],
    ['Origin', 'http://example.com'],
    ['Origin', 'null'],
    ['Authorization', 'Bearer not-a-jwt'],
    ['Authorization', 'Basic Zm9vOmJhcg=='],
    ['x-api-key', 'k'],
    ['Accept', 'text/event-stream'],
    ['Content-Type', 'application/json'],
    ['Content-Type', 'text/plain; charset=latin1'],
    ['Access-Control-Request-Method', 'DELETE'],
    ['Cookie', 'a=b'],
    ['Expect', '100-continue'],
    ['X-Forwarded-For', '1.2.3.4'],
  ) as fc.Arbitrary<readonly [string, string]>,
  fc
    .tuple(fc.stringMatching(/^X-[A-Za-z0-9-]{1,20}$/), fc.stringMatching(/^[ -~]{0,40}$/))
    .map(([n, v]) => [n, v.trim()] as const),
);

const cancelBody = fc.oneof(
  fc.constant(undefined),
  fc.constantFrom(
    '',
    '  ',
    '{}',
    '{"reason":"stop"}',
    '{"reason":""}',
    '{"reason":5}',
    '{"reason":null}',
    '{"reason":{"a":1}}',
    '{"reason":["x"]}',
    `{"reason":"${'r'.repeat(1024)}"}`,
    `{"reason":"${'r'.repeat(1025)}"}`,
    '[]',
    'null',
    '"stop"',
    '5',
    '{',
    '{"reason":"stop"}x',
    '{"reason":"\\ud800"}',
    '{"reason":"a\\u0000b"}',
    `${'['.repeat(5000)}${']'.repeat(5000)}`,
    `{"reason":"x","pad":"${'p'.repeat(MAX_CANCEL_BODY_BYTES)}"}`,
    `{"reason":"x","pad":"${'p'.repeat(MAX_CANCEL_BODY_BYTES - 30)}"}`,
  ),
  fc.json({ maxDepth: 3 }),
);

const targeted: fc.Arbitrary<Targeted> = fc
  .record({
    route: fc.constantFrom(...ROUTES),
    t: segment,
    r: segment,
    query,
    otherMethod: fc.option(
      fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS', 'TRACE'),
      {
        freq: 4,
      },
    ),
    headers: fc.array(header, { maxLength: 4 }),
    body: cancelBody,
    chunked: fc.boolean(),
  })
  .map(({ route, t, r, query: q, otherMethod, headers, body, chunked }) => {
    // No DELETE of the thread the other cases read.
    const safeT = route.method === 'DELETE' && t === THREAD ? 'fz-deletable' : t;
    const method = otherMethod ?? route.method;
    return {
      route,
      t: safeT,
      r,
      query: q,
      method,
      headers,
      body: method === 'POST' || method === 'PUT' ? body : undefined,
      chunked,
    };
  });

function toCase(x: Targeted): HttpCase {
  return {
    method: x.method,
    target: targetOf(x),
    headers: [HOST, ...x.headers],
    body: x.body,
    chunked: x.chunked,
  };
}

// ---------------------------------------------------------------------------------------------
// Mutations of well-formed requests: the request line, header lines and version. Framing is
// left intact (no CR/LF inserted, Content-Length always true), so the broker is never left
// waiting for bytes that will not come.

const HOSTILE_CHARS = [
  '[',
  ']',
  '%',
  '%E0%A4%A',
  '//',
  '\\',
  '#',
  '?',
  '\x7f',
  '\x80',
  '\xff',
  '\x00',
  '\t',
  '"',
  '<',
  '{',
  '|',
  '^',
  '`',
  '@',
  ':',
  ';',
  '..',
  '%2e%2e',
  '\u00e9',
];
const WEIRD_TARGETS = [
  '*',
  '//[',
  '/%',
  '//',
  '///',
  'http://[/healthz',
  'http://localhost/healthz',
  'http://a:99999/',
  '//x:y@[::1',
  '//%',
  '//a^b/',
  '%',
  '/..%2f..%2f',
  '/\\\\',
  '//localhost/healthz',
  '/v1/threads/../../healthz',
  'localhost:443',
  `/${'a'.repeat(20_000)}`,
  `/v1/threads/${'t'.repeat(15_000)}/events`,
];
const METHODS = [
  'get',
  'GETT',
  'G@T',
  'GET\x00',
  'PROPFIND',
  'MKCOL',
  'SEARCH',
  'PURGE',
  'LINK',
  'CONNECT',
  'TRACE',
  'M-SEARCH',
  'ÄÖ',
  'POST',
];
const VERSIONS = [
  'HTTP/1.0',
  'HTTP/2.0',
  'HTTP/1.2',
  'HTTP/0.9',
  'HTTPS/1.1',
  'http/1.1',
  'HTTP/1.1 extra',
  'HTTP/1.',
];

type Mutation = (c: HttpCase) => HttpCase;
const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.constantFrom(...METHODS).map(
    (m): Mutation =>
      (c) => ({ ...c, method: m }),
  ),
  fc.tuple(fc.constantFrom(...HOSTILE_CHARS), fc.nat()).map(
    ([s, at]): Mutation =>
      (c) => {
        const i = at % (c.target.length + 1);
        return { ...c, target: `${c.target.slice(0, i)}${s}${c.target.slice(i)}` };
      },
  ),
  fc.constantFrom(...WEIRD_TARGETS).map(
    (t): Mutation =>
      (c) => ({ ...c, target: t }),
  ),
  fc.constantFrom('//', '//[', '/%', 'http://localhost').map(
    (p): Mutation =>
      (c) => ({ ...c, target: `${p}${c.target}` }),
  ),
  fc.constantFrom(...VERSIONS).map(
    (v): Mutation =>
      (c) => ({ ...c, version: v }),
  ),
  fc.constant<Mutation>((c) => ({ ...c, headers: c.headers.filter(([n]) => n !== 'Host') })),
  fc
    .constantFrom(
      ['Host', ''],
      ['Host', 'a b'],
      ['Host', '['],
      ['Host', 'x'.repeat(300)],
      ['Bad Name', 'x'],
      ['X(', 'y'],
      ['\u00dcnicode', 'z'],
      ['X-Nul', 'a\x00b'],
      ['X-Del', 'a\x7fb'],
      ['X-High', '\x80\xff\xfe'],
      ['X-Huge', 'h'.repeat(20_000)],
      ['X-Big', 'h'.repeat(8_000)],
      ['Content-Length', 'abc'],
      ['Content-Length', '-1'],
      ['Content-Length', '0'],
      ['Transfer-Encoding', 'gzip'],
      ['Transfer-Encoding', 'chunked, identity'],
      ['Upgrade', 'websocket'],
      ['Connection', 'Upgrade'],
      ['Connection', 'close'],
      ['Last-Event-ID', '\x80\xff'],
      ['Origin', '\x00'],
    )
    .map(
      ([n, v]): Mutation =>
        (c) => ({ ...c, headers: [...c.headers, [n as string, v as string]] }),
    ),
  fc.constantFrom(' folded', '\tfolded', 'NoColon', ':empty-name', 'X-A:b:c').map(
    (l): Mutation =>
      (c) => ({ ...c, rawLines: [...(c.rawLines ?? []), l] }),
  ),
  fc.constant<Mutation>((c) => ({ ...c, headers: [...c.headers, ...c.headers] })),
  fc
    .constantFrom<string | Buffer>(
      '{"reason":"x"}',
      Buffer.from([0xff, 0xfe, 0x00, 0x80]),
      'x'.repeat(20_000),
    )
    .map(
      (body): Mutation =>
        (c) => ({ ...c, body }),
    ),
);
const mutated = fc
  .tuple(targeted, fc.array(mutation, { minLength: 1, maxLength: 3 }))
  .map(([x, ms]) => ms.reduce((c, m) => m(c), toCase(x)));

// ---------------------------------------------------------------------------------------------
// WebSocket upgrades, good and bad, to every path

const WS_KEY = 'dGhlIHNhbXBsZSBub25jZQ==';
interface UpgradeCase {
  readonly method: string;
  readonly target: string;
  /** The target came from a mutation: Node's parser may refuse it. */
  readonly mutatedTarget: boolean;
  readonly upgrade: string;
  readonly connection: string;
  readonly key: string | undefined;
  readonly version: string | undefined;
  readonly extra: readonly (readonly [string, string])[];
}
const upgradeCase: fc.Arbitrary<UpgradeCase> = fc
  .record({
    method: fc.constantFrom('GET', 'GET', 'GET', 'POST', 'HEAD', 'DELETE', 'OPTIONS'),
    target: fc.oneof(
      {
        weight: 4,
        arbitrary: fc.constantFrom(
          '/v1/ws',
          '/v1/ws?access_token=x',
          '/v1/ws?after_seq=%',
          '/v1/ws#x',
          '/v1/ws?',
        ),
      },
      {
        weight: 3,
        arbitrary: fc.constantFrom(
          '//[',
          '/%',
          '//',
          '//%',
          'http://[/v1/ws',
          'http://localhost/v1/ws',
          '//x:99999/v1/ws',
          '/v1/ws/',
          '/v1/ws%',
          '/v1/ws%2F',
          '/V1/WS',
          '//v1/ws',
          '/v1//ws',
          '/v1/./ws',
          '/v1/ws/../ws',
          '*',
          `/v1/ws?${'q'.repeat(10_000)}`,
        ),
      },
      { weight: 2, arbitrary: targeted.map(targetOf) },
      { weight: 1, arbitrary: mutated.map((c) => `\u0000${c.target}`) },
    ),
    upgrade: fc.constantFrom('websocket', 'websocket', 'WebSocket', 'h2c', 'websocket, h2c', 'x'),
    connection: fc.constantFrom('Upgrade', 'upgrade', 'keep-alive, Upgrade', 'Upgrade, close'),
    key: fc
      .option(fc.constantFrom(WS_KEY, WS_KEY, '', 'short', '!!!!!!!!!!!!!!!!!!!!!!==', 'a'.repeat(200)), {
        freq: 6,
      })
      .map((k) => k ?? undefined),
    version: fc
      .option(fc.constantFrom('13', '13', '8', '14', 'abc', ''), { freq: 6 })
      .map((v) => v ?? undefined),
    extra: fc.array(
      fc.constantFrom(
        ['Sec-WebSocket-Protocol', 'chat, , x'] as const,
        ['Sec-WebSocket-Protocol', '\u00e9'] as const,
        ['Sec-WebSocket-Extensions', 'permessage-deflate; client_max_window_bits'] as const,
        ['Sec-WebSocket-Extensions', ';;;='] as const,
        ['Origin', 'http://example.com'] as const,
        ['Authorization', 'Bearer x'] as const,
      ),
      { maxLength: 2 },
    ),
  })
  // Targets of mutated requests are marked with a leading NUL while generated.
  .map((u) => ({
    ...u,
    target: u.target.startsWith('\u0000') ? u.target.slice(1) : u.target,
    mutatedTarget: u.target.startsWith('\u0000'),
  }));

function upgradeRequest(u: UpgradeCase): HttpCase {
  const headers: [string, string][] = [
    ['Host', '127.0.0.1'],
    ['Upgrade', u.upgrade],
    ['Connection', u.connection],
  ];
  if (u.key !== undefined) headers.push(['Sec-WebSocket-Key', u.key]);
  if (u.version !== undefined) headers.push(['Sec-WebSocket-Version', u.version]);
  headers.push(...u.extra.map(([n, v]) => [n, v] as [string, string]));
  return { method: u.method, target: u.target, headers };
}

/** An upgrade to /v1/ws with every handshake header right is accepted (101); anything else is refused with a 4xx. */
function upgradeExpectation(u: UpgradeCase): Expectation {
  const refused = badPathChars(u.target);
  if (refused) return refused;
  let path: string | undefined;
  try {
    path = new URL(u.target, 'http://localhost').pathname;
  } catch {
    return {
      status: [400, 404],
      why: `an upgrade to a target the URL parser refuses (${u.target.slice(0, 40)})`,
    };
  }
  if (path !== '/v1/ws') {
    return { status: [404], why: `an upgrade to ${path.slice(0, 60)}`, wellFormed: !u.mutatedTarget };
  }
  const good =
    u.method === 'GET' &&
    /^websocket$/i.test(u.upgrade) &&
    u.key === WS_KEY &&
    u.version === '13' &&
    !u.extra.some(([n]) => n === 'Sec-WebSocket-Protocol');
  // A good handshake is accepted; ws refuses bad ones itself (400, 405 for a non-GET, 426 for a version).
  return good
    ? { status: [101], why: 'a good upgrade' }
    : { status: [400, 405, 426, 101], why: 'a flawed handshake' };
}

// ---------------------------------------------------------------------------------------------
// Hand-picked hostile requests: the minimal reproductions the properties grow from.

interface CorpusCase {
  readonly name: string;
  readonly c: HttpCase;
  readonly expect?: Expectation;
  readonly upgrade?: boolean;
}

const get = (target: string, headers: [string, string][] = []): HttpCase => ({
  method: 'GET',
  target,
  headers: [HOST, ...headers],
});
const post = (target: string, body?: string | Buffer, chunked = false): HttpCase => ({
  method: 'POST',
  target,
  headers: [HOST, ['Content-Type', 'application/json']],
  body,
  chunked,
});
const upgradeTo = (target: string, method = 'GET'): HttpCase =>
  upgradeRequest({
    method,
    target,
    mutatedTarget: false,
    upgrade: 'websocket',
    connection: 'Upgrade',
    key: WS_KEY,
    version: '13',
    extra: [],
  });
const e400 = (fields: string[], why: string): Expectation => ({ status: [400], fields, why });

const CORPUS: readonly CorpusCase[] = [
  { name: 'GET //[', c: get('//['), expect: { status: [400, 404], why: 'a target the URL parser refuses' } },
  {
    name: 'GET http://[/healthz (absolute form, bad host)',
    c: get('http://[/healthz'),
    expect: { status: [400, 404], why: 'a bad absolute-form target' },
  },
  {
    name: 'GET //x:99999/ (port out of range)',
    c: get('//x:99999/'),
    expect: { status: [400, 404], why: 'a bad authority' },
  },
  { name: 'GET /%', c: get('/%'), expect: { status: [404], why: 'no route' } },
  { name: 'OPTIONS *', c: { method: 'OPTIONS', target: '*', headers: [HOST] } },
  { name: 'CONNECT localhost:443', c: { method: 'CONNECT', target: 'localhost:443', headers: [HOST] } },
  {
    name: 'GET events, thread %E0%A4%A',
    c: get('/v1/threads/%E0%A4%A/events'),
    expect: e400(['thread_id'], 'truncated UTF-8'),
  },
  {
    name: 'GET events, thread %ED%A0%80',
    c: get('/v1/threads/%ED%A0%80/events'),
    expect: e400(['thread_id'], 'a lone surrogate'),
  },
  {
    name: 'GET events, thread of 10 000 chars',
    c: get(`/v1/threads/${'x'.repeat(10_000)}/events`),
    expect: e400(['thread_id'], 'an overlong id'),
  },
  {
    name: 'GET events, after_seq=%',
    c: get(`/v1/threads/${THREAD}/events?after_seq=%`),
    expect: e400(['after_seq'], 'bad percent-encoding'),
  },
  {
    name: 'GET events, after_seq=%E0%A4%A',
    c: get(`/v1/threads/${THREAD}/events?after_seq=%E0%A4%A`),
    expect: e400(['after_seq'], 'bad percent-encoding'),
  },
  {
    name: 'GET events, limit=0',
    c: get(`/v1/threads/${THREAD}/events?limit=0`),
    expect: e400(['limit'], 'limit 0'),
  },
  {
    name: 'GET events, after_seq=2^53',
    c: get(`/v1/threads/${THREAD}/events?after_seq=9007199254740992`),
    expect: e400(['after_seq'], 'past 2^53-1'),
  },
  {
    name: 'GET events, categories=chat',
    c: get(`/v1/threads/${THREAD}/events?categories=chat`),
    expect: e400(['categories'], 'an unknown category'),
  },
  {
    name: 'GET events, 65 categories',
    c: get(`/v1/threads/${THREAD}/events?categories=${Array(65).fill('message').join(',')}`),
    expect: e400(['categories'], 'more than 64 values'),
  },
  {
    name: 'GET events, repeated after_seq',
    c: get(`/v1/threads/${THREAD}/events?after_seq=1&after_seq=2`),
    expect: e400(['after_seq'], 'a single-valued parameter given twice is refused, named'),
  },
  {
    name: 'GET events, repeated categories (a list)',
    c: get(`/v1/threads/${THREAD}/events?categories=message&categories=trace`),
    expect: { status: [200], why: 'a list parameter may repeat' },
  },
  {
    name: 'GET stream, repeated run_id',
    c: get(`/v1/threads/${THREAD}/stream?run_id=a&run_id=b`),
    expect: e400(['run_id'], 'a single-valued parameter given twice is refused, named'),
  },
  {
    name: 'GET events through a .. segment',
    c: get(`/v1/threads/other/../${THREAD}/events`),
    expect: e400(['request-target'], 'dot segments are refused, not resolved'),
  },
  {
    name: 'GET events through an escaped .. segment',
    c: get(`/v1/threads/%2E%2e/${THREAD}/events`),
    expect: e400(['request-target'], 'dot segments are refused, raw or escaped'),
  },
  {
    name: 'GET events through a . segment',
    c: get(`/v1/threads/./${THREAD}/events`),
    expect: e400(['request-target'], 'dot segments are refused'),
  },
  {
    name: 'GET events, unknown parameters',
    c: get(`/v1/threads/${THREAD}/events?foo=1`),
    expect: e400(['foo'], 'an unknown parameter is refused, named'),
  },
  {
    name: 'GET runs, status=bogus',
    c: get(`/v1/threads/${THREAD}/runs?status=bogus`),
    expect: e400(['statuses'], 'an unknown status'),
  },
  {
    name: 'GET messages, view=%',
    c: get(`/v1/threads/${THREAD}/messages?view=%`),
    expect: e400(['view'], 'an unknown view'),
  },
  {
    name: 'GET run, run %zz',
    c: get(`/v1/threads/${THREAD}/runs/%zz`),
    expect: e400(['run_id'], 'bad percent-encoding'),
  },
  {
    name: 'DELETE thread %E0%A4%A',
    c: { method: 'DELETE', target: '/v1/threads/%E0%A4%A', headers: [HOST] },
    expect: e400(['thread_id'], 'truncated UTF-8'),
  },
  {
    name: 'PUT events (405)',
    c: { method: 'PUT', target: `/v1/threads/${THREAD}/events`, headers: [HOST] },
    expect: { status: [405], why: 'PUT on a History path' },
  },
  {
    name: 'POST cancel, thread %E0%A4%A',
    c: post('/v1/threads/%E0%A4%A/runs/r/cancel'),
    expect: e400(['thread_id'], 'truncated UTF-8'),
  },
  {
    name: 'POST cancel, run %',
    c: post(`/v1/threads/${THREAD}/runs/%/cancel`),
    expect: e400(['run_id'], 'a lone %'),
  },
  {
    name: 'POST cancel, thread %ED%A0%80',
    c: post('/v1/threads/%ED%A0%80/runs/r/cancel', '{}'),
    expect: e400(['thread_id'], 'a lone surrogate'),
  },
  {
    name: 'POST cancel, body of 17 KiB',
    c: post(`/v1/threads/${THREAD}/runs/${RUN}/cancel`, `{"reason":"${'x'.repeat(17_000)}"}`),
    expect: e400(['body'], 'over 16 KiB'),
  },
  {
    name: 'POST cancel, chunked body of 17 KiB',
    c: post(`/v1/threads/${THREAD}/runs/${RUN}/cancel`, `{"reason":"${'x'.repeat(17_000)}"}`, true),
    expect: e400(['body'], 'over 16 KiB, chunked'),
  },
  {
    name: 'POST cancel, reason 5',
    c: post(`/v1/threads/${THREAD}/runs/${RUN}/cancel`, '{"reason":5}'),
    expect: e400(['reason'], 'a number'),
  },
  {
    name: 'POST cancel, reason of 1025 chars',
    c: post(`/v1/threads/${THREAD}/runs/${RUN}/cancel`, `{"reason":"${'r'.repeat(1025)}"}`),
    expect: e400(['reason'], 'too long'),
  },
  {
    name: 'POST cancel, body []',
    c: post(`/v1/threads/${THREAD}/runs/${RUN}/cancel`, '[]'),
    expect: e400(['body'], 'not an object'),
  },
  {
    name: 'POST cancel, body {',
    c: post(`/v1/threads/${THREAD}/runs/${RUN}/cancel`, '{'),
    expect: e400(['body'], 'not JSON'),
  },
  {
    name: 'POST cancel, body of invalid UTF-8',
    c: post(`/v1/threads/${THREAD}/runs/${RUN}/cancel`, Buffer.from([0x7b, 0xff, 0xfe, 0x7d])),
    expect: e400(['body'], 'not JSON'),
  },
  {
    name: 'POST cancel, 5 000 nested arrays',
    c: post(`/v1/threads/${THREAD}/runs/${RUN}/cancel`, `${'['.repeat(5000)}${']'.repeat(5000)}`),
    expect: e400(['body'], 'not an object'),
  },
  {
    name: 'POST cancel of an ended run',
    c: post(`/v1/threads/${THREAD}/runs/${ENDED}/cancel`, '{"reason":"x"}'),
    expect: { status: [409], why: 'run_ended' },
  },
  {
    name: 'GET SSE, thread %ED%A0%80',
    c: get('/v1/threads/%ED%A0%80/stream'),
    expect: e400(['thread_id'], 'a lone surrogate'),
  },
  {
    name: 'GET SSE, Last-Event-ID abc',
    c: get(`/v1/threads/${THREAD}/stream`, [['Last-Event-ID', 'abc']]),
    expect: e400(['Last-Event-ID'], 'not a seq'),
  },
  {
    name: 'GET LangGraph join, run %',
    c: get(`/threads/${THREAD}/runs/%/stream`),
    expect: e400(['run_id'], 'a lone %'),
  },
  {
    name: 'GET LangGraph run, thread %E0%A4%A',
    c: get('/threads/%E0%A4%A/runs/r'),
    expect: e400(['thread_id'], 'truncated UTF-8'),
  },
  { name: 'request line of 100 000 bytes', c: get(`/${'a'.repeat(100_000)}`) },
  { name: 'a header of 20 000 bytes', c: get('/healthz', [['X-Huge', 'h'.repeat(20_000)]]) },
  {
    name: 'duplicate Content-Length',
    c: { ...post(`/v1/threads/${THREAD}/runs/${RUN}/cancel`, '{}'), rawLines: ['Content-Length: 3'] },
  },
  { name: 'no Host header', c: { method: 'GET', target: '/healthz', headers: [] } },
  { name: 'obs-fold header', c: { ...get('/healthz'), rawLines: ['X-A: a', ' folded'] } },
  { name: 'header name with a space', c: get('/healthz', [['Bad Name', 'x']]) },
  { name: 'NUL in a header value', c: get('/healthz', [['X-Nul', 'a\x00b']]) },
  {
    name: 'upgrade to //[',
    c: upgradeTo('//['),
    expect: { status: [400, 404], why: 'an upgrade to a target the URL parser refuses' },
  },
  {
    name: 'upgrade to http://[/v1/ws',
    c: upgradeTo('http://[/v1/ws'),
    expect: { status: [400, 404], why: 'an upgrade to a bad absolute-form target' },
  },
  { name: 'upgrade to /%', c: upgradeTo('/%'), expect: { status: [404], why: 'an upgrade to another path' } },
  {
    name: 'upgrade to /v1/ws%',
    c: upgradeTo('/v1/ws%'),
    expect: { status: [404], why: 'an upgrade to another path' },
  },
  {
    name: 'upgrade to the events route',
    c: upgradeTo(`/v1/threads/${THREAD}/events`),
    expect: { status: [404], why: 'an upgrade to another path' },
  },
  {
    name: 'upgrade to /v1/ws, POST',
    c: upgradeTo('/v1/ws', 'POST'),
    expect: { status: [400, 405], why: 'a non-GET handshake' },
  },
  {
    name: 'upgrade to /v1/ws without a key',
    c: upgradeRequest({
      method: 'GET',
      target: '/v1/ws',
      mutatedTarget: false,
      upgrade: 'websocket',
      connection: 'Upgrade',
      key: undefined,
      version: '13',
      extra: [],
    }),
    expect: { status: [400], why: 'no Sec-WebSocket-Key' },
  },
  {
    name: 'upgrade to /v1/ws, good',
    c: upgradeTo('/v1/ws'),
    expect: { status: [101], why: 'a good handshake' },
  },
];

test(`HTTP corpus: ${CORPUS.length} hand-picked hostile requests each get the documented answer`, async (t) => {
  await fuzzBody(t, b, async () => {
    for (const k of CORPUS) {
      await t.test(k.name, async () => {
        await b.ensureUp();
        await assertCase(k.c, { upgrade: k.upgrade, expect: k.expect });
      });
    }
  });
});

test('HTTP property: requests aimed at every route get the answer the documented rules give', async (t) => {
  t.diagnostic(`FUZZ_SEED=${fuzzSeed()}`);
  await fuzzBody(t, b, async () => {
    await fc.assert(
      fc.asyncProperty(targeted, async (x) => {
        await findings.before(b, fc.pre);
        const { problems, detail } = await run(toCase(x), { upgrade: false, expect: expectationOf(x) });
        if (problems.length > 0)
          findings.fail(signature(`${x.method} ${x.route.template}`, problems), detail);
      }),
      fcParams(1400),
    );
    findings.report(t);
  });
});

test('HTTP property: mutated request lines, headers and versions never get a 5xx or a dropped connection', async (t) => {
  await fuzzBody(t, b, async () => {
    await fc.assert(
      fc.asyncProperty(mutated, async (c) => {
        await findings.before(b, fc.pre);
        const { problems, detail } = await run(c);
        if (problems.length > 0) {
          // One finding per fault: whether the URL parser takes the target separates the causes.
          let parses = true;
          try {
            new URL(c.target, 'http://localhost');
          } catch {
            parses = false;
          }
          findings.fail(
            signature(
              `mutated ${c.method === 'CONNECT' ? 'CONNECT' : 'request'}, target ${parses ? 'parses' : 'is refused by the URL parser'}`,
              problems,
            ),
            detail,
          );
        }
      }),
      fcParams(1000),
    );
    findings.report(t);
  });
});

test('HTTP property: WebSocket upgrades to any target are accepted only when right, and refused with a 4xx otherwise', async (t) => {
  await fuzzBody(t, b, async () => {
    await fc.assert(
      fc.asyncProperty(upgradeCase, async (u) => {
        await findings.before(b, fc.pre);
        const expect = upgradeExpectation(u);
        const { problems, detail } = await run(upgradeRequest(u), { upgrade: true, expect });
        if (problems.length > 0) findings.fail(signature(`upgrade, ${expect.why}`, problems), detail);
      }),
      fcParams(600),
    );
    findings.report(t);
  });
});

test('after the HTTP fuzzing the broker is alive and serves a publish → WebSocket → History round trip', async (t) => {
  const crash = await b.ensureUp();
  if (crash) t.diagnostic(`restarted after a crash: ${crash.exit}`);
  t.diagnostic(`crashes during this file: ${b.crashes.length}; cases: ~${fuzzRuns(3000) + CORPUS.length}`);
  for (const c of b.crashes) t.diagnostic(`crash of pid ${c.pid}: ${c.exit}\n${c.stderr.slice(-1500)}`);
  await assertServing(b);
  assert.equal(b.crashes.length, 0, 'the broker crashed during the HTTP fuzzing (see the diagnostics)');
});
