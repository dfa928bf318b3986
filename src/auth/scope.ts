/** What a principal's claims do to a read beyond allowing or refusing it. */
import type { EventFilter } from '../domain/filter.js';
import { PermissionDeniedError } from '../errors.js';
import type { Principal } from './principal.js';

/**
 * The filter narrowed to what the principal may see: a user-scoped token (`user_id`
 * claim) gets only that user's events. Every read path (WebSocket, SSE, gRPC Subscribe,
 * history) must pass its filter through this.
 */
export function scopedFilter<F extends EventFilter>(filter: F, principal: Principal): F {
  return principal.userId === undefined ? filter : { ...filter, userId: principal.userId };
}

/** The user scope of a read: the principal's user when it has one. */
export function readScope(p: Principal, threadId: string, requested: string | undefined): string | undefined {
  if (!p.canRead(threadId)) throw new PermissionDeniedError(`this token may not read thread ${threadId}`);
  return userScope(p, requested);
}

/** The user scope of a delete, which needs read and write (publish) rights on the thread. */
export function writeScope(
  p: Principal,
  threadId: string,
  requested: string | undefined,
): string | undefined {
  if (!p.canRead(threadId) || !p.canPublish(threadId)) {
    throw new PermissionDeniedError(`this token may not delete from thread ${threadId}`);
  }
  return userScope(p, requested);
}

/** The user scope of a read across threads (a listing): the principal's user when it has one. */
export function userScope(p: Principal, requested: string | undefined): string | undefined {
  if (p.userId === undefined) return requested;
  if (requested !== undefined && requested !== p.userId) {
    throw new PermissionDeniedError(
      `this token is scoped to user ${p.userId}; it may not act for user ${requested}`,
    );
  }
  return p.userId;
}
