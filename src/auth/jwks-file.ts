/**
 * A JWKS file as a key resolver that follows the file: keys are picked by the token's
 * `kid` and `alg`, and the file is re-read when it changes, so keys can be rotated (add
 * the new key, later remove the old one) or revoked without restarting the broker.
 */
import { statSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createLocalJWKSet, errors, type FlattenedJWSInput, type JWSHeaderParameters } from 'jose';
import type { Logger } from '../logger.js';
import { readJwksFile } from './keys.js';

/** The file's mtime is looked at no more often than this when tokens verify fine. */
export const DEFAULT_JWKS_RECHECK_MS = 5_000;
/** ...and no more often than this when a token names a key the file does not hold. */
export const DEFAULT_JWKS_MISS_RECHECK_MS = 1_000;

type Resolver = ReturnType<typeof createLocalJWKSet>;

export class JwksFile {
  readonly #path: string;
  readonly #log: Logger | undefined;
  #set: Resolver;
  #mtimeMs = 0;
  #checkedAtMs = 0;
  #checking: Promise<void> | undefined;

  /** Reads the file now; throws a `KeyProblem` when it is unusable. */
  constructor(path: string, log?: Logger) {
    this.#path = path;
    this.#log = log;
    // mtime first: a change made while the file is being read is then seen at the next check.
    this.#mtimeMs = statSync(path, { throwIfNoEntry: false })?.mtimeMs ?? 0;
    this.#set = createLocalJWKSet(readJwksFile(path) as Parameters<typeof createLocalJWKSet>[0]);
    this.#checkedAtMs = Date.now();
  }

  /** A jose key resolver. */
  readonly resolve = async (header: JWSHeaderParameters, token: FlattenedJWSInput) => {
    await this.#recheck(DEFAULT_JWKS_RECHECK_MS);
    try {
      return await this.#set(header, token);
    } catch (err) {
      if (!(err instanceof errors.JWKSNoMatchingKey)) throw err;
      // A key added since the last look: rotation should not wait for the recheck period.
      if (!(await this.#recheck(DEFAULT_JWKS_MISS_RECHECK_MS))) throw err;
      return this.#set(header, token);
    }
  };

  /** Re-reads the file if it changed; true when it was reloaded. */
  async #recheck(minAgeMs: number): Promise<boolean> {
    if (Date.now() - this.#checkedAtMs < minAgeMs) {
      if (this.#checking) await this.#checking;
      return false;
    }
    this.#checkedAtMs = Date.now();
    let reloaded = false;
    this.#checking = (async () => {
      try {
        const s = await stat(this.#path);
        if (s.mtimeMs === this.#mtimeMs) return;
        // A file being rewritten may be half-written: keep the old keys until it parses.
        const next = createLocalJWKSet(readJwksFile(this.#path) as Parameters<typeof createLocalJWKSet>[0]);
        this.#mtimeMs = s.mtimeMs;
        this.#set = next;
        reloaded = true;
        this.#log?.info({ path: this.#path }, 'JWKS file reloaded');
      } catch (err) {
        this.#log?.warn(
          { path: this.#path, err: (err as Error).message },
          'JWKS file not reloaded; keeping the previous keys',
        );
      }
    })();
    await this.#checking;
    this.#checking = undefined;
    return reloaded;
  }
}
