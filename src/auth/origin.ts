/**
 * The browser origin allow-list (`RS_ALLOWED_ORIGINS`) and the CORS headers that go with it.
 *
 * Browsers send `Origin` on WebSocket upgrades, on EventSource and on cross-origin fetches;
 * other clients usually send none. A request without `Origin` is not a browser's and is
 * let through (its token is what guards it); one with an `Origin` not on the list is
 * refused with 403, so a page on another site cannot ride on a user's token or network
 * position.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

/** How long a browser may cache a preflight answer. */
export const CORS_MAX_AGE_S = 600;
export const CORS_ALLOWED_HEADERS = 'authorization, content-type, last-event-id, x-api-key';
export const CORS_ALLOWED_METHODS = 'GET, POST, DELETE, OPTIONS';

/**
 * Parses one allow-list entry: an exact origin (`https://app.example.com`,
 * `http://localhost:3000`) or a subdomain wildcard (`https://*.example.com`, which matches
 * `https://a.example.com` and `https://a.b.example.com`, not `https://example.com`).
 * Returns the normalised entry, or throws with the reason.
 */
export function parseOriginEntry(entry: string): string {
  const wildcard = /^([a-z][a-z0-9+.-]*):\/\/\*\.(.+)$/i.exec(entry);
  const probe = wildcard ? `${wildcard[1]}://x.${wildcard[2]}` : entry;
  let url: URL;
  try {
    url = new URL(probe);
  } catch {
    throw new Error('is not an origin (scheme://host[:port])');
  }
  if (
    url.origin === 'null' ||
    url.username !== '' ||
    url.password !== '' ||
    url.pathname !== '/' ||
    url.search !== '' ||
    probe.includes('#')
  ) {
    throw new Error('must be scheme://host[:port], without a path, query or credentials');
  }
  return wildcard ? url.origin.replace('://x.', '://*.') : url.origin;
}

/** Decides whether a browser origin may use the broker. */
export class OriginPolicy {
  readonly #exact: ReadonlySet<string> | undefined;
  /** `[scheme://, .suffix:port]` pairs of the wildcard entries. */
  readonly #wildcards: readonly (readonly [string, string])[];

  /** `undefined` allows every origin. Entries must already be valid (see {@link parseOriginEntry}). */
  constructor(allowed: readonly string[] | undefined) {
    if (allowed === undefined) {
      this.#exact = undefined;
      this.#wildcards = [];
      return;
    }
    const entries = allowed.map(parseOriginEntry);
    this.#exact = new Set(entries.filter((e) => !e.includes('://*.')));
    this.#wildcards = entries
      .filter((e) => e.includes('://*.'))
      .map((e) => {
        const [scheme, rest] = e.split('://*') as [string, string];
        return [`${scheme}://`, rest] as const;
      });
  }

  /** True when every origin is allowed (no list configured). */
  get allowsAll(): boolean {
    return this.#exact === undefined;
  }

  /** Whether a request with this `Origin` header (undefined = not a browser) may proceed. */
  allows(origin: string | undefined): boolean {
    if (origin === undefined || this.#exact === undefined) return true;
    const o = origin.toLowerCase();
    if (this.#exact.has(o)) return true;
    return this.#wildcards.some(([scheme, suffix]) => {
      if (!o.startsWith(scheme) || !o.endsWith(suffix)) return false;
      const label = o.slice(scheme.length, o.length - suffix.length);
      return /^[a-z0-9.-]+$/.test(label) && !label.startsWith('.') && !label.endsWith('.');
    });
  }

  /**
   * Adds CORS headers for an allowed browser request, and answers its preflight. Returns
   * true when the request was a preflight and has been answered.
   */
  applyCors(req: IncomingMessage, res: ServerResponse): boolean {
    const origin = req.headers.origin;
    if (origin === undefined) return false;
    res.setHeader('access-control-allow-origin', origin);
    res.setHeader('vary', 'Origin');
    res.setHeader('access-control-expose-headers', 'www-authenticate');
    if (req.method !== 'OPTIONS' || req.headers['access-control-request-method'] === undefined) return false;
    res
      .writeHead(204, {
        'access-control-allow-methods': CORS_ALLOWED_METHODS,
        'access-control-allow-headers': CORS_ALLOWED_HEADERS,
        'access-control-max-age': String(CORS_MAX_AGE_S),
      })
      .end();
    return true;
  }
}
