/**
 * Who is calling, and what they may do. Every transport (gRPC, HTTP, SSE, WebSocket)
 * gets a {@link Principal} from the {@link Authenticator} and asks it before acting.
 *
 * With no key configured the broker runs open: everyone is {@link OPEN_PRINCIPAL}.
 */
import type { IncomingMessage } from 'node:http';
import type { Metadata } from '@grpc/grpc-js';

/** The threads a principal may read, for listing them: every one, or these ids and prefixes. */
export interface ReadableThreads {
  readonly all: boolean;
  readonly ids: readonly string[];
  readonly prefixes: readonly string[];
}

export const ALL_THREADS: ReadableThreads = Object.freeze({ all: true, ids: [], prefixes: [] });
export const NO_THREADS: ReadableThreads = Object.freeze({ all: false, ids: [], prefixes: [] });

export interface Principal {
  /** Token subject; undefined when the broker runs open. */
  readonly subject: string | undefined;
  /** The user whose events a scoped token may read; undefined = not scoped to a user. */
  readonly userId: string | undefined;
  /** When the token expires (epoch ms); undefined = never. */
  readonly expiresAtMs: number | undefined;
  canRead(threadId: string): boolean;
  /** What `canRead` allows, as a set a query can use (`GET /v1/threads`). */
  readonly readable: ReadableThreads;
  canPublish(threadId: string): boolean;
  canCancel(threadId: string): boolean;
}

export interface Authenticator {
  /** False when the broker runs open. */
  readonly enabled: boolean;
  /**
   * The principal for a bearer token; throws an `UnauthenticatedError` when a token is
   * required and is missing, invalid or expired.
   */
  authenticate(token: string | undefined): Promise<Principal>;
}

export const OPEN_PRINCIPAL: Principal = Object.freeze({
  subject: undefined,
  userId: undefined,
  expiresAtMs: undefined,
  canRead: () => true,
  readable: ALL_THREADS,
  canPublish: () => true,
  canCancel: () => true,
});

/** The authenticator of an open broker. */
export const OPEN_AUTHENTICATOR: Authenticator = Object.freeze({
  enabled: false,
  authenticate: async () => OPEN_PRINCIPAL,
});

/**
 * A bearer token from `Authorization: Bearer …`, or, for browsers that cannot set headers
 * on WebSocket and EventSource requests, the `access_token` query parameter.
 */
export function bearerFromHttp(req: IncomingMessage, url: URL): string | undefined {
  const fromHeader = bearerToken(req.headers.authorization);
  if (fromHeader !== undefined) return fromHeader;
  return url.searchParams.get('access_token') ?? undefined;
}

/** A bearer token from gRPC metadata (`authorization: Bearer …`). */
export function bearerFromGrpc(metadata: Metadata): string | undefined {
  const value = metadata.get('authorization')[0];
  return bearerToken(typeof value === 'string' ? value : value?.toString());
}

/** The token of an `Authorization` value; the scheme is case-insensitive (RFC 7235). */
function bearerToken(value: string | undefined): string | undefined {
  const m = value === undefined ? null : /^Bearer +(\S+) *$/i.exec(value);
  return m?.[1];
}
