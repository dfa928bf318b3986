/** Events as the TypeScript client's Publisher takes them, for the client tests. */
import type { PublishEvent } from '@runstream/client/node';

/** Token `i` of `thread`: an ai_chunk message of run-1 with event id `e<i>` and content `{ i }`. */
export function chunk(thread: string, i: number, extra: Partial<PublishEvent> = {}): PublishEvent {
  return {
    threadId: thread,
    runId: 'run-1',
    eventId: `e${i}`,
    eventType: 'ai_chunk',
    category: 'message',
    content: { i },
    ...extra,
  };
}
