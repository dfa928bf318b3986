/** What a principal's claims do to a read beyond allowing or refusing it. */
import type { EventFilter } from '../fanout/filter.js';
import type { Principal } from './principal.js';

/**
 * The filter narrowed to what the principal may see: a user-scoped token (`user_id`
 * claim) gets only that user's events. Every read path (WebSocket, SSE, gRPC Subscribe,
 * history) must pass its filter through this.
 */
export function scopedFilter<F extends EventFilter>(filter: F, principal: Principal): F {
  return principal.userId === undefined ? filter : { ...filter, userId: principal.userId };
}
