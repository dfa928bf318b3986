// The `runstream` command against a real stack, run as a child process: every subcommand
// has --help; bad input exits nonzero naming the flag (or the line and field) and stores
// nothing; publish, tail, token and migrate do what they say.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { runCli, startCli } from './helpers/cli.js';
import { randomName, type Stack, startStack, threadRows } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

const SUBCOMMANDS = ['serve', 'tail', 'publish', 'token', 'migrate', 'threads', 'runs', 'export', 'import'];
const SECRET = 'cli-test-secret-of-at-least-32-bytes!!';

const line = (o: Record<string, unknown>): string => JSON.stringify(o);

test('every subcommand answers --help with its usage and exit 0; no command is a usage error', async () => {
  const top = await runCli(['--help']);
  assert.equal(top.code, 0);
  // Each one a process of its own, started together: the answers are checked one by one.
  const helps = await Promise.all(SUBCOMMANDS.map((name) => runCli([name, '--help'])));
  SUBCOMMANDS.forEach((name, i) => {
    assert.match(top.stdout, new RegExp(`^  ${name} `, 'm'), `${name} listed`);
    const r = helps[i] as (typeof helps)[number];
    assert.equal(r.code, 0, `${name} --help: ${r.stderr}`);
    assert.match(r.stdout, new RegExp(`^usage: runstream ${name}`), name);
  });
  const none = await runCli([]);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /^usage: runstream/);
  const unknown = await runCli(['frobnicate']);
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /unknown command "frobnicate"/);
});

test('bad flags exit 2 naming the flag', async () => {
  const cases: [string[], RegExp][] = [
    [['tail', 't1', '--after-seq', 'x'], /--after-seq "x": must be an integer/],
    [
      ['tail', 't1', '--category', 'Chat Room'],
      /--category "Chat Room": message, trace, lifecycle or another/,
    ],
    [['tail', 't1', '--run', 'a/b'], /--run "a\/b": must match/],
    [['tail'], /<thread_id> is required/],
    [['tail', 't1', '--nope'], /Unknown option '--nope'/],
    [['publish', '--ack', 'SOON'], /--ack "SOON": must be one of ACCEPTED, PERSISTED/],
    [['publish', '--batch', '0'], /--batch "0": must be an integer in \[1, 5000\]/],
    [['publish', '--grpc', 'nope'], /--grpc "nope": must be host:port/],
    [['token'], /--thread is required/],
    [
      ['token', '--thread', 't1', '--scope', 'admin'],
      /--scope "admin": must be one of read, publish, cancel/,
    ],
    [['token', '--thread', 't1', '--expires', 'soon'], /--expires "soon": must be a duration/],
    [['migrate', 'extra'], /unexpected argument "extra"/],
    [['threads', '--limit', '5000'], /--limit "5000": must be an integer in \[1, 1000\]/],
    [['threads', '--url', 'ftp://x'], /--url "ftp:\/\/x": must be an http:\/\/ or https:\/\/ URL/],
    [['runs'], /<thread_id> is required/],
    [['export'], /<thread_id> is required/],
    [['export', 't1', '--after-seq=-1'], /--after-seq "-1": must be an integer ≥ 0/],
    [['import'], /<file> is required/],
    [['import', 'f.jsonl', '--thread', 'a b'], /--thread "a b": must match/],
    [['runs', 't1', '--status', 'done'], /--status "done": must be one of pending, running/],
  ];
  const answers = await Promise.all(cases.map(([args]) => runCli(args, { env: { RS_JWT_SECRET: SECRET } })));
  for (const [i, [args, message]] of cases.entries()) {
    const r = answers[i] as (typeof answers)[number];
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message, args.join(' '));
    assert.match(r.stderr, /usage: runstream/, args.join(' '));
  }
});

describe('against an open broker', () => {
  let stack: Stack;
  let env: Record<string, string>;
  before(async () => {
    stack = await startStack();
    env = { RS_URL: stack.httpUrl, RS_GRPC_TARGET: stack.grpcTarget, RS_TOKEN: '' };
  });
  after(async () => {
    await stack[Symbol.asyncDispose]();
  });

  test('publish from stdin at PERSISTED and from a file; a bad line stores nothing', async () => {
    const t = randomName('cli-');
    const input = Array.from({ length: 120 }, (_, i) =>
      line({
        run_id: i < 60 ? 'r-a' : 'r-b',
        event_id: `e${i + 1}`,
        event_type: 'ai_chunk',
        category: 'message',
        content: { i },
      }),
    ).join('\n');
    const r = await runCli(['publish', '--thread', t, '--ack', 'PERSISTED', '--batch', '50'], { env, input });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `published 120 events to 1 thread at PERSISTED\n`);
    const rows = await threadRows(stack.db, t);
    assert.deepEqual(
      rows.map((x) => x.event_id),
      Array.from({ length: 120 }, (_, i) => `e${i + 1}`),
    );

    // The same events again, from a file: stored once, each a duplicate; --json prints each ack.
    const dir = mkdtempSync(join(tmpdir(), 'rs-cli-'));
    const file = join(dir, 'events.jsonl');
    writeFileSync(file, `${input}\n\n`);
    const again = await runCli(['publish', file, '--thread', t, '--json', '--ack', 'PERSISTED'], {
      env,
    });
    assert.equal(again.code, 0, again.stderr);
    const acks = again.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { duplicate: boolean });
    assert.equal(acks.length, 120);
    assert.ok(acks.every((a) => a.duplicate));
    assert.match(again.stderr, /published 120 events to 1 thread at PERSISTED \(120 already there\)/);
    assert.equal((await threadRows(stack.db, t)).length, 120);

    // A bad line anywhere: nothing of the input is published.
    const t2 = randomName('cli-');
    const bad = [
      line({ thread_id: t2, run_id: 'r', event_type: 'ai_chunk', category: 'message', content: 1 }),
      line({ thread_id: t2, run_id: 'r', event_type: 'ai_chunk', category: 'Not A Name', content: 2 }),
    ].join('\n');
    const refused = await runCli(['publish'], { env, input: bad });
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /line 2: category: must be a lower-case identifier/);
    const notJson = await runCli(['publish', '--thread', t2], { env, input: '{"run_id":"r",' });
    assert.equal(notJson.code, 1);
    assert.match(notJson.stderr, /line 1: not JSON/);
    const missing = await runCli(['publish', join(dir, 'missing.jsonl')], { env });
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /cannot read .*missing\.jsonl/);
    assert.deepEqual(await threadRows(stack.db, t2), []);
  });

  test('tail --json --run --category: only matching events on stdout, and it ends with the run', async () => {
    const t = randomName('cli-');
    const events = [
      { run_id: 'r-a', event_type: 'run_start', category: 'lifecycle', content: null },
      { run_id: 'r-a', event_type: 'ai_chunk', category: 'message', content: { content: 'he' } },
      { run_id: 'r-b', event_type: 'ai_chunk', category: 'message', content: { content: 'other' } },
      { run_id: 'r-a', event_type: 'llm_start', category: 'trace', content: {} },
      { run_id: 'r-a', event_type: 'ai_chunk', category: 'message', content: { content: 'llo' } },
    ];
    const input = events.map((e, i) => line({ ...e, event_id: `e${i + 1}` })).join('\n');
    assert.equal((await runCli(['publish', '--thread', t, '--ack', 'PERSISTED'], { env, input })).code, 0);

    const tail = startCli(
      ['tail', t, '--json', '--run', 'r-a', '--category', 'message', '--after-seq', '1'],
      { env },
    );
    await waitFor(() => tail.stdout().includes('"type":"live"'));
    const end = line({
      thread_id: t,
      run_id: 'r-a',
      event_id: 'e6',
      event_type: 'run_end',
      category: 'lifecycle',
      content: { status: 'success' },
    });
    assert.equal((await runCli(['publish', '--ack', 'PERSISTED'], { env, input: end })).code, 0);
    const r = await tail.done;
    assert.equal(r.code, 0, r.stderr);
    const out = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { seq: number; type?: string; event_type?: string });
    assert.deepEqual(
      out.map((o) => (o.type === 'live' ? `live@${o.seq}` : `${o.seq} ${o.event_type}`)),
      ['2 ai_chunk', '5 ai_chunk', 'live@5'],
    );
    assert.match(r.stderr, /-- end --/);
  });

  test('serve runs the broker until SIGTERM, then exits 0', async () => {
    const serve = startCli(['serve'], {
      env: {
        RS_HOST: '127.0.0.1',
        GRPC_PORT: '0',
        HTTP_PORT: '0',
        NATS_URL: stack.servers.nats.url,
        DATABASE_URL: stack.servers.pg.url,
        RS_STREAM: randomName('RS_'),
        RS_SUBJECT_PREFIX: randomName('rs'),
        LOG_LEVEL: 'info',
      },
    });
    await waitFor(() => serve.stdout().includes('runstream started'));
    const started = serve
      .stdout()
      .split('\n')
      .find((l) => l.includes('runstream started')) as string;
    const { httpPort } = JSON.parse(started) as { httpPort: number };
    assert.equal((await fetch(`http://127.0.0.1:${httpPort}/healthz`)).status, 200);
    serve.child.kill('SIGTERM');
    const r = await serve.done;
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /runstream stopped/);
  });

  test('threads and runs print tables (or JSON pages) from History', async () => {
    const t = randomName('cli-');
    const input = [
      line({ run_id: 'r-1', event_type: 'ai_chunk', category: 'message', content: 'a' }),
      line({ run_id: 'r-1', event_type: 'run_end', category: 'lifecycle', content: { status: 'failed' } }),
      line({ run_id: 'r-2', event_type: 'ai_chunk', category: 'message', content: 'b' }),
    ].join('\n');
    assert.equal((await runCli(['publish', '--thread', t, '--ack', 'PERSISTED'], { env, input })).code, 0);

    const threads = await runCli(['threads', '--all', '--limit', '1'], { env });
    assert.equal(threads.code, 0, threads.stderr);
    const [header, ...rows] = threads.stdout.trimEnd().split('\n');
    assert.match(header as string, /^THREAD +HEAD +RUNS +EVENTS +LAST RUN +STATUS +UPDATED$/);
    const row = rows.find((r) => r.startsWith(`${t} `));
    assert.match(row as string, new RegExp(`^${t} +3 +2 +3 +r-2 +running +\\d{4}-`));
    const json = await runCli(['threads', '--json', '--after', t.slice(0, -1)], { env });
    const page = JSON.parse(json.stdout.split('\n')[0] as string) as { threads: { thread_id: string }[] };
    assert.ok(page.threads.some((x) => x.thread_id === t));

    const runs = await runCli(['runs', t], { env });
    assert.equal(runs.code, 0, runs.stderr);
    const lines = runs.stdout.trimEnd().split('\n');
    assert.match(lines[0] as string, /^RUN +STATUS +SEQS +EVENTS +MESSAGES +USER +STARTED +UPDATED$/);
    assert.match(lines[1] as string, /^r-2 +running +3-3 +1 +1 /);
    assert.match(lines[2] as string, /^r-1 +error +1-2 +2 +1 /);
    const failed = await runCli(['runs', t, '--status', 'error', '--json'], { env });
    const runsPage = JSON.parse(failed.stdout) as { runs: { run_id: string }[] };
    assert.deepEqual(
      runsPage.runs.map((r) => r.run_id),
      ['r-1'],
    );
    const down = await runCli(['threads', '--url', 'http://127.0.0.1:1'], { env });
    assert.equal(down.code, 1);
    assert.match(down.stderr, /cannot reach the broker at http:\/\/127\.0\.0\.1:1/);
  });

  test('export writes a thread as JSON lines; import brings it back, once, into another thread', async () => {
    const t = randomName('cli-');
    const input = Array.from({ length: 1234 }, (_, i) =>
      line({
        run_id: `r-${i % 3}`,
        event_id: `e${i + 1}`,
        event_type: 'ai_chunk',
        category: i % 5 === 0 ? 'trace' : 'message',
        user_id: i % 2 === 0 ? 'alice' : '',
        created_at: new Date(Date.UTC(2026, 0, 1, 0, 0, 0, i)).toISOString(),
        content: { i, text: `token ${i}` },
        metadata: { n: i },
      }),
    ).join('\n');
    assert.equal((await runCli(['publish', '--thread', t, '--ack', 'PERSISTED'], { env, input })).code, 0);

    const dir = mkdtempSync(join(tmpdir(), 'rs-cli-'));
    const file = join(dir, 'export.jsonl');
    const exported = await runCli(['export', t, '--out', file], { env });
    assert.equal(exported.code, 0, exported.stderr);
    assert.equal(exported.stdout, `exported 1234 events of ${t} to ${file}\n`);
    const toStdout = await runCli(['export', t, '--after-seq', '1230'], { env });
    assert.deepEqual(
      toStdout.stdout
        .trimEnd()
        .split('\n')
        .map((l) => (JSON.parse(l) as { seq: number }).seq),
      [1231, 1232, 1233, 1234],
    );

    const copy = randomName('cli-copy-');
    const imported = await runCli(['import', file, '--thread', copy, '--batch', '200'], { env });
    assert.equal(imported.code, 0, imported.stderr);
    assert.equal(imported.stdout, `imported 1234 events into ${copy} at PERSISTED\n`);
    const again = await runCli(['import', file, '--thread', copy], { env });
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stdout, `imported 0 events into ${copy} at PERSISTED; 1234 were there already\n`);

    // The copy is the original, event for event, but for its thread.
    const original = (await runCli(['export', t], { env })).stdout.trimEnd().split('\n');
    const back = (await runCli(['export', copy], { env })).stdout.trimEnd().split('\n');
    assert.equal(back.length, 1234);
    const strip = (l: string) => {
      const { thread_id: _t, offset: _o, ...rest } = JSON.parse(l) as Record<string, unknown>;
      return rest;
    };
    assert.deepEqual(back.map(strip), original.map(strip));

    // An import line without its id is refused, and nothing of the file is stored.
    const partial = join(dir, 'partial.jsonl');
    writeFileSync(
      partial,
      `${original[0]}\n${line({ run_id: 'r', event_type: 'x', category: 'message' })}\n`,
    );
    const refused = await runCli(['import', partial, '--thread', randomName('cli-none-')], { env });
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /line 2: event_id: is required/);
  });

  test('export then import keeps every time text the broker took, exactly; content nested past the stack is refused, named', async () => {
    const t = randomName('cli-tt-');
    const texts = [
      '2026-01-01 00:00:00',
      '2026-01-01t00:00z',
      '2026-01-01T00:00:00,5Z',
      '2026-01-01T00:00:00+05',
      '2026-06-04T10:00:00.123456+05:30',
      '9999-12-31T23:59:59Z',
    ];
    const input = texts
      .map((created_at, i) =>
        line({
          run_id: 'r',
          event_id: `e${i}`,
          event_type: 'ai_chunk',
          category: 'message',
          created_at,
          content: i,
        }),
      )
      .join('\n');
    const published = await runCli(['publish', '--thread', t, '--ack', 'PERSISTED'], { env, input });
    assert.equal(published.code, 0, published.stderr);
    const dir = mkdtempSync(join(tmpdir(), 'rs-cli-tt-'));
    const file = join(dir, 'export.jsonl');
    assert.equal((await runCli(['export', t, '--out', file], { env })).code, 0);
    const copy = randomName('cli-tt-copy-');
    const imported = await runCli(['import', file, '--thread', copy], { env });
    assert.equal(imported.code, 0, imported.stderr);
    const back = (await runCli(['export', copy], { env })).stdout.trimEnd().split('\n');
    assert.deepEqual(
      back.map((l) => (JSON.parse(l) as { created_at: string }).created_at),
      texts,
    );
    const deep = `{"run_id":"r","event_type":"x","category":"message","content":${'['.repeat(20_000)}${']'.repeat(20_000)}}`;
    const nested = await runCli(['publish', '--thread', t], { env, input: deep });
    assert.equal(nested.code, 1);
    assert.match(nested.stderr, /line 1: content: nested too deeply/);
  });

  test('serve: a missing database is one line naming it and how to create it; RS_LOG_FORMAT=pretty reads', async () => {
    const base = {
      RS_HOST: '127.0.0.1',
      GRPC_PORT: '0',
      HTTP_PORT: '0',
      NATS_URL: stack.servers.nats.url,
      RS_STREAM: randomName('RS_'),
      RS_SUBJECT_PREFIX: randomName('rs'),
    };
    const url = new URL(stack.servers.pg.url);
    url.pathname = '/no_such_db';
    const failed = await runCli(['serve'], { env: { ...base, DATABASE_URL: url.toString() } });
    assert.equal(failed.code, 1, `${failed.stdout}${failed.stderr}`);
    assert.match(
      failed.stderr,
      /^runstream: failed to start: database "no_such_db" does not exist on 127\.0\.0\.1:\d+ \(DATABASE_URL\): create it with `createdb -h 127\.0\.0\.1 -p \d+ -U \w+ no_such_db`.*\n$/,
    );

    const serve = startCli(['serve'], {
      env: { ...base, DATABASE_URL: stack.servers.pg.url, RS_LOG_FORMAT: 'pretty', LOG_LEVEL: 'info' },
    });
    await waitFor(() => serve.stdout().includes('runstream started'));
    serve.child.kill('SIGTERM');
    const r = await serve.done;
    assert.equal(r.code, 0, `${r.stdout}${r.stderr}`);
    const started = r.stdout.split('\n').find((l) => l.includes('runstream started')) as string;
    assert.match(started, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: runstream started /);
  });

  test('migrate says the database is up to date; a missing database is named, with how to create it', async () => {
    const r = await runCli(['migrate'], { env: { DATABASE_URL: stack.servers.pg.url } });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^up to date: \d+ migrations were already applied\n$/);
    const url = new URL(stack.servers.pg.url);
    url.pathname = `/${randomName('nodb')}`;
    const missing = await runCli(['migrate'], { env: { DATABASE_URL: url.toString() } });
    assert.equal(missing.code, 1);
    assert.match(
      missing.stderr,
      /database "nodb[0-9a-f]+" does not exist on .*: create it with `createdb -h /,
    );
  });
});

describe('against a broker with authentication', () => {
  let stack: Stack;
  let env: Record<string, string>;
  before(async () => {
    stack = await startStack({ jwtSecret: SECRET });
    env = { RS_URL: stack.httpUrl, RS_GRPC_TARGET: stack.grpcTarget, RS_JWT_SECRET: SECRET, RS_TOKEN: '' };
  });
  after(async () => {
    await stack[Symbol.asyncDispose]();
  });

  test('token mints what the broker accepts; without one, publish and tail fail with a hint', async () => {
    const t = randomName('cli-');
    const input = line({
      thread_id: t,
      run_id: 'r',
      event_type: 'ai_chunk',
      category: 'message',
      content: 'hi',
    });
    const refused = await runCli(['publish'], { env, input });
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /unauthenticated: .*\n {2}hint: .*runstream token/);
    const tail = await runCli(['tail', t], { env });
    assert.equal(tail.code, 1);
    assert.match(tail.stderr, /unauthenticated: .*\n {2}hint: .*runstream token/);

    const minted = await runCli(['token', '--thread', t, '--scope', 'read,publish', '--expires', '10m'], {
      env,
    });
    assert.equal(minted.code, 0, minted.stderr);
    const token = minted.stdout.trim();
    const claims = JSON.parse(Buffer.from(token.split('.')[1] as string, 'base64url').toString()) as Record<
      string,
      unknown
    >;
    assert.equal(claims.threads, t);
    assert.equal(claims.scope, 'read publish');
    assert.ok((claims.exp as number) - (claims.iat as number) === 600);
    const ok = await runCli(['publish', '--token', token, '--ack', 'PERSISTED'], { env, input });
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal((await threadRows(stack.db, t)).length, 1);

    // A read-only token for another thread: refused, named.
    const other = (await runCli(['token', '--thread', 'elsewhere'], { env })).stdout.trim();
    const denied = await runCli(['publish', '--token', other], { env, input });
    assert.equal(denied.code, 1);
    assert.match(denied.stderr, /permission_denied: /);
    assert.equal((await threadRows(stack.db, t)).length, 1);

    const noKey = await runCli(['token', '--thread', t], { env: { RS_JWT_SECRET: '' } });
    assert.equal(noKey.code, 1);
    assert.match(noKey.stderr, /no signing key: set RS_JWT_SECRET/);
  });
});
