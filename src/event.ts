/**
 * The event as it travels between stages, and its one client-facing JSON form.
 *
 * The JetStream log carries a {@link LogRecord} (content and metadata kept as the
 * producer's JSON text); Postgres stores the same text; {@link eventJson} renders a
 * stored event for every reader (live fan-out, catch-up, HTTP), so a client sees
 * byte-identical events whichever path delivered them.
 */

export const CATEGORIES = ['message', 'trace', 'lifecycle'] as const;
export type CategoryName = (typeof CATEGORIES)[number];

/** Category number as stored in Postgres and sent over gRPC. */
export const CATEGORY_NUMBER: Readonly<Record<CategoryName, number>> = { message: 1, trace: 2, lifecycle: 3 };

export function categoryName(n: number): CategoryName {
  const name = CATEGORIES[n - 1];
  if (name === undefined) throw new RangeError(`unknown category number ${n}`);
  return name;
}

/** A validated event as published to the JetStream log. */
export interface LogRecord {
  readonly thread_id: string;
  readonly run_id: string;
  readonly event_id: string;
  readonly event_type: string;
  readonly category: CategoryName;
  readonly user_id: string;
  /** RFC 3339, millisecond precision, UTC. */
  readonly created_at: string;
  /** Any JSON value, as the producer's text. */
  readonly content_json: string;
  /** A JSON object, as the producer's text. */
  readonly metadata_json: string;
}

/** A stored event: a log record with its place in the thread and in the log. */
export interface StoredEvent extends LogRecord {
  readonly seq: number;
  readonly offset: number;
}

/**
 * The client-facing JSON text of a stored event: every field in snake_case, `content`
 * and `metadata` as JSON (not strings), `seq` and `offset` as numbers.
 */
export function eventJson(e: StoredEvent): string {
  return (
    `{"seq":${e.seq},"offset":${e.offset},"thread_id":"${e.thread_id}","run_id":"${e.run_id}"` +
    `,"event_id":"${e.event_id}","event_type":${JSON.stringify(e.event_type)},"category":"${e.category}"` +
    `,"user_id":"${e.user_id}","created_at":"${e.created_at}"` +
    `,"content":${e.content_json},"metadata":${e.metadata_json}}`
  );
}
