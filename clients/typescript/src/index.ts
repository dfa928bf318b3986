/**
 * runstream's client for browsers and Node: a resuming WebSocket subscriber, a History client
 * and in-memory views. Nothing here needs Node; the gRPC publisher is `@runstream/client/node`.
 */
export { type BackoffOptions, backoffDelayMs } from './backoff.js';
export { ChatView } from './chat-view.js';
export { RETRYABLE_SUBSCRIPTION_CODES, RunstreamError } from './errors.js';
export {
  type ChatPage,
  type DeleteResult,
  type EventsPage,
  type EventsQuery,
  HistoryClient,
  type HistoryClientOptions,
  type PageQuery,
  type RunsPage,
} from './history.js';
export {
  type SubscribeOptions,
  Subscription,
  type SubscriptionItem,
  type SubscriptionState,
  subscribe,
  type WebSocketConstructor,
  type WebSocketLike,
} from './subscriber.js';
export { ThreadView, type ThreadViewListener } from './thread-view.js';
export {
  CATEGORIES,
  type Category,
  type ChatFrame,
  type ChatMessage,
  type ChatToolCall,
  type RunRecord,
  type RunStatus,
  type WireEvent,
} from './types.js';
