/**
 * JWT authentication (`jose`): one {@link Authenticator} per process, built from the
 * config by {@link createAuthenticator}. Tokens are verified against exactly one key
 * source: an HMAC secret, a PEM public key, or a JWKS file.
 */
import { createSecretKey, type KeyObject } from 'node:crypto';
import { createRemoteJWKSet, errors, type JWTPayload, type JWTVerifyGetKey, jwtVerify } from 'jose';
import { ErrorCode, RunstreamError, TokenExpiredError, UnauthenticatedError } from '../errors.js';
import type { Logger } from '../logger.js';
import { principalFromClaims } from './claims.js';
import { JwksFile } from './jwks-file.js';
import {
  algorithmsForKey,
  checkHmacSecret,
  HMAC_ALGORITHMS,
  parsePublicKey,
  readPublicKeyPem,
} from './keys.js';
import { type Authenticator, OPEN_AUTHENTICATOR, type Principal } from './principal.js';

/** How long a fetched JWKS (RS_JWT_JWKS_URL) is used before it is fetched again. */
export const DEFAULT_JWKS_CACHE_MS = 10 * 60_000;
/** A token with an unknown `kid` fetches the JWKS again at most this often. */
export const DEFAULT_JWKS_COOLDOWN_MS = 30_000;
/** A JWKS fetch that takes longer fails (the request is refused as unavailable). */
export const JWKS_FETCH_TIMEOUT_MS = 5_000;

/** Longer than any sane JWT; refusing early keeps junk out of the crypto. */
export const MAX_TOKEN_LENGTH = 16 * 1024;

/** The settings authentication reads (config.ts reads them from RS_JWT_*). */
export interface AuthConfig {
  /** HMAC secret (HS256/384/512). At most one of jwtSecret, jwtPublicKey, jwtJwksFile; none = open broker. */
  readonly jwtSecret: string | undefined;
  /** PEM text or the path of a PEM file: an RSA, EC (P-256/384/521) or Ed25519 public key. */
  readonly jwtPublicKey: string | undefined;
  /** Path of a JWKS file of public keys, selected by the token's `kid`; re-read when it changes. */
  readonly jwtJwksFile: string | undefined;
  /**
   * URL of a JWKS (an identity provider's `jwks_uri`), fetched when first needed and cached
   * for {@link AuthConfig.jwtJwksCacheMs}; a token naming an unknown `kid` fetches it again
   * (at most once per {@link AuthConfig.jwtJwksCooldownMs}), so rotation needs no restart.
   */
  readonly jwtJwksUrl?: string | undefined;
  readonly jwtJwksCacheMs?: number | undefined;
  readonly jwtJwksCooldownMs?: number | undefined;
  /** Accepted `iss` values; empty = not checked. */
  readonly jwtIssuer: readonly string[];
  /** Accepted `aud` values (a token needs one of them); empty = not checked. */
  readonly jwtAudience: readonly string[];
  readonly jwtClockToleranceMs: number;
}

interface KeySource {
  readonly key: KeyObject | JWTVerifyGetKey;
  /** Undefined for a JWKS: jose then checks each key against the token's `alg`. */
  readonly algorithms: string[] | undefined;
  readonly kind: 'hmac' | 'public-key' | 'jwks' | 'jwks-url';
}

export class JwtAuthenticator implements Authenticator {
  readonly enabled = true;
  readonly #source: KeySource;
  readonly #config: AuthConfig;

  constructor(config: AuthConfig, log?: Logger) {
    this.#config = config;
    this.#source = keySource(config, log);
  }

  /** Which kind of key verifies tokens, and with which algorithms (for the start-up log). */
  get description(): { keys: string; algorithms: string[] | 'from JWKS' } {
    return { keys: this.#source.kind, algorithms: this.#source.algorithms ?? 'from JWKS' };
  }

  async authenticate(token: string | undefined): Promise<Principal> {
    if (token === undefined || token === '') {
      throw new UnauthenticatedError(
        'a bearer token is required (Authorization: Bearer <jwt>, or access_token=<jwt> for browsers)',
      );
    }
    if (token.length > MAX_TOKEN_LENGTH) throw new UnauthenticatedError('invalid token: too long');
    const c = this.#config;
    let payload: JWTPayload;
    try {
      const options = {
        algorithms: this.#source.algorithms,
        issuer: c.jwtIssuer.length > 0 ? [...c.jwtIssuer] : undefined,
        audience: c.jwtAudience.length > 0 ? [...c.jwtAudience] : undefined,
        clockTolerance: c.jwtClockToleranceMs / 1000,
      };
      const key = this.#source.key;
      ({ payload } =
        typeof key === 'function'
          ? await jwtVerify(token, key, options)
          : await jwtVerify(token, key, options));
    } catch (err) {
      if (this.#source.kind === 'jwks-url' && keySetUnreachable(err)) {
        throw new RunstreamError(
          ErrorCode.Unavailable,
          'the key set (RS_JWT_JWKS_URL) cannot be fetched; retry later',
          { cause: err },
        );
      }
      throw toAuthError(err);
    }
    return principalFromClaims(payload, c.jwtClockToleranceMs);
  }
}

/** The remote key set did not answer, or not with a key set: the token is not at fault. */
function keySetUnreachable(err: unknown): boolean {
  if (err instanceof errors.JWKSTimeout || err instanceof errors.JWKSInvalid) return true;
  if (err instanceof errors.JOSEError) return false;
  return err instanceof TypeError || (err as { name?: string } | null)?.name === 'AbortError';
}

/** A jose failure as the client should see it: what was wrong, never key material. */
function toAuthError(err: unknown): UnauthenticatedError {
  if (err instanceof errors.JWTExpired) return new TokenExpiredError('token expired', { cause: err });
  if (err instanceof errors.JWTClaimValidationFailed) {
    return new UnauthenticatedError(`invalid token: claim "${err.claim}" ${err.reason}`, { cause: err });
  }
  if (err instanceof errors.JWSSignatureVerificationFailed) {
    return new UnauthenticatedError('invalid token: signature verification failed', { cause: err });
  }
  if (err instanceof errors.JOSEAlgNotAllowed) {
    return new UnauthenticatedError('invalid token: signing algorithm not accepted', { cause: err });
  }
  if (err instanceof errors.JWKSNoMatchingKey) {
    return new UnauthenticatedError('invalid token: no key matches its kid/alg', { cause: err });
  }
  if (err instanceof errors.JOSEError) {
    return new UnauthenticatedError('invalid token: malformed', { cause: err });
  }
  return new UnauthenticatedError('invalid token', { cause: err });
}

function keySource(c: AuthConfig, log: Logger | undefined): KeySource {
  if (c.jwtSecret !== undefined) {
    checkHmacSecret(c.jwtSecret);
    return {
      key: createSecretKey(Buffer.from(c.jwtSecret, 'utf8')),
      algorithms: [...HMAC_ALGORITHMS],
      kind: 'hmac',
    };
  }
  if (c.jwtPublicKey !== undefined) {
    const key = parsePublicKey(readPublicKeyPem(c.jwtPublicKey));
    return { key, algorithms: algorithmsForKey(key), kind: 'public-key' };
  }
  if (c.jwtJwksFile !== undefined) {
    return { key: new JwksFile(c.jwtJwksFile, log).resolve, algorithms: undefined, kind: 'jwks' };
  }
  if (c.jwtJwksUrl !== undefined) {
    const key = createRemoteJWKSet(new URL(c.jwtJwksUrl), {
      cacheMaxAge: c.jwtJwksCacheMs ?? DEFAULT_JWKS_CACHE_MS,
      cooldownDuration: c.jwtJwksCooldownMs ?? DEFAULT_JWKS_COOLDOWN_MS,
      timeoutDuration: JWKS_FETCH_TIMEOUT_MS,
    });
    return { key, algorithms: undefined, kind: 'jwks-url' };
  }
  throw new Error('no JWT key configured');
}

/** Whether the config names a key, i.e. whether the broker authenticates at all. */
export function authEnabled(c: AuthConfig): boolean {
  return (
    c.jwtSecret !== undefined ||
    c.jwtPublicKey !== undefined ||
    c.jwtJwksFile !== undefined ||
    c.jwtJwksUrl !== undefined
  );
}

/**
 * The process's authenticator: JWT when a key is configured, {@link OPEN_AUTHENTICATOR}
 * otherwise. Throws when the configured key is unusable.
 */
export function createAuthenticator(config: AuthConfig, log?: Logger): Authenticator {
  return authEnabled(config) ? new JwtAuthenticator(config, log) : OPEN_AUTHENTICATOR;
}

/**
 * Says at start-up how the broker is guarded: a loud warning when it is open (anyone who
 * reaches its ports may read and publish everything), and when browsers of any origin
 * may connect to an authenticated broker.
 */
export function logAuthMode(
  auth: Authenticator,
  config: AuthConfig & { readonly allowedOrigins: readonly string[] | undefined },
  log: Logger,
): void {
  if (!auth.enabled) {
    log.warn(
      'AUTHENTICATION IS OFF: anyone who can reach the gRPC and HTTP ports can read, publish and cancel ' +
        'on every thread. Set RS_JWT_SECRET, RS_JWT_PUBLIC_KEY, RS_JWT_JWKS_FILE or RS_JWT_JWKS_URL to require tokens.',
    );
  } else {
    log.info(
      {
        ...(auth instanceof JwtAuthenticator ? auth.description : {}),
        issuer: config.jwtIssuer.length > 0 ? config.jwtIssuer : 'not checked',
        audience: config.jwtAudience.length > 0 ? config.jwtAudience : 'not checked',
        clockToleranceMs: config.jwtClockToleranceMs,
      },
      'JWT authentication on',
    );
  }
  if (config.allowedOrigins === undefined) {
    if (auth.enabled) {
      log.warn(
        'RS_ALLOWED_ORIGINS is unset: browser pages from ANY origin may connect with a token; ' +
          'set it to the origins of your web apps',
      );
    }
  } else {
    log.info({ allowedOrigins: config.allowedOrigins }, 'browser origins restricted');
  }
}
