/**
 * Named errors with stable codes, and the one table that maps each code to its
 * gRPC status, HTTP status and WebSocket error-frame code.
 */
import { status as GrpcStatus } from '@grpc/grpc-js';

export const ErrorCode = {
  InvalidArgument: 'RS_ERR_INVALID_ARGUMENT',
  Unauthenticated: 'RS_ERR_UNAUTHENTICATED',
  PermissionDenied: 'RS_ERR_PERMISSION_DENIED',
  TokenExpired: 'RS_ERR_TOKEN_EXPIRED',
  OriginNotAllowed: 'RS_ERR_ORIGIN_NOT_ALLOWED',
  NotFound: 'RS_ERR_NOT_FOUND',
  MethodNotAllowed: 'RS_ERR_METHOD_NOT_ALLOWED',
  CursorAhead: 'RS_ERR_CURSOR_AHEAD',
  OffsetExpired: 'RS_ERR_OFFSET_EXPIRED',
  Unavailable: 'RS_ERR_UNAVAILABLE',
  PersistTimeout: 'RS_ERR_PERSIST_TIMEOUT',
  ResourceExhausted: 'RS_ERR_RESOURCE_EXHAUSTED',
  SlowConsumer: 'RS_ERR_SLOW_CONSUMER',
  RunEnded: 'RS_ERR_RUN_ENDED',
  Internal: 'RS_ERR_INTERNAL',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

interface Mapping {
  readonly grpc: GrpcStatus;
  readonly http: number;
  /** The `code` of a WebSocket error frame. */
  readonly ws: string;
}

export const ERROR_TABLE: Readonly<Record<ErrorCode, Mapping>> = {
  RS_ERR_INVALID_ARGUMENT: { grpc: GrpcStatus.INVALID_ARGUMENT, http: 400, ws: 'invalid_argument' },
  RS_ERR_UNAUTHENTICATED: { grpc: GrpcStatus.UNAUTHENTICATED, http: 401, ws: 'unauthenticated' },
  RS_ERR_PERMISSION_DENIED: { grpc: GrpcStatus.PERMISSION_DENIED, http: 403, ws: 'permission_denied' },
  RS_ERR_TOKEN_EXPIRED: { grpc: GrpcStatus.UNAUTHENTICATED, http: 401, ws: 'token_expired' },
  RS_ERR_ORIGIN_NOT_ALLOWED: { grpc: GrpcStatus.PERMISSION_DENIED, http: 403, ws: 'origin_not_allowed' },
  RS_ERR_NOT_FOUND: { grpc: GrpcStatus.NOT_FOUND, http: 404, ws: 'not_found' },
  RS_ERR_METHOD_NOT_ALLOWED: { grpc: GrpcStatus.UNIMPLEMENTED, http: 405, ws: 'method_not_allowed' },
  RS_ERR_CURSOR_AHEAD: { grpc: GrpcStatus.OUT_OF_RANGE, http: 416, ws: 'cursor_ahead' },
  RS_ERR_OFFSET_EXPIRED: { grpc: GrpcStatus.OUT_OF_RANGE, http: 410, ws: 'offset_expired' },
  RS_ERR_UNAVAILABLE: { grpc: GrpcStatus.UNAVAILABLE, http: 503, ws: 'unavailable' },
  RS_ERR_PERSIST_TIMEOUT: { grpc: GrpcStatus.DEADLINE_EXCEEDED, http: 504, ws: 'persist_timeout' },
  RS_ERR_RESOURCE_EXHAUSTED: { grpc: GrpcStatus.RESOURCE_EXHAUSTED, http: 429, ws: 'resource_exhausted' },
  RS_ERR_SLOW_CONSUMER: { grpc: GrpcStatus.RESOURCE_EXHAUSTED, http: 429, ws: 'slow_consumer' },
  RS_ERR_RUN_ENDED: { grpc: GrpcStatus.FAILED_PRECONDITION, http: 409, ws: 'run_ended' },
  RS_ERR_INTERNAL: { grpc: GrpcStatus.INTERNAL, http: 500, ws: 'internal' },
};

/** Base class of every error the broker reports to a client. */
export class RunstreamError extends Error {
  override name = 'RunstreamError';
  constructor(
    readonly code: ErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
  get grpcStatus(): GrpcStatus {
    return ERROR_TABLE[this.code].grpc;
  }
  get httpStatus(): number {
    return ERROR_TABLE[this.code].http;
  }
  get wsCode(): string {
    return ERROR_TABLE[this.code].ws;
  }
}

/** Longest quote of a client's value in an error message. */
const MAX_QUOTE_CHARS = 100;

/**
 * A client's value, quoted for an error message: short, and never by serialising a
 * structure (a 5,000-deep array would overflow JSON.stringify's stack).
 */
export function quote(v: unknown): string {
  if (typeof v === 'string') {
    return JSON.stringify(v.length > MAX_QUOTE_CHARS ? `${v.slice(0, MAX_QUOTE_CHARS)}…` : v);
  }
  if (v === null || typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return 'an array';
  return v === undefined ? 'nothing' : `a${typeof v === 'object' ? 'n object' : ` ${typeof v}`}`;
}

/** Bad input; `field` is a path such as `events[3].content_json`. */
export class InvalidArgumentError extends RunstreamError {
  override name = 'InvalidArgumentError';
  constructor(
    readonly field: string,
    problem: string,
  ) {
    super(ErrorCode.InvalidArgument, `${field}: ${problem}`);
  }
}

export class UnauthenticatedError extends RunstreamError {
  override name = 'UnauthenticatedError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(ErrorCode.Unauthenticated, message, options);
  }
}

/** The bearer token's `exp` (plus the clock tolerance) has passed: get a fresh token and reconnect. */
export class TokenExpiredError extends UnauthenticatedError {
  override name = 'TokenExpiredError';
  override readonly code = ErrorCode.TokenExpired;
}

/** A browser request whose `Origin` is not on `RS_ALLOWED_ORIGINS`. */
export class OriginNotAllowedError extends RunstreamError {
  override name = 'OriginNotAllowedError';
  constructor(readonly origin: string) {
    super(ErrorCode.OriginNotAllowed, `origin ${JSON.stringify(origin)} is not allowed (RS_ALLOWED_ORIGINS)`);
  }
}

export class PermissionDeniedError extends RunstreamError {
  override name = 'PermissionDeniedError';
  constructor(message: string) {
    super(ErrorCode.PermissionDenied, message);
  }
}

export class UnavailableError extends RunstreamError {
  override name = 'UnavailableError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(ErrorCode.Unavailable, message, options);
  }
}

/** Turns anything thrown into a {@link RunstreamError} safe to show a client. */
export function toRunstreamError(err: unknown): RunstreamError {
  if (err instanceof RunstreamError) return err;
  if (isConnectionError(err)) {
    return new UnavailableError('a backing service is unavailable; retry shortly', { cause: err });
  }
  return new RunstreamError(ErrorCode.Internal, 'internal error', { cause: err });
}

/** Network errors and Postgres' connection / shutdown SQLSTATEs (classes 08 and 57P). */
function isConnectionError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') {
    return /Connection terminated|not queryable|timeout exceeded when trying to connect/i.test(String(err));
  }
  return /^(ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|08...|57P0.)$/.test(code);
}
