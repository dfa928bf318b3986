/**
 * `runstream token`: mints a development JWT the broker accepts (docs/auth.md): HS256 with
 * RS_JWT_SECRET, or signed with a private key file for a broker that has its public key.
 */
import { createPrivateKey, createSecretKey, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { SignJWT } from 'jose';
import { MAX_THREAD_PATTERNS, PERMISSIONS, type Permission, PREFIX_PATTERN } from '../auth/claims.js';
import { algorithmsForKey, checkHmacSecret } from '../auth/keys.js';
import { loadCliEnv } from '../config.js';
import { ID_PATTERN } from '../domain/ids.js';
import {
  CommandError,
  choiceFlag,
  EXIT_OK,
  listFlag,
  parseFlags,
  type Subcommand,
  UsageError,
} from './args.js';

export const DEFAULT_TOKEN_EXPIRY = '1h';
const UNIT_S: Readonly<Record<string, number>> = { s: 1, m: 60, h: 3600, d: 86_400 };

const USAGE = `usage: runstream token --thread ID [flags]

Mints a JWT for development and tests, signed with RS_JWT_SECRET (HS256) or with --key, and
prints it on stdout. Claims (docs/auth.md): "threads", "scope", "user_id", "sub", "exp", and
"iss" / "aud" from RS_JWT_ISSUER / RS_JWT_AUDIENCE (their first value) when set.

  --thread ID        a thread it may touch: an id, a prefix ending in "*", or "*" for all
                     (repeat or comma-separate; at least one)
  --scope RIGHTS     read, publish, cancel (comma-separated; default read)
  --user ID          scope it to one user: it reads only that user's events (user_id claim)
  --sub NAME         its subject (default "dev")
  --expires TIME     lifetime: 30s, 15m, 1h, 7d (default ${DEFAULT_TOKEN_EXPIRY})
  --key FILE         sign with this PEM private key (RSA, EC P-256/384/521, Ed25519) instead
                     of RS_JWT_SECRET; the broker needs its public key (RS_JWT_PUBLIC_KEY)

  export RS_TOKEN=$(runstream token --thread demo-thread --scope read,publish)`;

const FLAGS = {
  thread: { type: 'string', multiple: true },
  scope: { type: 'string', multiple: true },
  user: { type: 'string' },
  sub: { type: 'string' },
  expires: { type: 'string' },
  key: { type: 'string' },
} as const;

/** `30s`, `15m`, `1h`, `7d` (or plain seconds) as seconds. */
export function durationSeconds(raw: string): number {
  const m = /^(\d{1,9})([smhd]?)$/.exec(raw);
  const n = m ? Number(m[1]) * (UNIT_S[m[2] || 's'] as number) : 0;
  if (!m || n <= 0)
    throw new UsageError(`--expires ${JSON.stringify(raw)}: must be a duration like 30s, 15m, 1h or 7d`);
  return n;
}

export const tokenCommand: Subcommand = {
  name: 'token',
  summary: 'mint a development JWT (threads, rights, user, expiry) from RS_JWT_SECRET or a key',
  usage: USAGE,
  async run(argv, io) {
    const parsed = parseFlags(this, argv, FLAGS, io);
    if (!parsed) return EXIT_OK;
    const { values } = parsed;
    const threads = listFlag(values.thread);
    if (threads.length === 0)
      throw new UsageError('--thread is required (an id, a prefix ending in "*", or "*")');
    if (threads.length > MAX_THREAD_PATTERNS)
      throw new UsageError(`--thread: at most ${MAX_THREAD_PATTERNS}`);
    for (const t of threads) {
      if (!ID_PATTERN.test(t) && !PREFIX_PATTERN.test(t)) {
        throw new UsageError(
          `--thread ${JSON.stringify(t)}: must be a thread id, a prefix ending in "*", or "*"`,
        );
      }
    }
    const rights = listFlag(values.scope);
    const scope = (rights.length === 0 ? ['read'] : rights).map((r) =>
      choiceFlag<Permission>('scope', r, PERMISSIONS),
    );
    if (values.user !== undefined && !ID_PATTERN.test(values.user)) {
      throw new UsageError(`--user ${JSON.stringify(values.user)}: must match ${ID_PATTERN}`);
    }
    const expiresS = durationSeconds(values.expires ?? DEFAULT_TOKEN_EXPIRY);
    const env = loadCliEnv();
    const { key, alg } = signingKey(values.key, env.jwtSecret);

    let jwt = new SignJWT({
      threads: threads.length === 1 ? threads[0] : threads,
      scope: [...new Set(scope)].join(' '),
      ...(values.user === undefined ? {} : { user_id: values.user }),
    })
      .setProtectedHeader({ alg, typ: 'JWT' })
      .setSubject(values.sub ?? 'dev')
      .setIssuedAt()
      .setExpirationTime(Math.floor(Date.now() / 1000) + expiresS);
    if (env.jwtIssuer) jwt = jwt.setIssuer(env.jwtIssuer);
    if (env.jwtAudience) jwt = jwt.setAudience(env.jwtAudience);
    io.out(`${await jwt.sign(key)}\n`);
    return EXIT_OK;
  },
};

function signingKey(
  keyFile: string | undefined,
  secret: string | undefined,
): { key: KeyObject; alg: string } {
  if (keyFile !== undefined) {
    let key: KeyObject;
    try {
      key = createPrivateKey(readFileSync(keyFile, 'utf8'));
    } catch (err) {
      throw new CommandError(`--key ${keyFile}: not a readable PEM private key (${(err as Error).message})`);
    }
    try {
      return { key, alg: algorithmsForKey(key)[0] as string };
    } catch (err) {
      throw new CommandError(`--key ${keyFile}: ${(err as Error).message}`);
    }
  }
  if (secret === undefined) {
    throw new CommandError(
      "no signing key: set RS_JWT_SECRET (the broker's HMAC secret) or pass --key <private key PEM>",
    );
  }
  try {
    checkHmacSecret(secret);
  } catch (err) {
    throw new CommandError(`RS_JWT_SECRET: ${(err as Error).message}`);
  }
  return { key: createSecretKey(Buffer.from(secret, 'utf8')), alg: 'HS256' };
}
