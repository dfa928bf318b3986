// Every handler is total: requests that once threw out of a handler (and, on the upgrade path,
// ended the process) get a clear 4xx / INVALID_ARGUMENT, and the broker keeps serving. The
// broker runs as a child process, so a crash shows as an exit, not as a crashed test.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { IngestClient } from '../src/client/ingest-client.js';
import { tokenEvent } from './helpers/events.js';
import {
  type BrokerProcess,
  brokerConfig,
  randomName,
  type Servers,
  spawnBroker,
  startServers,
} from './helpers/stack.js';

let servers: Servers;
let broker: BrokerProcess;
let http: string;

before(async () => {
  servers = await startServers();
  broker = await spawnBroker(brokerConfig(servers));
  http = `127.0.0.1:${broker.httpPort}`;
});
after(async () => {
  await broker?.stop();
  await servers?.[Symbol.asyncDispose]();
});

/** Sends raw bytes on a fresh TCP connection; resolves with everything the server wrote back. */
function rawRequest(text: string): Promise<string> {
  const [host, port] = http.split(':') as [string, string];
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), host, () => socket.end(text));
    let out = '';
    socket.on('data', (d) => {
      out += d.toString();
    });
    socket.on('close', () => resolve(out));
    socket.on('error', reject);
    socket.setTimeout(10_000, () => socket.destroy(new Error(`no answer to ${JSON.stringify(text)}`)));
  });
}

function statusOf(response: string): number {
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1] ?? 0);
}

async function assertAlive(): Promise<void> {
  assert.equal(broker.child.exitCode, null, 'the broker process is still running');
  const res = await fetch(`http://${http}/healthz`);
  assert.equal(res.status, 200);
}

const UPGRADE_HEADERS =
  'Host: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
  'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n';

test('a WebSocket upgrade to an unparseable target answers 400 and the process stays up', async () => {
  // `[`, `{`, `\\` and `^` are no path characters (RFC 3986).
  for (const target of ['//[', '//[::1', '/v1/ws/{x}', '/\\', '//a^b/']) {
    const response = await rawRequest(`GET ${target} HTTP/1.1\r\n${UPGRADE_HEADERS}\r\n`);
    assert.equal(statusOf(response), 400, `${target}: ${response}`);
    assert.match(response, /request-target: /);
    await assertAlive();
  }
});

test('a plain request to an unparseable target answers 400, not 500', async () => {
  const response = await rawRequest('GET //[ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  assert.equal(statusOf(response), 400, response);
  assert.match(response, /"code":"invalid_argument"/);
  // A protocol-relative target is a path, never a host: it matches no route.
  const other = await rawRequest(
    'GET //v1/threads/t/events HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
  );
  assert.equal(statusOf(other), 404, other);
  await assertAlive();
});

test('bad percent-encoding in a path is a 400 naming the segment on every route', async () => {
  // Malformed %XX escapes, and well-formed ones that are not UTF-8: each route's path
  // decoder refuses them, naming its segment.
  const cases: [string, string, string][] = [
    ['POST', '/v1/threads/%E0%A4/runs/r/cancel', 'thread_id'],
    ['POST', '/v1/threads/t/runs/%C0%AF/cancel', 'run_id'],
    ['GET', '/v1/threads/%E0%A4/events', 'thread_id'],
    ['GET', '/v1/threads/%FF/stream', 'thread_id'],
    ['GET', '/threads/%ff/runs/r', 'thread_id'],
    ['GET', '/threads/t/runs/%ff/stream', 'run_id'],
    ['DELETE', '/v1/threads/t/runs/%c0', 'run_id'],
    ['GET', '/v1/threads/%zz/events', 'thread_id'],
    ['GET', '/v1/threads/t/runs/%/events', 'run_id'],
  ];
  for (const [method, path, field] of cases) {
    const res = await fetch(`http://${http}${path}`, { method });
    assert.equal(res.status, 400, `${method} ${path}`);
    const body = (await res.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'invalid_argument');
    assert.ok(body.error.message.startsWith(`${field}:`), `${method} ${path}: ${body.error.message}`);
  }
  await assertAlive();
});

/** A client that sends the given bytes as the request message of `path`, unchanged. */
function rawCall(
  path: string,
  kind: 'unary' | 'server-stream' | 'bidi',
  bytes: Buffer,
): Promise<grpc.StatusObject> {
  const client = new grpc.Client(`127.0.0.1:${broker.grpcPort}`, grpc.credentials.createInsecure());
  const identity = (b: Buffer): Buffer => b;
  return new Promise((resolve) => {
    const done = (status: grpc.StatusObject): void => {
      client.close();
      resolve(status);
    };
    if (kind === 'unary') {
      const call = client.makeUnaryRequest(path, identity, identity, bytes, () => undefined);
      call.on('status', done);
    } else if (kind === 'server-stream') {
      const call = client.makeServerStreamRequest(path, identity, identity, bytes);
      call.on('data', () => undefined);
      call.on('error', () => undefined);
      call.on('status', done);
    } else {
      const call = client.makeBidiStreamRequest(path, identity, identity);
      call.on('data', () => undefined);
      call.on('error', () => undefined);
      call.on('status', done);
      call.write(bytes);
    }
  });
}

test('garbage protobuf is INVALID_ARGUMENT on every kind of call, never INTERNAL', async () => {
  // A varint cut short: no message decodes from it.
  const truncated = Buffer.from([0x08, 0xff]);
  // A length running past the end: protobufjs reads an empty string for a string field, so
  // such a request decodes, and is refused for the field it then lacks.
  const overlong = Buffer.from([0x0a, 0xff, 0xff, 0x01]);
  const calls: [string, 'unary' | 'server-stream' | 'bidi'][] = [
    ['/runstream.v1.Ingest/Publish', 'unary'],
    ['/runstream.v1.Ingest/PublishStream', 'bidi'],
    ['/runstream.v1.Subscriber/Subscribe', 'server-stream'],
    ['/runstream.v1.History/ListEvents', 'unary'],
    ['/grpc.health.v1.Health/Check', 'unary'],
  ];
  for (const [path, kind] of calls) {
    const status = await rawCall(path, kind, truncated);
    assert.equal(status.code, grpc.status.INVALID_ARGUMENT, `${path}: ${status.details}`);
    assert.match(status.details, /^request message: /);
    if (path.includes('Health')) continue; // the health check takes any service name
    const other = await rawCall(path, kind, overlong);
    assert.equal(other.code, grpc.status.INVALID_ARGUMENT, `${path}: ${other.details}`);
  }
  await assertAlive();
  // The server still takes well-formed calls.
  const client = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  const t = randomName('t-');
  const [ack] = await client.publish([tokenEvent(t, 1)], 'PERSISTED');
  assert.equal(ack?.seq, 1);
  client.close();
});
