// A request whose body the broker answers without reading (a route that takes none, a 404,
// a cancel body refused for its size) must not hold its connection: kept alive, Node reads
// and drops whatever the client goes on sending for as long as the request timeout
// (RS_HTTP_REQUEST_TIMEOUT_MS, 30 s), a socket held per request. The answer comes first and whole, then the connection ends.
// Requests whose bodies are read (or that have none) keep their connection alive.
// Real broker, nats-server and Postgres.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { MAX_CANCEL_BODY_BYTES } from '../src/fanout/cancel-route.js';
import { tokenEvent } from './helpers/events.js';
import { openRaw, type RawConn } from './helpers/raw-http.js';
import { type Stack, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

let stack: Stack;
before(async () => {
  // A request timeout far past the waits below: only the broker's own ending of a connection
  // can make them pass.
  stack = await startStack({ httpRequestTimeoutMs: 300_000 });
  // The run the keep-alive test cancels: its answer is a 202 given after the body was read.
  await stack.client.publish([tokenEvent('unread-t', 0, { run_id: 'r' })], 'PERSISTED');
});
after(async () => {
  await stack[Symbol.asyncDispose]();
});

const connect = (): Promise<RawConn> => openRaw(stack.broker.httpPort);

/** The status line of each whole response received so far. */
function statuses(data: string): string[] {
  return [...data.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => m[1] as string);
}

async function answered(c: RawConn, n: number, what: string): Promise<void> {
  await waitFor(() => statuses(c.received()).length >= n, { timeoutMs: 20_000, what });
}

/** Waits for the broker to end the connection (the old behaviour held it for the request timeout). */
async function endedByBroker(c: RawConn, what: string): Promise<void> {
  await waitFor(() => c.isClosed(), { timeoutMs: 30_000, what: `${what}: the connection ended` });
}

const cancelPath = '/v1/threads/unread-t/runs/r/cancel';

test('an answer to a request whose body was not read ends the connection, after the whole answer', async () => {
  const cases: { name: string; head: string; status: string }[] = [
    {
      name: '404 with a declared body never sent',
      head: 'POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n',
      status: '404',
    },
    {
      name: 'GET route with a chunked body still coming',
      head: 'GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n',
      status: '200',
    },
    {
      name: 'History page with a declared body',
      head: 'GET /v1/threads/unread-t/events HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\nabc',
      status: '200',
    },
  ];
  for (const c of cases) {
    const conn = await connect();
    conn.sock.write(c.head);
    await answered(conn, 1, c.name);
    assert.deepEqual(statuses(conn.received()), [c.status], c.name);
    // The client keeps sending body bytes: the broker must end the connection anyway.
    const drip = setInterval(() => {
      if (!conn.sock.destroyed) conn.sock.write('x'.repeat(64));
    }, 50);
    try {
      await endedByBroker(conn, c.name);
    } finally {
      clearInterval(drip);
    }
  }
});

test('a request pipelined after a body the broker did not wait for harms nothing', async () => {
  const conn = await connect();
  conn.sock.write('POST /nope HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n');
  await answered(conn, 1, 'the 404');
  // The body ends, and a second request follows it on the same connection.
  conn.sock.write('0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  await endedByBroker(conn, 'a request pipelined after an unread body');
  assert.equal(statuses(conn.received())[0], '404');
  assert.equal((await fetch(`${stack.httpUrl}/healthz`)).status, 200, 'the broker still answers');
});

test('a cancel body declared larger than the limit is refused at once, naming body, before it is sent', async () => {
  const conn = await connect();
  conn.sock.write(
    `POST ${cancelPath} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${MAX_CANCEL_BODY_BYTES + 1}\r\n\r\n{"reason":`,
  );
  await answered(conn, 1, 'the refusal of a declared oversize body');
  const got = conn.received();
  assert.deepEqual(statuses(got), ['400']);
  assert.match(got, /"body"|body/);
  assert.match(got, new RegExp(`larger than ${MAX_CANCEL_BODY_BYTES} bytes`));
  await endedByBroker(conn, 'declared oversize cancel body');
});

test('a chunked cancel body over the limit is refused naming body, and ends the connection', async () => {
  const conn = await connect();
  conn.sock.write(
    `POST ${cancelPath} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`,
  );
  const chunk = 'p'.repeat(4096);
  for (let i = 0; i < 5; i++) conn.sock.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
  await answered(conn, 1, 'the refusal of an oversize chunked body');
  assert.deepEqual(statuses(conn.received()), ['400']);
  assert.match(conn.received(), /larger than/);
  await endedByBroker(conn, 'oversize chunked cancel body');
});

test('a small body sent whole with the headers keeps the connection alive, even where the answer does not wait for it', async () => {
  const conn = await connect();
  // Answered at once (a 404, a probe), each with its body in the same packet, then a request
  // pipelined behind: all answered, on one connection.
  conn.sock.write(
    'POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc' +
      'GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc' +
      'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n',
  );
  await answered(conn, 3, 'three answers');
  assert.deepEqual(statuses(conn.received()), ['404', '200', '200']);
  conn.sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  await answered(conn, 4, 'a fourth answer on the same connection');
  assert.equal(conn.isClosed(), false, 'the connection is still open');
  conn.sock.destroy();
  await conn.closed;
});

test('requests with no body, or a body read whole, keep their connection alive', async () => {
  const conn = await connect();
  conn.sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  await answered(conn, 1, 'the first answer');
  const body = '{"reason":"enough"}';
  conn.sock.write(
    `POST ${cancelPath} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  await answered(conn, 2, 'the cancel answer');
  conn.sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  await answered(conn, 3, 'the third answer on the same connection');
  assert.deepEqual(statuses(conn.received()), ['200', '202', '200']);
  assert.equal(conn.isClosed(), false, 'the connection is still open');
  conn.sock.destroy();
  await conn.closed;
});
