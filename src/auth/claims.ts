/**
 * What a verified token may do, read from its claims (documented in docs/auth.md):
 *
 * - `sub`: who it is (logged, not used for decisions);
 * - `threads`: the thread ids it may touch: exact ids, prefix patterns ending in `*`
 *   (`"team-a-*"`), or `"*"` for every thread; a string or an array. No `threads` claim
 *   means no thread at all: access is granted, never assumed;
 * - `user_id`: when present, the token reads only that user's events and publishes only
 *   events carrying that `user_id`;
 * - `scope` (space-separated string or array) and/or `permissions` (array): `read`,
 *   `publish`, `cancel` (also accepted with a `runstream:` prefix; other values are
 *   ignored, so tokens of a shared identity provider work). With neither claim the token
 *   may only read.
 */
import type { JWTPayload } from 'jose';
import { ID_PATTERN } from '../domain/ids.js';
import { UnauthenticatedError } from '../errors.js';
import { NO_THREADS, type Principal, type ReadableThreads } from './principal.js';

export const THREADS_CLAIM = 'threads';
export const USER_ID_CLAIM = 'user_id';
export const SCOPE_CLAIMS = ['scope', 'permissions'] as const;
/** A prefix that namespaces the broker's permissions in a shared identity provider. */
export const PERMISSION_PREFIX = 'runstream:';
/** More patterns than this in one token is a mistake, not a use case (and costs every check). */
export const MAX_THREAD_PATTERNS = 1000;

export type Permission = 'read' | 'publish' | 'cancel';
export const PERMISSIONS: readonly Permission[] = ['read', 'publish', 'cancel'];
export const PREFIX_PATTERN = /^[A-Za-z0-9_-]{0,127}\*$/;

/** Which threads a token covers. */
export class ThreadScope {
  readonly #all: boolean;
  readonly #exact: ReadonlySet<string>;
  readonly #prefixes: readonly string[];

  constructor(patterns: readonly string[]) {
    this.#all = patterns.includes('*');
    this.#exact = new Set(patterns.filter((p) => !p.endsWith('*')));
    this.#prefixes = patterns.filter((p) => p.endsWith('*') && p !== '*').map((p) => p.slice(0, -1));
  }

  covers(threadId: string): boolean {
    return this.#all || this.#exact.has(threadId) || this.#prefixes.some((p) => threadId.startsWith(p));
  }

  get threads(): ReadableThreads {
    return { all: this.#all, ids: [...this.#exact], prefixes: this.#prefixes };
  }
}

class TokenPrincipal implements Principal {
  readonly #threads: ThreadScope;
  readonly #permissions: ReadonlySet<Permission>;

  constructor(
    readonly subject: string | undefined,
    readonly userId: string | undefined,
    readonly expiresAtMs: number | undefined,
    threads: ThreadScope,
    permissions: ReadonlySet<Permission>,
  ) {
    this.#threads = threads;
    this.#permissions = permissions;
  }

  canRead(threadId: string): boolean {
    return this.#permissions.has('read') && this.#threads.covers(threadId);
  }

  get readable(): ReadableThreads {
    return this.#permissions.has('read') ? this.#threads.threads : NO_THREADS;
  }

  canPublish(threadId: string): boolean {
    return this.#permissions.has('publish') && this.#threads.covers(threadId);
  }

  canCancel(threadId: string): boolean {
    return this.#permissions.has('cancel') && this.#threads.covers(threadId);
  }
}

/**
 * The principal of a verified token. A claim of the wrong shape makes the token invalid
 * (UNAUTHENTICATED) rather than silently granting less or more than its issuer meant.
 *
 * @param clockToleranceMs added to `exp`: the broker honours a token exactly as long as
 * verification would accept it.
 */
export function principalFromClaims(payload: JWTPayload, clockToleranceMs: number): Principal {
  const invalid = (claim: string, problem: string): UnauthenticatedError =>
    new UnauthenticatedError(`invalid token: claim "${claim}" ${problem}`);

  const rawThreads = payload[THREADS_CLAIM];
  let patterns: string[] = [];
  if (rawThreads !== undefined) {
    const list = typeof rawThreads === 'string' ? [rawThreads] : rawThreads;
    if (!Array.isArray(list) || list.length > MAX_THREAD_PATTERNS) {
      throw invalid(THREADS_CLAIM, `must be a string or an array of at most ${MAX_THREAD_PATTERNS} strings`);
    }
    for (const p of list) {
      if (typeof p !== 'string' || !(ID_PATTERN.test(p) || PREFIX_PATTERN.test(p))) {
        throw invalid(
          THREADS_CLAIM,
          `has ${JSON.stringify(p)}: each entry is a thread id, a prefix ending in "*", or "*"`,
        );
      }
    }
    patterns = list as string[];
  }

  const rawUser = payload[USER_ID_CLAIM];
  if (rawUser !== undefined && (typeof rawUser !== 'string' || !ID_PATTERN.test(rawUser))) {
    throw invalid(USER_ID_CLAIM, 'must be a string matching [A-Za-z0-9_-]{1,128}');
  }

  let granted: string[] | undefined;
  for (const claim of SCOPE_CLAIMS) {
    const raw = payload[claim];
    if (raw === undefined) continue;
    const values = typeof raw === 'string' ? raw.split(' ').filter((v) => v !== '') : raw;
    if (!Array.isArray(values) || values.some((v) => typeof v !== 'string')) {
      throw invalid(claim, 'must be a space-separated string or an array of strings');
    }
    granted = [...(granted ?? []), ...(values as string[])];
  }
  const permissions = new Set<Permission>(
    granted === undefined
      ? ['read']
      : PERMISSIONS.filter((p) => granted.includes(p) || granted.includes(PERMISSION_PREFIX + p)),
  );

  if (payload.sub !== undefined && typeof payload.sub !== 'string') throw invalid('sub', 'must be a string');
  return new TokenPrincipal(
    payload.sub,
    rawUser as string | undefined,
    payload.exp === undefined ? undefined : payload.exp * 1000 + clockToleranceMs,
    new ThreadScope(patterns),
    permissions,
  );
}
