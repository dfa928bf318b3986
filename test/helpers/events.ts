/**
 * Ingest events as integration tests publish them: each carries its index `i` in its
 * content ({"i": i}) and event id (`e${i}`), so a test can tell what arrived, in what order.
 */
import type { Event } from '../../src/client/ingest-client.js';

/** Token event `i` of `thread`: an ai_chunk MESSAGE of run-1, with `extra` fields overriding. */
export function tokenEvent(thread: string, i: number, extra: Partial<Event> = {}): Event {
  return {
    thread_id: thread,
    run_id: 'run-1',
    event_id: `e${i}`,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json: JSON.stringify({ i }),
    ...extra,
  };
}

const CATS = ['MESSAGE', 'TRACE', 'LIFECYCLE'] as const;
const TYPES = ['ai_chunk', 'tool_call', 'llm_start'];

/** Event i of a thread: runs a/b interleaved, categories and types cycling (never terminal). */
function mixedEvent(thread: string, i: number): Event {
  return {
    thread_id: thread,
    run_id: i % 3 === 0 ? 'run-b' : 'run-a',
    event_id: `e${i}`,
    event_type: TYPES[i % TYPES.length] as string,
    category: CATS[i % 4 === 0 ? 2 : i % 2] as (typeof CATS)[number],
    content_json: JSON.stringify({ i }),
  };
}

/** Mixed events `from` .. `from + n - 1` of `thread`, for filter tests (see {@link mixedEvent}). */
export const mixedBatch = (thread: string, from: number, n: number): Event[] =>
  Array.from({ length: n }, (_, k) => mixedEvent(thread, from + k));
