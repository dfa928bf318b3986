/** Read queries over the event log. Always parameterised; seq cursors only. */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import {
  ASSISTANT_TYPES,
  CHAT_EVENT_TYPES,
  type ChatMessage,
  type StoredToolCall,
  TOOL_CALL_TYPES,
} from '../domain/chat.js';
import { categoryName, categoryNumber, type eventJson, type StoredEvent } from '../domain/event.js';
import type { EventFilter } from '../domain/filter.js';
import { TERMINAL_EVENT_TYPES } from '../domain/run-lifecycle.js';
import { byKeys } from './by-keys.js';

interface EventRow {
  seq: string;
  stream_offset: string;
  thread_id: string;
  run_id: string;
  event_id: string;
  event_type: string;
  category: number;
  /** The name of a category other than the known three (category 0); NULL for those. */
  category_name: string | null;
  user_id: string;
  created_at: string;
  /** The producer's own text of created_at, or NULL. */
  created_at_text: string | null;
  content: string;
  metadata: string;
}

const EVENT_COLUMNS = `seq, stream_offset, thread_id, run_id, event_id, event_type, category, category_name, user_id,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at, created_at_text,
  content::text AS content, metadata::text AS metadata`;

function toStored(r: EventRow): StoredEvent {
  const e: { -readonly [K in keyof StoredEvent]: StoredEvent[K] } = {
    seq: Number(r.seq),
    offset: Number(r.stream_offset),
    thread_id: r.thread_id,
    run_id: r.run_id,
    event_id: r.event_id,
    event_type: r.event_type,
    category: r.category_name ?? categoryName(r.category),
    user_id: r.user_id,
    created_at: r.created_at,
    content_json: r.content,
    metadata_json: r.metadata,
  };
  // Added after the literal, not spread into it (domain/event.ts storedEvent says why).
  if (r.created_at_text !== null) e.created_at_text = r.created_at_text;
  return e;
}

export interface PageQuery {
  readonly threadId: string;
  readonly afterSeq: number;
  /** Inclusive upper bound, or none. */
  readonly uptoSeq?: number | undefined;
  /** Exclusive upper bound, or none (History's `before_seq`). */
  readonly beforeSeq?: number | undefined;
  /** Newest first: the page ends `limit` events below the upper bound ("load earlier"). */
  readonly descending?: boolean | undefined;
  readonly filter: EventFilter;
  /** Only events whose `metadata.task_id` is this string (History; subscriptions have no such filter). */
  readonly taskId?: string | undefined;
  /** With a run filter: also return the run's terminal lifecycle events, whatever the other filters. */
  readonly withTerminal?: boolean;
  readonly limit: number;
  /**
   * Bytes of content and metadata the page holds at most: it ends after the event that
   * reaches them (one event always fits), so that a page of large events stays bounded.
   */
  readonly maxBytes?: number | undefined;
}

/** A page, and whether it ended early at {@link PageQuery.maxBytes} (more may follow). */
export interface PageRead<T = StoredEvent> {
  readonly events: T[];
  readonly truncated: boolean;
  /** Bytes of content and metadata in `events` (counted only with a budget; else 0). */
  readonly bytes: number;
}

/** Seqs one statement of a page reads at most once its windows have grown (unless the page is larger). */
const MAX_WINDOW = 16_384;

/** Names of the catch-up page statements, by text: a few dozen shapes (which clauses are in use). */
const statementNames = new Map<string, string>();
/** More shapes than this are not expected; past it, a statement runs unnamed (planned each time). */
const MAX_STATEMENT_NAMES = 128;

/**
 * A name for a catch-up page statement's text, so that each connection prepares it once
 * (planning was a tenth of a catch-up page's time). Its values are all parameters, so a shape
 * has one text; the shapes are few (filters in use, a byte budget, the first window or the
 * next), and the cap bounds the plans each Postgres connection keeps even so. History's reads,
 * one page a request in many more shapes, are planned each time.
 */
function statementName(text: string): string | undefined {
  let name = statementNames.get(text);
  if (name === undefined) {
    if (statementNames.size >= MAX_STATEMENT_NAMES) return undefined;
    name = `rs_page_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    statementNames.set(text, name);
  }
  return name;
}

/** The highest seq a thread ever had, or NULL (SQL; the thread id is $1). */
const HEAD_SQL = `GREATEST((SELECT max(seq) FROM run_events WHERE thread_id = $1),
                           (SELECT head_seq FROM thread_heads WHERE thread_id = $1))`;

/** A page's seq range (lo, hi]: literal, or to be resolved by the page's first statement. */
type Bounds = { readonly lo: number; readonly hi: number } | 'resolve';

/**
 * A page of a thread's events in seq order, filtered in SQL. Only the clauses in use are
 * sent, so each shape gets its own plan (a run filter uses the (thread_id, run_id, seq) index).
 *
 * Every statement reads a bounded seq window, `seq > lo AND seq <= lo + window`, never an
 * open range, so that whatever plan the statistics lead to (a bitmap scan and a sort of the
 * whole rest of the thread, when the thread grew after the last ANALYZE), a statement reads
 * at most `window` rows. Seqs are dense but for deleted runs and filtered-out events: a short
 * window is followed by the next one, twice as wide (up to MAX_WINDOW), until the page is
 * full or the range (after_seq, upper bound] is covered. The first statement also resolves
 * the range in its own snapshot: the upper bound is at most the thread's head (every seq up
 * to it is committed, so later windows miss nothing), and a run filter narrows the range to
 * the run's first and last seq (`runs`, kept in the persister's transaction).
 */
export async function listEventsPage(db: pg.Pool | pg.ClientBase, q: PageQuery): Promise<StoredEvent[]> {
  return (await readEventsPage(db, q)).events;
}

/** {@link listEventsPage}, saying whether the page was cut at its byte budget. */
export async function readEventsPage(db: pg.Pool | pg.ClientBase, q: PageQuery): Promise<PageRead> {
  return readPage(db, q, STORED);
}

/**
 * An event as a page of {@link readEventJsonPage} holds it: its seq and its client-facing
 * JSON text ({@link eventJson}'s), written by Postgres. The fields a subscription filters
 * and ends on are read from the text when first asked for (an unfiltered WebSocket catch-up
 * never asks): the ids before them hold no quote, so each is found by its key.
 */
export class EventText {
  #fields: TextFields | undefined;
  constructor(
    readonly seq: number,
    readonly text: string,
  ) {}
  json(): string {
    return this.text;
  }
  get run_id(): string {
    this.#fields ??= textFields(this.text);
    return this.#fields.run_id;
  }
  get category(): string {
    this.#fields ??= textFields(this.text);
    return this.#fields.category;
  }
  get event_type(): string {
    this.#fields ??= textFields(this.text);
    return this.#fields.event_type;
  }
  get user_id(): string {
    this.#fields ??= textFields(this.text);
    return this.#fields.user_id;
  }
}

interface TextFields {
  readonly run_id: string;
  readonly event_type: string;
  readonly category: string;
  readonly user_id: string;
}

/** The fields of an {@link EVENT_JSON_SQL} text between `"run_id"` and `"user_id"`, in its order. */
function textFields(text: string): TextFields {
  const quoted = (key: string, from: number): [string, number] => {
    const start = text.indexOf(key, from) + key.length;
    const end = text.indexOf('"', start);
    return [text.slice(start, end), end];
  };
  const [run_id, runEnd] = quoted(',"run_id":"', 0);
  // The event type is a JSON string (to_json escapes it): it ends at the first unescaped quote.
  const typeStart = text.indexOf(',"event_type":"', runEnd) + ',"event_type":'.length;
  let typeEnd = typeStart + 1;
  while (text.charCodeAt(typeEnd) !== 0x22) typeEnd += text.charCodeAt(typeEnd) === 0x5c ? 2 : 1;
  const event_type = JSON.parse(text.slice(typeStart, typeEnd + 1)) as string;
  const [category, categoryEnd] = quoted(',"category":"', typeEnd);
  const [user_id] = quoted(',"user_id":"', categoryEnd);
  return { run_id, event_type, category, user_id };
}

/**
 * {@link readEventsPage}, each event as its client-facing JSON text. Postgres writes the
 * text, so the broker parses 2 columns a row instead of 13 and builds nothing (catch-up).
 */
export async function readEventJsonPage(
  db: pg.Pool | pg.ClientBase,
  q: PageQuery,
): Promise<PageRead<EventText>> {
  return readPage(db, q, JSON_TEXT);
}

/**
 * What a page's rows are read as: the outer select list over `e.*` (the seq first), and each
 * row's reading from its `width` values at `at` (rows are read as arrays).
 */
interface RowShape<T> {
  readonly columns: string;
  readonly width: number;
  readonly row: (r: readonly unknown[], at: number) => T;
  /** Its statements are prepared once per connection ({@link statementName}). */
  readonly prepared: boolean;
}

/** The columns of an {@link EventRow}, in the order STORED selects them. */
const STORED_KEYS = [
  'seq',
  'stream_offset',
  'thread_id',
  'run_id',
  'event_id',
  'event_type',
  'category',
  'category_name',
  'user_id',
  'created_at',
  'created_at_text',
  'content',
  'metadata',
] as const satisfies readonly (keyof EventRow)[];

const STORED: RowShape<StoredEvent> = {
  columns: STORED_KEYS.map((k) => `e.${k}`).join(', '),
  width: STORED_KEYS.length,
  row: (r, at) =>
    toStored(Object.fromEntries(STORED_KEYS.map((k, i) => [k, r[at + i]])) as unknown as EventRow),
  prepared: false,
};

/** A row's category name: the known three are stored by number, any other by name. */
const CATEGORY_SQL = `COALESCE(e.category_name, (ARRAY['message', 'trace', 'lifecycle'])[e.category])`;

/**
 * {@link eventJson} in SQL (test/event-text.test.ts holds the two to the same bytes). Ids,
 * categories and the created_at texts need no escaping (their patterns hold no quote, backslash
 * or control character); event types are printable ASCII, which to_json escapes as
 * JSON.stringify does. Every column is NOT NULL but the two COALESCEd ones.
 */
const EVENT_JSON_SQL = `'{"seq":' || e.seq || ',"offset":' || e.stream_offset || ',"thread_id":"' || e.thread_id
  || '","run_id":"' || e.run_id || '","event_id":"' || e.event_id || '","event_type":' || to_json(e.event_type)::text
  || ',"category":"' || ${CATEGORY_SQL}
  || '","user_id":"' || e.user_id || '","created_at":"' || COALESCE(e.created_at_text, e.created_at)
  || '","content":' || e.content || ',"metadata":' || e.metadata || '}'`;

const JSON_TEXT: RowShape<EventText> = {
  columns: `e.seq, ${EVENT_JSON_SQL} AS json`,
  width: 2,
  row: (r, at) => new EventText(Number(r[at]), r[at + 1] as string),
  prepared: true,
};

async function readPage<T extends { readonly seq: number }>(
  db: pg.Pool | pg.ClientBase,
  q: PageQuery,
  shape: RowShape<T>,
): Promise<PageRead<T>> {
  const filtered =
    q.filter.runId !== undefined ||
    q.filter.categories !== undefined ||
    q.filter.eventTypes !== undefined ||
    q.filter.userId !== undefined ||
    q.taskId !== undefined;
  let window = Math.min(filtered ? 2 * q.limit : q.limit, Math.max(MAX_WINDOW, q.limit));
  const events: T[] = [];
  let bytes = 0;
  let bounds: Bounds = 'resolve';
  for (;;) {
    const left = q.maxBytes === undefined ? undefined : q.maxBytes - bytes;
    const read: WindowRead<T> | undefined = await readWindow(
      db,
      q,
      shape,
      bounds,
      window,
      q.limit - events.length,
      left,
    );
    if (!read) return { events, truncated: false, bytes }; // no such thread (or run) range at all
    for (const e of read.events) events.push(e);
    bytes += read.bytes;
    if (q.maxBytes !== undefined && bytes >= q.maxBytes) return { events, truncated: true, bytes };
    const { lo, hi }: { lo: number; hi: number } = read; // annotated: `window` makes the inference circular
    bounds = q.descending ? { lo, hi: Math.max(lo, hi - window) } : { lo: Math.min(hi, lo + window), hi };
    if (events.length >= q.limit || bounds.lo >= bounds.hi) return { events, truncated: false, bytes };
    window = Math.min(2 * window, Math.max(MAX_WINDOW, q.limit));
  }
}

interface WindowRead<T> {
  readonly events: T[];
  readonly lo: number;
  readonly hi: number;
  readonly bytes: number;
}

/**
 * One window of a page: the `limit` first rows (last, descending) of (lo, hi] within
 * `window` seqs of lo (of hi), cut after the row whose content and metadata reach
 * `maxBytes` when given. Returns the range it was given or resolved, and the bytes the rows
 * hold, or undefined when the resolving statement returned no row at all.
 */
async function readWindow<T>(
  db: pg.Pool | pg.ClientBase,
  q: PageQuery,
  shape: RowShape<T>,
  bounds: Bounds,
  window: number,
  limit: number,
  maxBytes: number | undefined,
): Promise<WindowRead<T> | undefined> {
  const values: unknown[] = [q.threadId];
  const param = (v: unknown): string => {
    values.push(v);
    return `$${values.length}`;
  };
  let range: string;
  if (bounds !== 'resolve') {
    range = `SELECT ${param(bounds.lo)}::int8 AS lo, ${param(bounds.hi)}::int8 AS hi`;
  } else {
    // Never above the head, whatever bound the caller gave: the windows walk up to it.
    let lo = `${param(q.afterSeq)}::int8`;
    let ceiling = `COALESCE(${HEAD_SQL}, 0)`;
    if (q.filter.runId !== undefined) {
      // Without a runs row (GREATEST skips a NULL, COALESCE goes on) the range stays the thread's.
      const run = `FROM runs WHERE thread_id = $1 AND run_id = ${param(q.filter.runId)}`;
      lo = `GREATEST(${lo}, (SELECT first_seq - 1 ${run}))`;
      ceiling = `COALESCE((SELECT last_seq ${run}), ${ceiling})`;
    }
    const his = [ceiling];
    if (q.uptoSeq !== undefined) his.push(`${param(q.uptoSeq)}::int8`);
    if (q.beforeSeq !== undefined) his.push(`${param(q.beforeSeq)}::int8 - 1`);
    range = `SELECT ${lo} AS lo, LEAST(${his.join(', ')}) AS hi`;
  }
  const where = [
    'thread_id = $1',
    q.descending
      ? `seq > GREATEST(b.lo, b.hi - ${param(window)}) AND seq <= b.hi`
      : `seq > b.lo AND seq <= LEAST(b.lo + ${param(window)}, b.hi)`,
  ];
  if (q.filter.runId !== undefined) where.push(`run_id = ${param(q.filter.runId)}`);
  const narrow: string[] = [];
  if (q.filter.categories) {
    // The known three by number (as stored since migration 0001), any other name by name.
    const numbers = [...q.filter.categories].map(categoryNumber);
    const known = numbers.filter((n) => n !== 0);
    const others = [...q.filter.categories].filter((_, i) => numbers[i] === 0);
    const either: string[] = [];
    if (known.length > 0) either.push(`category = ANY(${param(known)}::int2[])`);
    if (others.length > 0) either.push(`category_name = ANY(${param(others)}::text[])`);
    narrow.push(either.length === 1 ? (either[0] as string) : `(${either.join(' OR ')})`);
  }
  if (q.filter.eventTypes) narrow.push(`event_type = ANY(${param([...q.filter.eventTypes])}::text[])`);
  // Inside `narrow`: a user-scoped run subscription still sees the run's terminal event, so it ends.
  if (q.filter.userId !== undefined) narrow.push(`user_id = ${param(q.filter.userId)}`);
  // A string, as the metadata holds it: a number 1 is not the task "1".
  if (q.taskId !== undefined) {
    narrow.push(
      `(json_typeof(metadata->'task_id') = 'string' AND metadata->>'task_id' = ${param(q.taskId)})`,
    );
  }
  if (narrow.length > 0) {
    const terminal =
      q.withTerminal && q.filter.runId !== undefined
        ? ` OR (category = 3 AND event_type = ANY(${param([...TERMINAL_EVENT_TYPES])}::text[]))`
        : '';
    where.push(`((${narrow.join(' AND ')})${terminal})`);
  }
  const order = `seq${q.descending ? ' DESC' : ''}`;
  // One statement, one snapshot: the range and the rows are read together (MATERIALIZED: the
  // range is computed once, not inlined into the window's conditions).
  let rowsSql = `SELECT ${EVENT_COLUMNS} FROM run_events WHERE ${where.join(' AND ')} ORDER BY ${order} LIMIT ${param(limit)}`;
  if (maxBytes !== undefined) {
    // Sizes of the rows the LIMIT kept (not of the whole window), summed in page order; a
    // row goes out while the rows before it hold less than the budget.
    rowsSql = `SELECT s.* FROM (
        SELECT r.*, sum(octet_length(r.content) + octet_length(r.metadata)) OVER (ORDER BY r.${order}) AS page_bytes,
               octet_length(r.content) + octet_length(r.metadata) AS row_bytes
          FROM (${rowsSql}) r
      ) s WHERE s.page_bytes - s.row_bytes < ${param(maxBytes)}`;
  }
  const pageBytes = maxBytes === undefined ? '' : ', e.page_bytes';
  const text = `WITH b AS MATERIALIZED (${range}) SELECT b.lo, b.hi, ${shape.columns}${pageBytes}
       FROM b LEFT JOIN LATERAL (${rowsSql}) e ON true ORDER BY e.${order}`;
  // Arrays, not objects: a catch-up reads rows by the hundred thousand.
  const { rows } = await db.query<unknown[]>({
    name: shape.prepared ? statementName(text) : undefined,
    text,
    values,
    rowMode: 'array',
  });
  const first = rows[0];
  if (!first) return undefined;
  const events: T[] = [];
  if (first[2] !== null) for (const r of rows) events.push(shape.row(r, 2));
  const bytes = maxBytes === undefined ? 0 : Number(rows[rows.length - 1]?.[2 + shape.width] ?? 0);
  return { events, lo: Number(first[0]), hi: Number(first[1]), bytes };
}

/** The seq of a thread's first event at or after a log offset; undefined when there is none yet. */
export async function seqAtOffset(
  db: pg.Pool | pg.ClientBase,
  threadId: string,
  offset: number,
): Promise<number | undefined> {
  const { rows } = await db.query<{ seq: string }>({
    name: 'rs_seq_at_offset',
    text: 'SELECT seq FROM run_events WHERE thread_id = $1 AND stream_offset >= $2 ORDER BY stream_offset, seq LIMIT 1',
    values: [threadId, offset],
  });
  return rows[0] ? Number(rows[0].seq) : undefined;
}

/**
 * Highest seq a thread ever had; 0 when it never had an event. Deleting the thread's
 * tail does not lower it (thread_heads, migration 0004): later events continue above it.
 */
export async function headSeq(db: pg.Pool | pg.ClientBase, threadId: string): Promise<number> {
  const { rows } = await db.query<{ head: string | null }>({
    name: 'rs_head',
    text: `SELECT ${HEAD_SQL} AS head`,
    values: [threadId],
  });
  return Number(rows[0]?.head ?? 0);
}

/** The heads of several threads (0 for a thread that never had an event), in one statement. */
export async function headSeqs(
  db: pg.Pool | pg.ClientBase,
  threadIds: readonly string[],
): Promise<Map<string, number>> {
  const { rows } = await db.query<{ thread_id: string; head: string | null }>({
    name: 'rs_heads',
    text: `SELECT t.thread_id,
                  GREATEST((SELECT max(seq) FROM run_events e WHERE e.thread_id = t.thread_id),
                           (SELECT head_seq FROM thread_heads h WHERE h.thread_id = t.thread_id)) AS head
             FROM unnest($1::text[]) AS t(thread_id)`,
    values: [threadIds],
  });
  return new Map(rows.map((r) => [r.thread_id, Number(r.head ?? 0)]));
}

/** An event of a thread, by its producer's id. */
export interface EventKey {
  readonly thread_id: string;
  readonly event_id: string;
}

/** What became of an event: stored (seq and offset), or refused by the store (seq 0 and why). */
export interface FoundEvent extends EventKey {
  readonly seq: number;
  readonly offset: number;
  readonly rejected?: string;
}

/**
 * What became of the given events, of any threads (for acks of duplicates): stored, or
 * refused by the store (from `dead_letters`); those not found are left out. A statement per
 * thousand keys (by-keys.ts).
 */
export async function findEvents(
  db: pg.Pool | pg.ClientBase,
  keys: readonly EventKey[],
): Promise<FoundEvent[]> {
  return byKeys(keys, async (chunk) => {
    const { rows } = await db.query<{
      thread_id: string;
      event_id: string;
      seq: string;
      stream_offset: string;
      rejected: string | null;
    }>({
      name: 'rs_find_events',
      // The stored row first: an event refused once and stored since is stored.
      text: `SELECT k.thread_id, k.event_id, f.seq, f.stream_offset, f.rejected
               FROM unnest($1::text[], $2::text[]) AS k(thread_id, event_id)
              CROSS JOIN LATERAL (
                     SELECT e.seq, e.stream_offset, NULL::text AS rejected FROM run_events e
                      WHERE e.thread_id = k.thread_id AND e.event_id = k.event_id
                     UNION ALL
                     SELECT 0, d.stream_offset, d.error FROM dead_letters d
                      WHERE d.thread_id = k.thread_id AND d.event_id = k.event_id
                     LIMIT 1) AS f`,
      values: [chunk.map((k) => k.thread_id), chunk.map((k) => k.event_id)],
    });
    return rows.map(
      (r): FoundEvent => ({
        thread_id: r.thread_id,
        event_id: r.event_id,
        seq: Number(r.seq),
        offset: Number(r.stream_offset),
        ...(r.rejected === null ? {} : { rejected: r.rejected }),
      }),
    );
  });
}

export interface ToolCallLookup {
  readonly threadId: string;
  /** The tool messages to name: their runs, call ids, and the latest first seq among them. */
  readonly messages: readonly Pick<ChatMessage, 'run_id' | 'tool_call_id' | 'first_seq'>[];
  /** A user-scoped read sees only that user's calls. */
  readonly userId?: string | undefined;
}

/**
 * The tool-call events that may name these tool messages: of their runs, before the
 * latest of them, holding one of their call ids (or a `tool_calls` list). Through the
 * (thread_id, run_id, seq) index, so bounded by the runs. {@link nameTools} picks.
 */
export async function toolCallsBefore(
  db: pg.Pool | pg.ClientBase,
  q: ToolCallLookup,
): Promise<StoredToolCall[]> {
  if (q.messages.length === 0) return [];
  const user = q.userId === undefined ? '' : ' AND user_id = $6';
  const { rows } = await db.query<{ run_id: string; seq: string; content: string }>({
    name: `rs_tool_calls_before${q.userId === undefined ? '' : '_user'}`,
    text: `SELECT run_id, seq, content::text AS content FROM run_events
            WHERE thread_id = $1 AND run_id = ANY($2::text[]) AND seq < $3 AND event_type = ANY($4::text[])
              AND ((content->>'call_id') = ANY($5::text[]) OR (content->>'id') = ANY($5::text[])
                   OR (content->>'tool_call_id') = ANY($5::text[]) OR (content->'tool_calls') IS NOT NULL)${user}`,
    values: [
      q.threadId,
      [...new Set(q.messages.map((m) => m.run_id))],
      Math.max(...q.messages.map((m) => m.first_seq)),
      TOOL_CALL_TYPES,
      q.messages.map((m) => m.tool_call_id ?? ''),
      ...(q.userId === undefined ? [] : [q.userId]),
    ],
  });
  return rows.map((r) => ({ run_id: r.run_id, seq: Number(r.seq), content_json: r.content }));
}

/** Of a chat read: the thread, up to which seq, and the subscription's run and user filters. */
export interface ChatStateQuery {
  readonly threadId: string;
  readonly uptoSeq: number;
  readonly runId?: string | undefined;
  readonly userId?: string | undefined;
}

/**
 * The runs (of the thread, or the one run) whose last chat event up to `uptoSeq` is an
 * anonymous assistant event, and the seq where that message began: the first chat event
 * after the run's last chat event that is not one (domain/chat.ts ChatKeys).
 */
export async function anonymousTails(
  db: pg.Pool | pg.ClientBase,
  q: ChatStateQuery,
): Promise<{ runId: string; firstSeq: number }[]> {
  const { runId, userId } = q;
  const { rows } = await db.query<{ run_id: string; first_seq: string }>({
    name: `rs_chat_anon_tails${runId === undefined ? '' : '_run'}${userId === undefined ? '' : '_user'}`,
    text: anonymousTailsSql(runId !== undefined, userId !== undefined),
    values: [
      q.threadId,
      q.uptoSeq,
      [...CHAT_EVENT_TYPES],
      ASSISTANT_TYPES,
      ...(runId === undefined ? [] : [runId]),
      ...(userId === undefined ? [] : [userId]),
    ],
  });
  return rows.map((r) => ({ runId: r.run_id, firstSeq: Number(r.first_seq) }));
}

/** The thread's stored events at these seqs (those that exist), in seq order. */
export async function eventsAt(
  db: pg.Pool | pg.ClientBase,
  threadId: string,
  seqs: readonly number[],
): Promise<StoredEvent[]> {
  const { rows } = await db.query<EventRow>({
    name: 'rs_events_at',
    text: `SELECT ${EVENT_COLUMNS} FROM run_events WHERE thread_id = $1 AND seq = ANY($2::bigint[]) ORDER BY seq`,
    values: [threadId, seqs],
  });
  return rows.map(toStored);
}

/** `(metadata->'id')` is a non-empty string: the event names its message. */
const NAMED = `COALESCE(json_typeof(e.metadata->'id') = 'string' AND e.metadata->>'id' <> '', false)`;

function anonymousTailsSql(byRun: boolean, byUser: boolean): string {
  const user = byUser ? ` AND e.user_id = $${byRun ? 6 : 5}` : '';
  const chat = `e.thread_id = $1 AND e.run_id = r.run_id AND e.seq <= $2 AND e.event_type = ANY($3::text[])${user}`;
  const anon = `(e.event_type = ANY($4::text[]) AND NOT ${NAMED})`;
  return `
    SELECT r.run_id,
           (SELECT min(e.seq) FROM run_events e
             WHERE ${chat} AND e.seq > COALESCE((
               SELECT e.seq FROM run_events e WHERE ${chat} AND NOT ${anon} ORDER BY e.seq DESC LIMIT 1), 0)
           ) AS first_seq
      FROM runs r
      CROSS JOIN LATERAL (SELECT ${anon} AS anon FROM run_events e WHERE ${chat} ORDER BY e.seq DESC LIMIT 1) l
     WHERE r.thread_id = $1 AND r.first_seq <= $2 AND l.anon${byRun ? ' AND r.run_id = $5' : ''}`;
}

/**
 * The first event, up to `uptoSeq`, of the assistant message `messageId` (its `metadata.id`)
 * of run `runId`: where a message that goes on after a view began really began.
 */
export async function firstOfMessage(
  db: pg.Pool | pg.ClientBase,
  q: ChatStateQuery & { readonly runId: string; readonly messageId: string },
): Promise<StoredEvent | undefined> {
  const user = q.userId === undefined ? '' : ' AND user_id = $6';
  const { rows } = await db.query<EventRow>({
    name: `rs_chat_first_of_message${q.userId === undefined ? '' : '_user'}`,
    text: `SELECT ${EVENT_COLUMNS} FROM run_events
            WHERE thread_id = $1 AND run_id = $2 AND seq <= $3 AND event_type = ANY($4::text[])
              AND json_typeof(metadata->'id') = 'string' AND (metadata->>'id') = $5${user}
            ORDER BY seq LIMIT 1`,
    values: [
      q.threadId,
      q.runId,
      q.uptoSeq,
      ASSISTANT_TYPES,
      q.messageId,
      ...(q.userId === undefined ? [] : [q.userId]),
    ],
  });
  return rows[0] === undefined ? undefined : toStored(rows[0]);
}
