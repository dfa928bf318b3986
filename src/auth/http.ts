/**
 * Authentication on the HTTP port: for routes (history, SSE, cancel, the events page)
 * and for WebSocket upgrades, which must be refused with a plain HTTP response before
 * the handshake completes.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { PermissionDeniedError, type RunstreamError, toRunstreamError } from '../errors.js';
import { type Authenticator, bearerFromHttp, type Principal } from './principal.js';

/** The `WWW-Authenticate` challenge of a 401 (RFC 6750). */
export const BEARER_CHALLENGE = 'Bearer realm="runstream"';

/** The caller's principal; throws an `UnauthenticatedError` (401) when a valid token is required and absent. */
export function authenticateHttp(auth: Authenticator, req: IncomingMessage, url: URL): Promise<Principal> {
  return auth.authenticate(bearerFromHttp(req, url));
}

/** Throws a {@link PermissionDeniedError} (403) unless the principal may read the thread. */
export function requireRead(principal: Principal, threadId: string): void {
  if (!principal.canRead(threadId)) {
    throw new PermissionDeniedError(`this token may not read thread ${threadId}`);
  }
}

/** Throws a {@link PermissionDeniedError} (403) unless the principal may cancel runs of the thread. */
export function requireCancel(principal: Principal, threadId: string): void {
  if (!principal.canCancel(threadId)) {
    throw new PermissionDeniedError(`this token may not cancel runs of thread ${threadId}`);
  }
}

const REASONS: Readonly<Record<number, string>> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

/** Refuses a WebSocket upgrade with an HTTP status and the usual `{"error":{...}}` body. */
export function rejectUpgrade(socket: Duplex, err: unknown): void {
  const e: RunstreamError = toRunstreamError(err);
  const body = JSON.stringify({ error: { code: e.wsCode, message: e.message } });
  const head = [
    `HTTP/1.1 ${e.httpStatus} ${REASONS[e.httpStatus] ?? 'Error'}`,
    'Content-Type: application/json; charset=utf-8',
    `Content-Length: ${Buffer.byteLength(body)}`,
    ...(e.httpStatus === 401 ? [`WWW-Authenticate: ${BEARER_CHALLENGE}`] : []),
    'Connection: close',
  ];
  if (socket.writable) socket.end(`${head.join('\r\n')}\r\n\r\n${body}`);
  else socket.destroy();
}
