// Authentication without servers: config validation of keys and origins, claims → what a
// token may do, the origin allow-list, and token verification for every key kind.
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { exportJWK, exportPKCS8, exportSPKI, generateKeyPair, type JWTPayload, SignJWT } from 'jose';
import { principalFromClaims } from '../src/auth/claims.js';
import { watchExpiry } from '../src/auth/expiry.js';
import { type AuthConfig, createAuthenticator } from '../src/auth/jwt.js';
import { OriginPolicy } from '../src/auth/origin.js';
import { OPEN_AUTHENTICATOR, OPEN_PRINCIPAL } from '../src/auth/principal.js';
import { ConfigError, loadConfig } from '../src/config.js';
import { ErrorCode, RunstreamError, TokenExpiredError, UnauthenticatedError } from '../src/errors.js';
import { waitFor } from './helpers/wait.js';

type KeyLike = Awaited<ReturnType<typeof generateKeyPair>>['publicKey'];
const SECRET = 'a-test-secret-that-is-at-least-32-bytes-long!';
const dir = mkdtempSync(join(tmpdir(), 'rs-auth-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const base: AuthConfig = {
  jwtSecret: undefined,
  jwtPublicKey: undefined,
  jwtJwksFile: undefined,
  jwtIssuer: [],
  jwtAudience: [],
  jwtClockToleranceMs: 0,
};

async function hs(claims: JWTPayload, opts: { secret?: string; alg?: string; expSec?: number } = {}) {
  const jwt = new SignJWT(claims).setProtectedHeader({ alg: opts.alg ?? 'HS256' }).setIssuedAt();
  if (opts.expSec !== undefined) jwt.setExpirationTime(Math.floor(Date.now() / 1000) + opts.expSec);
  return jwt.sign(new TextEncoder().encode(opts.secret ?? SECRET));
}

/** The config's problems, each reduced to its field name. */
function problemFields(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
  } catch (err) {
    assert.ok(err instanceof ConfigError);
    return err.problems.map((p) => p.split(/[=:]/)[0] as string);
  }
  return [];
}

// ---------------------------------------------------------------- config

test('config: no key means open; each key source is accepted alone', async () => {
  const open = loadConfig({});
  assert.equal(open.jwtSecret, undefined);
  assert.equal(createAuthenticator(open), OPEN_AUTHENTICATOR);
  assert.equal(open.allowedOrigins, undefined);

  assert.equal(loadConfig({ RS_JWT_SECRET: SECRET }).jwtSecret, SECRET);

  const { publicKey } = await generateKeyPair('ES256', { extractable: true });
  const pem = await exportSPKI(publicKey);
  const path = join(dir, 'es.pem');
  writeFileSync(path, pem);
  assert.equal(loadConfig({ RS_JWT_PUBLIC_KEY: path }).jwtPublicKey, path);
  // PEM in an env var with literal \n escapes, as container platforms often carry it.
  const escaped = pem.trim().replaceAll('\n', '\\n');
  assert.ok(createAuthenticator(loadConfig({ RS_JWT_PUBLIC_KEY: escaped })).enabled);

  const jwks = join(dir, 'ok.jwks.json');
  writeFileSync(jwks, JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: 'k1' }] }));
  assert.equal(loadConfig({ RS_JWT_JWKS_FILE: jwks }).jwtJwksFile, jwks);
});

test('config: every bad auth field is named, before anything starts', async () => {
  const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
  const privatePem = await exportPKCS8(privateKey);
  const privJwks = join(dir, 'private.jwks.json');
  writeFileSync(privJwks, JSON.stringify({ keys: [await exportJWK(privateKey)] }));
  const notJson = join(dir, 'bad.json');
  writeFileSync(notJson, '{"keys": [');
  const weak = generateKeyPairSync('rsa', { modulusLength: 1024 });

  assert.deepEqual(problemFields({ RS_JWT_SECRET: 'short' }), ['RS_JWT_SECRET']);
  assert.deepEqual(problemFields({ RS_JWT_PUBLIC_KEY: privatePem }), ['RS_JWT_PUBLIC_KEY']);
  assert.deepEqual(problemFields({ RS_JWT_PUBLIC_KEY: '/no/such/key.pem' }), ['RS_JWT_PUBLIC_KEY']);
  assert.deepEqual(
    problemFields({ RS_JWT_PUBLIC_KEY: '-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----' }),
    ['RS_JWT_PUBLIC_KEY'],
  );
  assert.deepEqual(
    problemFields({ RS_JWT_PUBLIC_KEY: weak.publicKey.export({ type: 'spki', format: 'pem' }) as string }),
    ['RS_JWT_PUBLIC_KEY'],
  );
  assert.deepEqual(problemFields({ RS_JWT_JWKS_FILE: privJwks }), ['RS_JWT_JWKS_FILE']);
  assert.deepEqual(problemFields({ RS_JWT_JWKS_FILE: notJson }), ['RS_JWT_JWKS_FILE']);
  assert.deepEqual(problemFields({ RS_JWT_JWKS_FILE: join(dir, 'missing.json') }), ['RS_JWT_JWKS_FILE']);
  // Two key sources: ambiguous, refused.
  assert.deepEqual(problemFields({ RS_JWT_SECRET: SECRET, RS_JWT_PUBLIC_KEY: await exportSPKI(publicKey) }), [
    'RS_JWT_SECRET, RS_JWT_PUBLIC_KEY',
  ]);
  // Claim checks without a key would look like protection on an open broker.
  assert.deepEqual(problemFields({ RS_JWT_ISSUER: 'https://idp', RS_JWT_AUDIENCE: 'runstream' }), [
    'RS_JWT_ISSUER',
    'RS_JWT_AUDIENCE',
  ]);
  assert.deepEqual(problemFields({ RS_JWT_SECRET: SECRET, RS_JWT_CLOCK_TOLERANCE_MS: '-1' }), [
    'RS_JWT_CLOCK_TOLERANCE_MS',
  ]);
  assert.deepEqual(
    problemFields({ RS_ALLOWED_ORIGINS: 'https://ok.example.com, https://x.com/path, nope' }),
    ['RS_ALLOWED_ORIGINS', 'RS_ALLOWED_ORIGINS'],
  );
});

test('config: issuer, audience and origins are comma-separated lists; "*" allows every origin', () => {
  const c = loadConfig({
    RS_JWT_SECRET: SECRET,
    RS_JWT_ISSUER: 'https://idp.example.com',
    RS_JWT_AUDIENCE: 'runstream, other',
    RS_ALLOWED_ORIGINS: 'https://App.Example.com, http://localhost:3000, https://*.example.org',
  });
  assert.deepEqual(c.jwtIssuer, ['https://idp.example.com']);
  assert.deepEqual(c.jwtAudience, ['runstream', 'other']);
  assert.deepEqual(c.allowedOrigins, [
    'https://app.example.com',
    'http://localhost:3000',
    'https://*.example.org',
  ]);
  assert.equal(loadConfig({ RS_ALLOWED_ORIGINS: '*' }).allowedOrigins, undefined);
});

// ---------------------------------------------------------------- claims

test('claims: threads patterns, scopes and user scoping decide what a token may do', () => {
  const p = principalFromClaims(
    { sub: 'svc', threads: ['exact-1', 'team-a-*'], scope: 'read publish openid' },
    0,
  );
  assert.equal(p.subject, 'svc');
  assert.ok(p.canRead('exact-1'));
  assert.ok(p.canRead('team-a-42'));
  assert.ok(p.canPublish('team-a-'));
  assert.ok(!p.canRead('exact-10'), 'an exact id is not a prefix');
  assert.ok(!p.canRead('team-b-1'));
  assert.ok(!p.canCancel('exact-1'), 'cancel was not granted');

  const all = principalFromClaims({ threads: '*', permissions: ['runstream:cancel', 'runstream:read'] }, 0);
  assert.ok(all.canRead('anything'));
  assert.ok(all.canCancel('anything'));
  assert.ok(!all.canPublish('anything'));

  const readOnly = principalFromClaims({ threads: ['t1'] }, 0);
  assert.ok(readOnly.canRead('t1'), 'no scope claim: read only');
  assert.ok(!readOnly.canPublish('t1'));

  const none = principalFromClaims({ scope: 'read publish cancel' }, 0);
  assert.ok(!none.canRead('t1'), 'no threads claim: no thread');
  assert.ok(!none.canPublish('t1'));

  const user = principalFromClaims({ threads: '*', user_id: 'u-1', exp: 2_000_000_000 }, 1500);
  assert.equal(user.userId, 'u-1');
  assert.equal(user.expiresAtMs, 2_000_000_000_000 + 1500, 'expiry includes the clock tolerance');
  assert.equal(principalFromClaims({ threads: '*' }, 0).expiresAtMs, undefined);
});

test('claims: a malformed claim makes the token invalid instead of granting anything', () => {
  for (const claims of [
    { threads: 42 },
    { threads: ['ok', 7] },
    { threads: ['a*b'] },
    { threads: ['bad id'] },
    { threads: '*', user_id: 12 },
    { threads: '*', user_id: 'no spaces allowed' },
    { threads: '*', scope: { read: true } },
    { threads: '*', permissions: ['read', 1] },
  ]) {
    assert.throws(
      () => principalFromClaims(claims as JWTPayload, 0),
      (err: unknown) => err instanceof UnauthenticatedError && /claim "/.test(err.message),
      JSON.stringify(claims),
    );
  }
});

// ---------------------------------------------------------------- origins

test('origins: exact entries, subdomain wildcards, and non-browser requests', () => {
  const policy = new OriginPolicy([
    'https://app.example.com',
    'http://localhost:3000',
    'https://*.example.org',
  ]);
  assert.ok(policy.allows(undefined), 'no Origin header: not a browser');
  assert.ok(policy.allows('https://app.example.com'));
  assert.ok(policy.allows('HTTPS://APP.EXAMPLE.COM'));
  assert.ok(policy.allows('http://localhost:3000'));
  assert.ok(policy.allows('https://a.example.org'));
  assert.ok(policy.allows('https://a.b.example.org'));
  assert.ok(!policy.allows('https://example.org'), 'the wildcard needs a subdomain');
  assert.ok(!policy.allows('http://a.example.org'), 'scheme must match');
  assert.ok(!policy.allows('https://evil-example.org'));
  assert.ok(!policy.allows('https://app.example.com.evil.com'));
  assert.ok(!policy.allows('http://localhost:3001'));
  assert.ok(!policy.allows('null'));
  assert.ok(new OriginPolicy(undefined).allows('https://anything.example'));
  assert.ok(new OriginPolicy(undefined).allowsAll);
});

// ---------------------------------------------------------------- verification

test('HS256: valid, wrong secret, expired, not yet valid, alg none, malformed', async () => {
  const auth = createAuthenticator({ ...base, jwtSecret: SECRET });
  assert.ok(auth.enabled);
  const p = await auth.authenticate(await hs({ sub: 'u', threads: ['t1'] }, { expSec: 60 }));
  assert.equal(p.subject, 'u');
  assert.ok(p.canRead('t1'));

  const refused = async (token: string | undefined, code: ErrorCode = ErrorCode.Unauthenticated) =>
    assert.rejects(
      auth.authenticate(token),
      (err: unknown) => err instanceof RunstreamError && err.code === code,
    );
  await refused(undefined);
  await refused('');
  await refused('not.a.jwt');
  await refused(await hs({ threads: '*' }, { secret: `${SECRET}-other` }));
  await refused(await hs({ threads: '*' }, { expSec: -10 }), ErrorCode.TokenExpired);
  const early = await new SignJWT({ threads: '*' })
    .setProtectedHeader({ alg: 'HS256' })
    .setNotBefore(Math.floor(Date.now() / 1000) + 600)
    .sign(new TextEncoder().encode(SECRET));
  await refused(early);
  const header = Buffer.from('{"alg":"none","typ":"JWT"}').toString('base64url');
  const body = Buffer.from('{"threads":"*"}').toString('base64url');
  await refused(`${header}.${body}.`);
  assert.ok(
    (await auth.authenticate(await hs({ threads: '*' }, { expSec: -10 })).catch((e) => e)) instanceof
      TokenExpiredError,
  );
});

test('clock tolerance: a token just past exp is honoured within the tolerance, and its expiry says so', async () => {
  const strict = createAuthenticator({ ...base, jwtSecret: SECRET, jwtClockToleranceMs: 0 });
  const lenient = createAuthenticator({ ...base, jwtSecret: SECRET, jwtClockToleranceMs: 60_000 });
  const token = await hs({ threads: '*' }, { expSec: -5 });
  await assert.rejects(strict.authenticate(token), TokenExpiredError);
  const p = await lenient.authenticate(token);
  assert.ok((p.expiresAtMs ?? 0) > Date.now(), 'honoured until exp + tolerance');
});

test('issuer and audience are enforced when configured', async () => {
  const auth = createAuthenticator({
    ...base,
    jwtSecret: SECRET,
    jwtIssuer: ['https://idp.example.com'],
    jwtAudience: ['runstream'],
  });
  const ok = await hs({ threads: '*', iss: 'https://idp.example.com', aud: ['other', 'runstream'] });
  assert.ok((await auth.authenticate(ok)).canRead('x'));
  for (const claims of [
    { threads: '*', aud: 'runstream' },
    { threads: '*', iss: 'https://evil.example.com', aud: 'runstream' },
    { threads: '*', iss: 'https://idp.example.com' },
    { threads: '*', iss: 'https://idp.example.com', aud: 'other' },
  ]) {
    await assert.rejects(auth.authenticate(await hs(claims)), /claim "(iss|aud)"/, JSON.stringify(claims));
  }
});

test('RS256 and ES256 public keys verify their tokens and refuse the others (no alg confusion)', async () => {
  for (const alg of ['RS256', 'ES256'] as const) {
    const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
    const pem = await exportSPKI(publicKey);
    const auth = createAuthenticator({ ...base, jwtPublicKey: pem });
    const token = await new SignJWT({ threads: ['t'] }).setProtectedHeader({ alg }).sign(privateKey);
    assert.ok((await auth.authenticate(token)).canRead('t'), alg);

    const other = await generateKeyPair(alg);
    const forged = await new SignJWT({ threads: ['t'] }).setProtectedHeader({ alg }).sign(other.privateKey);
    await assert.rejects(auth.authenticate(forged), UnauthenticatedError, `${alg}: other key`);
    // The classic confusion: an HMAC token keyed with the public key's PEM text.
    await assert.rejects(
      auth.authenticate(await hs({ threads: '*' }, { secret: pem })),
      UnauthenticatedError,
    );
  }
});

test('JWKS file: keys picked by kid, and a key added to the file is used without a restart', async () => {
  const a = await generateKeyPair('RS256', { extractable: true });
  const b = await generateKeyPair('ES256', { extractable: true });
  const path = join(dir, 'rotating.jwks.json');
  const write = async (keys: [KeyLike, string, string][]) =>
    writeFileSync(
      path,
      JSON.stringify({
        keys: await Promise.all(
          keys.map(async ([k, kid, alg]) => ({ ...(await exportJWK(k)), kid, alg, use: 'sig' })),
        ),
      }),
    );
  await write([[a.publicKey, 'a', 'RS256']]);
  const auth = createAuthenticator({ ...base, jwtJwksFile: path });
  const sign = (key: KeyLike, kid: string, alg: string) =>
    new SignJWT({ threads: ['t'] }).setProtectedHeader({ alg, kid }).sign(key);

  assert.ok((await auth.authenticate(await sign(a.privateKey, 'a', 'RS256'))).canRead('t'));
  const tokenB = await sign(b.privateKey, 'b', 'ES256');
  await assert.rejects(auth.authenticate(tokenB), /no key matches/);
  // A kid the set holds, signed by another key, is still refused.
  const impostor = await generateKeyPair('RS256');
  await assert.rejects(auth.authenticate(await sign(impostor.privateKey, 'a', 'RS256')), /signature/);

  await write([
    [a.publicKey, 'a', 'RS256'],
    [b.publicKey, 'b', 'ES256'],
  ]);
  const p = await waitFor(() => auth.authenticate(tokenB), { what: 'key b picked up', timeoutMs: 15_000 });
  assert.ok(p.canRead('t'));
});

test('watchExpiry fires once when the expiry passes, and not after being disarmed', async () => {
  let fired = 0;
  const stop = watchExpiry({ ...OPEN_PRINCIPAL, expiresAtMs: Date.now() + 30 }, () => fired++);
  await waitFor(() => fired === 1, { what: 'expiry' });
  stop();
  let disarmedFired = false;
  const disarm = watchExpiry({ ...OPEN_PRINCIPAL, expiresAtMs: Date.now() + 30 }, () => {
    disarmedFired = true;
  });
  disarm();
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(disarmedFired, false);
  assert.equal(fired, 1);
  let now = 0;
  watchExpiry({ ...OPEN_PRINCIPAL, expiresAtMs: Date.now() - 1 }, () => now++);
  assert.equal(now, 1, 'already expired: at once');
});

test('bearer tokens: header scheme is case-insensitive; the query is the browser fallback', async () => {
  const { Metadata } = await import('@grpc/grpc-js');
  const { bearerFromGrpc, bearerFromHttp } = await import('../src/auth/principal.js');
  const md = new Metadata();
  md.set('authorization', 'bearer abc.def.ghi');
  assert.equal(bearerFromGrpc(md), 'abc.def.ghi');
  assert.equal(bearerFromGrpc(new Metadata()), undefined);
  const req = (authorization: string | undefined) =>
    ({ headers: authorization === undefined ? {} : { authorization } }) as Parameters<
      typeof bearerFromHttp
    >[0];
  const at = (target = '/v1/ws') => new URL(target, 'http://localhost');
  assert.equal(bearerFromHttp(req('Bearer t1'), at()), 't1');
  assert.equal(bearerFromHttp(req('BEARER  t1 '), at()), 't1');
  assert.equal(bearerFromHttp(req('Basic dXNlcjpwYXNz'), at('/v1/ws?access_token=q1')), 'q1');
  assert.equal(bearerFromHttp(req(undefined), at('/v1/ws?access_token=q2')), 'q2');
  assert.equal(bearerFromHttp(req('Bearer t3'), at('/v1/ws?access_token=q3')), 't3', 'the header wins');
  assert.equal(bearerFromHttp(req(undefined), at()), undefined);
});
