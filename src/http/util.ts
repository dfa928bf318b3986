/** Small helpers shared by every HTTP route. */
import type { IncomingMessage, ServerResponse } from 'node:http';
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

/**
 * The request's target as a URL on a fixed origin. An origin-form target (`/path?query`) is
 * appended to the origin, never resolved against it, so `//host/x` stays the path
 * `//host/x` (resolved, `host` would become an authority, and `//[` throws). An
 * absolute-form target (sent to proxies) keeps only its path and query. A path holding a
 * character RFC 3986 does not allow there (`[`, `{`, `\\`, `^`) is refused.
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
  const path = target.startsWith('/') ? (end < 0 ? target : target.slice(0, end)) : url.pathname;
  if (!PATH_PATTERN.test(path)) throw bad();
  return url;
}
