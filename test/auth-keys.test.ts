// Each kind of verification key works end to end on a real broker: an RS256 public key
// given as a file path, an ES256 public key given as PEM text, and a JWKS file. A token
// signed by any other key is refused.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { exportJWK, exportSPKI, generateKeyPair, SignJWT } from 'jose';
import WebSocket from 'ws';
import { type Broker, startBroker } from '../src/broker.js';
import { type Event, IngestClient } from '../src/client/ingest-client.js';
import { WsConnection } from '../src/client/ws-subscriber.js';
import type { Config } from '../src/config.js';
import { createLogger } from '../src/logger.js';
import { brokerConfig, randomName, type Servers, startServers } from './helpers/stack.js';

type KeyPair = Awaited<ReturnType<typeof generateKeyPair>>;

const dir = mkdtempSync(join(tmpdir(), 'rs-auth-keys-'));
let servers: Servers;
before(async () => {
  servers = await startServers();
});
after(async () => {
  await servers?.[Symbol.asyncDispose]();
  rmSync(dir, { recursive: true, force: true });
});

async function withBroker(overrides: Partial<Config>, fn: (b: Broker) => Promise<void>): Promise<void> {
  const config = brokerConfig(servers, overrides);
  const broker = await startBroker(config, createLogger(config.logLevel));
  try {
    await fn(broker);
  } finally {
    await broker.close();
  }
}

function sign(keys: KeyPair, alg: string, kid?: string): Promise<string> {
  return new SignJWT({ sub: 'svc', threads: '*', scope: 'read publish' })
    .setProtectedHeader({ alg, ...(kid === undefined ? {} : { kid }) })
    .setExpirationTime('5m')
    .sign(keys.privateKey);
}

function events(threadId: string, n: number): Event[] {
  return Array.from({ length: n }, (_, k) => ({
    thread_id: threadId,
    run_id: 'r',
    event_id: `e${k + 1}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: '{}',
    metadata_json: '{}',
  }));
}

/** Publishes over gRPC and reads back over WebSocket with the token; a forged token is refused on both. */
async function roundTrip(b: Broker, good: string, forged: string): Promise<void> {
  const target = `127.0.0.1:${b.grpcPort}`;
  const wsUrl = `ws://127.0.0.1:${b.httpPort}/v1/ws`;
  const t = randomName('t-');
  const publisher = new IngestClient(target, { token: good });
  const impostor = new IngestClient(target, { token: forged });
  try {
    await publisher.publish(events(t, 3), 'PERSISTED');
    const refused = await impostor.publish(events(t, 1)).catch((e: grpc.ServiceError) => e);
    assert.equal((refused as grpc.ServiceError).code, grpc.status.UNAUTHENTICATED);
  } finally {
    publisher.close();
    impostor.close();
  }
  const ws = await WsConnection.open(wsUrl, { token: good });
  ws.subscribe('s', t);
  await ws.waitFor((f) => f.type === 'live' && f.id === 's');
  assert.deepEqual(
    ws.events('s').map((e) => e.seq),
    [1, 2, 3],
  );
  await ws.close();
  const status = await new Promise<number>((resolve, reject) => {
    const raw = new WebSocket(wsUrl, { headers: { authorization: `Bearer ${forged}` } });
    raw.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
    raw.on('open', () => reject(new Error('a forged token was accepted')));
    raw.on('error', reject);
  });
  assert.equal(status, 401);
}

test('RS256 public key from a file path', async () => {
  const keys = await generateKeyPair('RS256', { extractable: true });
  const path = join(dir, 'rs256.pem');
  writeFileSync(path, await exportSPKI(keys.publicKey));
  const other = await generateKeyPair('RS256');
  await withBroker({ jwtPublicKey: path }, async (b) =>
    roundTrip(b, await sign(keys, 'RS256'), await sign(other, 'RS256')),
  );
});

test('ES256 public key as PEM text', async () => {
  const keys = await generateKeyPair('ES256', { extractable: true });
  const other = await generateKeyPair('ES256');
  await withBroker({ jwtPublicKey: await exportSPKI(keys.publicKey) }, async (b) =>
    roundTrip(b, await sign(keys, 'ES256'), await sign(other, 'ES256')),
  );
});

test('JWKS file with an RSA and an EC key, picked by kid', async () => {
  const rsa = await generateKeyPair('RS256', { extractable: true });
  const ec = await generateKeyPair('ES256', { extractable: true });
  const path = join(dir, 'keys.jwks.json');
  writeFileSync(
    path,
    JSON.stringify({
      keys: [
        { ...(await exportJWK(rsa.publicKey)), kid: 'rsa-1', alg: 'RS256', use: 'sig' },
        { ...(await exportJWK(ec.publicKey)), kid: 'ec-1', alg: 'ES256', use: 'sig' },
      ],
    }),
  );
  const stranger = await generateKeyPair('ES256');
  await withBroker({ jwtJwksFile: path }, async (b) => {
    await roundTrip(b, await sign(rsa, 'RS256', 'rsa-1'), await sign(stranger, 'ES256', 'ec-1'));
    await roundTrip(b, await sign(ec, 'ES256', 'ec-1'), await sign(stranger, 'ES256', 'unknown'));
  });
});
