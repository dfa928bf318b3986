/**
 * runstream's client for Node: everything of the browser entry, plus the gRPC publisher.
 * On Node < 22, pass `{ WebSocket }` from the `ws` package to `subscribe`.
 */
export * from './index.js';
export {
  type AckLevel,
  type CancelControl,
  DEFAULT_DEADLINE_MS,
  DEFAULT_LINGER_MS,
  DEFAULT_MAX_BATCH_BYTES,
  DEFAULT_MAX_BATCH_EVENTS,
  DEFAULT_MAX_QUEUED_EVENTS,
  type EventAck,
  type PublishEvent,
  Publisher,
  type PublisherOptions,
} from './publisher.js';
