/** Small helpers shared by every HTTP route. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { refuseUnknownKeys } from '../domain/keys.js';
import { InvalidArgumentError, toRunstreamError } from '../errors.js';
import { endJson } from './unsent.js';

/** A route on the HTTP port. The first route whose method and pattern match handles the request. */
export interface HttpRoute {
  readonly method: string;
  /** Matched against the URL's decoded-later pathname; groups are passed to the handler. */
  readonly pattern: RegExp;
  handle(
    req: import('node:http').IncomingMessage,
    res: ServerResponse,
    match: RegExpExecArray,
    url: URL,
  ): Promise<void>;
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  endJson(res, status, JSON.stringify(body));
}

/** Reports any error with its HTTP status and `{"error":{"code","message"}}`. */
export function sendError(res: ServerResponse, err: unknown): void {
  const e = toRunstreamError(err);
  if (res.headersSent) return void res.end();
  // RFC 6750: a 401 names the scheme the client should authenticate with.
  if (e.httpStatus === 401) res.setHeader('www-authenticate', 'Bearer realm="runstream"');
  sendJson(res, e.httpStatus, { error: { code: e.wsCode, message: e.message } });
}

/**
 * A strict query: a parameter the route does not take is refused, named, and so is one
 * given twice unless it is a list (`lists`), whose values may come repeated.
 */
export function strictQuery(
  url: URL,
  allowed: ReadonlySet<string>,
  what: string,
  lists: ReadonlySet<string> = NO_LISTS,
): void {
  refuseUnknownKeys(url.searchParams.keys(), allowed, what, 'query');
  const seen = new Set<string>();
  for (const key of url.searchParams.keys()) {
    if (seen.has(key) && !lists.has(key)) throw new InvalidArgumentError(key, 'is given more than once');
    seen.add(key);
  }
}

const NO_LISTS: ReadonlySet<string> = new Set();

/** The list parameters of the read routes: their values may come repeated. */
export const LIST_PARAMS: ReadonlySet<string> = new Set(['categories', 'event_types', 'status']);

/** A comma-separated (or repeated) query parameter, or undefined when absent. */
export function listParam(url: URL, name: string): string[] | undefined {
  const all = url.searchParams.getAll(name);
  if (all.length === 0) return undefined;
  const values = all.flatMap((v) => v.split(',')).map((v) => v.trim());
  if (values.some((v) => v === '')) {
    throw new InvalidArgumentError(name, 'must be a comma-separated list of non-empty values');
  }
  return values;
}

/** An integer query parameter in [min, max], or the fallback when absent. */
export function intParam(url: URL, name: string, fallback: number, min: number, max: number): number {
  const raw = url.searchParams.get(name);
  if (raw === null || raw === '') return fallback;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new InvalidArgumentError(name, `must be an integer in [${min}, ${max}]`);
  }
  return n;
}

/** Longest request target quoted back in an error message. */
const QUOTED_TARGET_CHARS = 200;

/**
 * A path of RFC 3986 characters: unreserved, sub-delims, `:`, `@`, `/` and `%` (whether a
 * `%` starts a good escape is for the route's segment decoder to say, naming its segment).
 */
const PATH_PATTERN = /^[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*$/;

const DOT_SEGMENT = /^(?:\.|%2e){1,2}$/i;

/**
 * The request's target as a URL on a fixed origin. An origin-form target (`/path?query`) is
 * appended to the origin, never resolved against it, so `//host/x` stays the path
 * `//host/x` (resolved, `host` would become an authority, and `//[` throws). An
 * absolute-form target (sent to proxies) keeps only its path and query. A path holding a
 * character RFC 3986 does not allow there (`[`, `{`, `\\`, `^`), or a `.` or `..` segment
 * (also as `%2e`), is refused.
 * @throws InvalidArgumentError (400) naming the `request-target`.
 */
export function requestUrl(req: Pick<IncomingMessage, 'url'>): URL {
  const target = req.url ?? '/';
  const bad = (): InvalidArgumentError =>
    new InvalidArgumentError(
      'request-target',
      `${JSON.stringify(target.slice(0, QUOTED_TARGET_CHARS))} is not a valid path`,
    );
  let url: URL;
  try {
    if (target.startsWith('/')) url = new URL(`http://localhost${target}`);
    else {
      const absolute = new URL(target);
      if (absolute.protocol !== 'http:' && absolute.protocol !== 'https:') throw bad();
      url = new URL(`http://localhost${absolute.pathname}${absolute.search}`);
    }
  } catch {
    throw bad();
  }
  const end = target.search(/[?#]/);
  const raw = end < 0 ? target : target.slice(0, end);
  const path = target.startsWith('/') ? raw : url.pathname;
  if (!PATH_PATTERN.test(path)) throw bad();
  // `.` and `..` segments (also as %2e) would be resolved away by the URL parser: a proxy
  // that routes or authorizes by the raw path would then see another path than the routes.
  if (raw.split('/').some((segment) => DOT_SEGMENT.test(segment))) throw bad();
  return url;
}
