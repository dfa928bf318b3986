/** Log records as ingest writes them, for tests below the gRPC layer. */
import type { LogRecord } from '../../src/domain/event.js';

/** A token event of `thread` and `run` with content `content` (JSON text). */
export function logRecord(thread: string, run: string, eventId: string, content = '"x"'): LogRecord {
  return {
    thread_id: thread,
    run_id: run,
    event_id: eventId,
    event_type: 'ai_chunk',
    category: 'message',
    user_id: '',
    created_at: '2026-11-30T10:00:00.000Z',
    content_json: content,
    metadata_json: '{}',
  };
}
