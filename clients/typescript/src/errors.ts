/**
 * The one error class of the client. `code` is the broker's short code (docs/protocol.md §7:
 * `invalid_argument`, `cursor_ahead`, `token_expired`, …) or a client-side one
 * (`connection_failed`, `closed`), so callers branch on a stable string, never on a message.
 */
export class RunstreamError extends Error {
  override readonly name = 'RunstreamError';
  /** The broker's short code, or `connection_failed` / `closed` / `unsupported` from the client. */
  readonly code: string;
  /** The HTTP status, for History calls. */
  readonly status: number | undefined;
  /** The subscription cursor the broker reported with the error, if any. */
  readonly seq: number | undefined;

  constructor(code: string, message: string, opts: { status?: number; seq?: number; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.code = code;
    this.status = opts.status;
    this.seq = opts.seq;
  }
}

/**
 * Subscription error codes after which resubscribing from the cursor can succeed. Everything
 * else (`invalid_argument`, `permission_denied`, `cursor_ahead`, `offset_expired`, …) means the
 * request itself is wrong, so the subscriber stops and reports it.
 */
export const RETRYABLE_SUBSCRIPTION_CODES: ReadonlySet<string> = new Set([
  'unavailable',
  'internal',
  'slow_consumer',
  'token_expired',
  'resource_exhausted',
  'connection_failed',
]);
