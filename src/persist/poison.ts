/**
 * The poison-event policy: what the persister does when Postgres refuses an event.
 *
 * Ingest refuses what Postgres cannot hold, but a rule can still be missed, and one
 * refused event must not stop the log for every thread. When storing a batch fails with an
 * error that belongs to the data (SQLSTATE classes 22 "data exception" and 54 "program
 * limit exceeded", and check / not-null violations), the persister bisects the batch in
 * log order, storing every half that Postgres takes, until the refused event is alone.
 * That event is kept in `dead_letters` with the error, and a notice takes its place in
 * the thread: an ordinary event of the same thread, run, category and user, with
 * `event_type` {@link REJECTED_EVENT_TYPE}, so the thread stays gap-free (the refused
 * event takes no seq) and every subscriber that would have received it learns why it did
 * not. A PERSISTED ack for the event carries the reason (`EventAck.rejected`).
 *
 * Any other failure (a connection lost, a serialization failure, a bug) is retried as
 * before: bisecting on it would move good events into the dead-letter table.
 */
import { createHash } from 'node:crypto';
import type { LogRecord } from '../domain/event.js';
import type { Rejection } from './seq-assigner.js';

/** Event type of the notice stored in a refused event's place. */
export const REJECTED_EVENT_TYPE = 'event_rejected';
/** Longest reason kept, in characters. */
const MAX_REASON_LENGTH = 1000;
/** SQLSTATEs of constraint violations that can only come from one event's values. */
const DATA_CONSTRAINTS: ReadonlySet<string> = new Set(['23502', '23514']);

/** The rejection an error stands for, when it is Postgres refusing the data; else undefined. */
export function rejectionOf(err: unknown): Rejection | undefined {
  const e = err as { code?: unknown; message?: unknown; severity?: unknown } | null;
  const code = e?.code;
  // A DatabaseError from the server: a 5-character SQLSTATE and a severity.
  if (typeof code !== 'string' || code.length !== 5 || typeof e?.severity !== 'string') return undefined;
  if (!code.startsWith('22') && !code.startsWith('54') && !DATA_CONSTRAINTS.has(code)) return undefined;
  return { reason: String(e?.message ?? code).slice(0, MAX_REASON_LENGTH), sqlstate: code };
}

/**
 * The event_id of the notice for a refused event: derived from the thread and event ids,
 * so a replay or a retry of the same event finds the notice already stored.
 */
export function noticeEventId(r: Pick<LogRecord, 'thread_id' | 'event_id'>): string {
  const hash = createHash('sha256').update(`${r.thread_id}\n${r.event_id}`).digest('base64url');
  return `rejected_${hash.slice(0, 32)}`;
}

/** The notice stored in place of a refused event. */
export function rejectionNotice(r: LogRecord, rejection: Rejection): LogRecord {
  return {
    thread_id: r.thread_id,
    run_id: r.run_id,
    event_id: noticeEventId(r),
    event_type: REJECTED_EVENT_TYPE,
    category: r.category,
    user_id: r.user_id,
    // The refused event's own time, unless that time could be what Postgres refused.
    created_at: /^\d{4}-/.test(r.created_at) ? r.created_at : new Date().toISOString(),
    ...(r.created_at_text === undefined ? {} : { created_at_text: r.created_at_text }),
    content_json: JSON.stringify({
      event_id: r.event_id,
      event_type: r.event_type,
      reason: rejection.reason,
      sqlstate: rejection.sqlstate,
    }),
    metadata_json: '{}',
  };
}

/** Text Postgres `text` can hold: NUL characters become U+FFFD. */
export function storableText(s: string): string {
  return s.includes('\0') ? s.replaceAll('\0', '\uFFFD') : s;
}
