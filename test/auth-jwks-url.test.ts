// RS_JWT_JWKS_URL: the broker verifies tokens against a JWKS served over HTTP (an identity
// provider's jwks_uri), fetched once and cached, fetched again for an unknown kid (key
// rotation without a restart); a key set that cannot be fetched is `unavailable`, not the
// token's fault.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { exportJWK, generateKeyPair, type JWK, SignJWT } from 'jose';
import { startBroker } from '../src/broker.js';
import { IngestClient } from '../src/client/ingest-client.js';
import { ConfigError, loadConfig } from '../src/config.js';
import { createLogger } from '../src/logger.js';
import { tokenEvent } from './helpers/events.js';
import { brokerConfig, randomName, type Servers, startServers } from './helpers/stack.js';

let servers: Servers;
let jwksServer: Server;
let served: JWK[] = [];
let fetches = 0;
let jwksUrl: string;

before(async () => {
  servers = await startServers();
  jwksServer = createServer((req, res) => {
    if (req.url !== '/.well-known/jwks.json') {
      res.writeHead(404).end();
      return;
    }
    fetches++;
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: served }));
  });
  await new Promise<void>((resolve) => jwksServer.listen(0, '127.0.0.1', resolve));
  jwksUrl = `http://127.0.0.1:${(jwksServer.address() as AddressInfo).port}/.well-known/jwks.json`;
});
after(async () => {
  jwksServer?.closeAllConnections();
  await new Promise((resolve) => jwksServer?.close(resolve));
  await servers?.[Symbol.asyncDispose]();
});

async function keyPair(kid: string) {
  const keys = await generateKeyPair('ES256');
  const jwk = { ...(await exportJWK(keys.publicKey)), kid, alg: 'ES256', use: 'sig' };
  return { keys, jwk };
}

const sign = (privateKey: Awaited<ReturnType<typeof generateKeyPair>>['privateKey'], kid: string) =>
  new SignJWT({ threads: '*', scope: 'read publish' })
    .setProtectedHeader({ alg: 'ES256', kid })
    .setExpirationTime('5m')
    .sign(privateKey);

function publish(target: string, token: string, thread: string, i: number) {
  const client = new IngestClient(target, { token });
  return client.publish([tokenEvent(thread, i)], 'ACCEPTED').finally(() => client.close());
}

test('tokens verify against the fetched key set, cached; an unknown kid fetches it again', async () => {
  const first = await keyPair('k1');
  served = [first.jwk];
  const config = brokerConfig(servers, { jwtJwksUrl: jwksUrl, jwtJwksCooldownMs: 0 });
  const broker = await startBroker(config, createLogger(config.logLevel));
  try {
    const target = `127.0.0.1:${broker.grpcPort}`;
    const t = randomName('jwks-');
    const token = await sign(first.keys.privateKey, 'k1');
    for (let i = 1; i <= 5; i++) await publish(target, token, t, i);
    assert.equal(fetches, 1, 'five verifications, one fetch');

    // Rotation: the provider adds k2; a token signed with it is accepted at once.
    const second = await keyPair('k2');
    served = [first.jwk, second.jwk];
    await publish(target, await sign(second.keys.privateKey, 'k2'), t, 6);
    assert.equal(fetches, 2);

    // A key the set does not hold, and a forged token, are refused as unauthenticated.
    const stranger = await keyPair('k9');
    await assert.rejects(publish(target, await sign(stranger.keys.privateKey, 'k9'), t, 7), (err) => {
      assert.equal((err as grpc.ServiceError).code, grpc.status.UNAUTHENTICATED);
      return true;
    });
    await assert.rejects(publish(target, await sign(stranger.keys.privateKey, 'k1'), t, 8), (err) => {
      assert.equal((err as grpc.ServiceError).code, grpc.status.UNAUTHENTICATED);
      return true;
    });
  } finally {
    await broker.close();
  }
});

test('a key set that cannot be fetched makes requests unavailable; a bad URL stops start-up', async () => {
  const closed = createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const deadUrl = `http://127.0.0.1:${(closed.address() as AddressInfo).port}/jwks.json`;
  await new Promise((resolve) => closed.close(resolve));
  const config = brokerConfig(servers, { jwtJwksUrl: deadUrl });
  const broker = await startBroker(config, createLogger(config.logLevel));
  try {
    const k = await keyPair('k1');
    await assert.rejects(
      publish(`127.0.0.1:${broker.grpcPort}`, await sign(k.keys.privateKey, 'k1'), 't', 1),
      (err) => {
        assert.equal((err as grpc.ServiceError).code, grpc.status.UNAVAILABLE);
        assert.match((err as grpc.ServiceError).details, /RS_JWT_JWKS_URL/);
        return true;
      },
    );
  } finally {
    await broker.close();
  }

  assert.throws(
    () => loadConfig({ RS_JWT_JWKS_URL: 'not a url' }),
    (err) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /RS_JWT_JWKS_URL: "not a url" is not a URL/);
      return true;
    },
  );
  assert.throws(
    () => loadConfig({ RS_JWT_JWKS_URL: jwksUrl, RS_JWT_SECRET: 'x'.repeat(40) }),
    /set only one JWT key source/,
  );
  assert.equal(loadConfig({ RS_JWT_JWKS_URL: jwksUrl }).jwtJwksUrl, jwksUrl);
});
