/** Small helpers shared by every HTTP route. */
import type { ServerResponse } from 'node:http';
import { InvalidArgumentError, toRunstreamError } from '../errors.js';

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
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(body));
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
