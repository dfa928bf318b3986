/**
 * How events travel in the JetStream log: a request's events of one thread and run go
 * out together as one message. A thread's events keep their request order, so its events
 * are cut into a new message where the run changes, and where the server's max_payload
 * requires. One message per event cost a JetStream round trip, a stored message and an
 * ack per event (docs/benchmarks.md); a message per run-batch costs them once per request.
 *
 * A message's body is a header line and the events' JSON payloads, raw:
 *
 *     {"v":2,"thread_id":"t","run_id":"r","events":[{"event_id":..,"event_type":..,"category":..,
 *      "user_id":..,"created_at":..,"content_length":N,"metadata_length":M},...]}\n
 *     <content of event 0><metadata of event 0><content of event 1>...
 *
 * Lengths count UTF-16 code units of the decoded text. The payloads are the producer's JSON
 * text as it was validated, carried as is: not escaped into a JSON string (which doubles a
 * `\\` or a `"`: two fields at the documented limit did not fit max_payload), and not
 * parsed again. The header is JSON.stringify output, which holds no raw line break.
 *
 * Every event of a message shares its log offset (its stream sequence). Messages written
 * by earlier versions, a JSON array of {@link LogRecord}s or a single record object, are
 * still read.
 *
 * A message of a request that nobody waits on past the log (ack level ACCEPTED) says so in its
 * header, `"receipts":false` right after the version: the persister then publishes no commit
 * receipts for it (they are only for PERSISTED acks, and at one event per request they were a
 * NATS message per event that no one read). The mark is negative so that every message without
 * it (a PERSISTED request's, or one written by an earlier version or into the legacy stream) is
 * answered as before; it is in the body rather than a NATS header so ingest builds no header
 * and the persister parses none, and a persister of the previous version ignores the key.
 *
 * `Nats-Msg-Id` names the message's content: `thread:run:event_id` for a single event, and
 * for several the thread, the run, the first event_id, the count and a hash of all the
 * event_ids, so JetStream drops an identical retry within its window and nothing else. A
 * retry that regroups events is not identical; Postgres drops its duplicates.
 */
import crypto from 'node:crypto';
import { decodeLogRecord, type LogRecord } from '../domain/event.js';
import { InvalidArgumentError } from '../errors.js';
import { msgId } from './subjects.js';

/** Bytes of a log message other than its events' payloads, at most: header, ids, subject, headers. */
export const LOG_MESSAGE_OVERHEAD_BYTES = 1024;
/**
 * Header bytes of one event in a message, at most: ids of 128 characters, a 64-character type
 * (escaped, up to twice that), a 64-character category name, its times and the keys.
 */
export const LOG_EVENT_OVERHEAD_BYTES = 768;

export interface LogMessage {
  readonly threadId: string;
  readonly runId: string;
  readonly body: string;
  readonly msgId: string;
  /** Indexes, into the records given, of the events this message carries. */
  readonly indexes: readonly number[];
}

/** What a message's header says beyond its events. */
export interface LogMessageOptions {
  /**
   * Whether the persister publishes commit receipts for the message's events (for a
   * PERSISTED ack); default true. False marks the message `"receipts":false`.
   */
  readonly receipts?: boolean;
}

/** The records of a log message, and whether someone waits on their commit receipts. */
export interface DecodedLogMessage {
  readonly records: LogRecord[];
  readonly receipts: boolean;
}

/**
 * Packs records into messages, each of one thread and run, whose bodies stay within
 * `maxBytes`. A thread's records keep their order across its messages: a thread's next
 * record joins the thread's last message only if it is of the same run and fits; messages
 * are listed in the order they were opened, which is the order they must be published in.
 * @throws InvalidArgumentError naming the event when one record alone cannot fit.
 */
export function encodeLogMessages(
  records: readonly LogRecord[],
  maxBytes: number,
  options: LogMessageOptions = {},
): LogMessage[] {
  const prefix = options.receipts === false ? NO_RECEIPTS_PREFIX : V2_PREFIX;
  if (records.length === 1) {
    // One event per request (token streams): no grouping to do, so no drafts, map or joins.
    const r = records[0] as LogRecord;
    const entry = entryOf(r);
    checkFits(r, 0, entrySize(r, entry), maxBytes);
    return [
      {
        threadId: r.thread_id,
        runId: r.run_id,
        body: `${prefix}"thread_id":"${r.thread_id}","run_id":"${r.run_id}","events":[${entry}]}\n${r.content_json}${r.metadata_json}`,
        msgId: msgId(r.thread_id, r.run_id, r.event_id),
        indexes: FIRST_ONLY,
      },
    ];
  }
  const open: Draft[] = [];
  const lastOfThread = new Map<string, Draft>();
  for (let i = 0; i < records.length; i++) {
    const r = records[i] as LogRecord;
    const entry = entryOf(r);
    const size = entrySize(r, entry);
    checkFits(r, i, size, maxBytes);
    let d = lastOfThread.get(r.thread_id);
    if (!d || d.runId !== r.run_id || d.bytes + size > maxBytes) {
      d = { runId: r.run_id, entries: [], payloads: [], indexes: [], bytes: headerBytes(r) };
      open.push(d);
      lastOfThread.set(r.thread_id, d);
    }
    d.entries.push(entry);
    d.payloads.push(r.content_json, r.metadata_json);
    d.indexes.push(i);
    d.bytes += size;
  }
  return open.map((d) => message(records, d, prefix));
}

const FIRST_ONLY: readonly number[] = Object.freeze([0]);

/**
 * A record's entry in its message's header: the text `JSON.stringify` makes of it, written
 * directly (an object and its serialisation per event were 5% of ingest's time at 100 events
 * a request). Ids, categories and ISO times need no escaping (ingest validated them); the
 * event type and the producer's time text are escaped.
 */
export function entryOf(r: LogRecord): string {
  const text =
    r.created_at_text === undefined ? '' : `,"created_at_text":${JSON.stringify(r.created_at_text)}`;
  return (
    `{"event_id":"${r.event_id}","event_type":${JSON.stringify(r.event_type)},"category":"${r.category}"` +
    `,"user_id":"${r.user_id}","created_at":"${r.created_at}"${text}` +
    `,"content_length":${r.content_json.length},"metadata_length":${r.metadata_json.length}}`
  );
}

/** The body bytes a record takes: its entry, a comma, and its payloads. */
function entrySize(r: LogRecord, entry: string): number {
  // Ids and enum fields are ASCII; payloads may not be, so count what they really take.
  return (
    entry.length + 1 + Buffer.byteLength(r.content_json, 'utf8') + Buffer.byteLength(r.metadata_json, 'utf8')
  );
}

/** @throws InvalidArgumentError naming `events[i]` when the record alone cannot fit a message. */
function checkFits(r: LogRecord, i: number, size: number, maxBytes: number): void {
  if (size + headerBytes(r) <= maxBytes) return;
  throw new InvalidArgumentError(
    `events[${i}]`,
    `takes ${size + headerBytes(r)} bytes in the log, which holds at most ${maxBytes} per message ` +
      "(the NATS server's max_payload); send smaller content_json / metadata_json",
  );
}

/** The bytes of a message's header around its events' entries (`"receipts":false,` included). */
function headerBytes(r: LogRecord): number {
  return 80 + r.thread_id.length + r.run_id.length;
}

interface Draft {
  readonly runId: string;
  readonly entries: string[];
  readonly payloads: string[];
  readonly indexes: number[];
  /** Body bytes so far. */
  bytes: number;
}

function message(records: readonly LogRecord[], d: Draft, prefix: string): LogMessage {
  const first = records[d.indexes[0] as number] as LogRecord;
  const head = `${prefix}"thread_id":"${first.thread_id}","run_id":"${first.run_id}","events":[${d.entries.join(',')}]}`;
  return {
    threadId: first.thread_id,
    runId: first.run_id,
    body: `${head}\n${d.payloads.join('')}`,
    msgId:
      d.indexes.length === 1
        ? msgId(first.thread_id, first.run_id, first.event_id)
        : batchMsgId(records, d.indexes),
    indexes: d.indexes,
  };
}

/**
 * The `Nats-Msg-Id` of a message merged from several ({@link mergeLogBodies}): the first one's,
 * the count and a hash of all of theirs, so an identical merge is a duplicate and nothing else.
 */
export function mergedMsgId(msgIds: readonly string[]): string {
  let lines = '';
  for (const id of msgIds) lines += `${id}\n`;
  return `${msgIds[0] as string}&${msgIds.length}:${sha256(lines).slice(0, 22)}`;
}

function batchMsgId(records: readonly LogRecord[], indexes: readonly number[]): string {
  let lines = '';
  for (const i of indexes) lines += `${(records[i] as LogRecord).event_id}\n`;
  const first = records[indexes[0] as number] as LogRecord;
  return `${msgId(first.thread_id, first.run_id, first.event_id)}+${indexes.length}:${sha256(lines).slice(0, 22)}`;
}

/**
 * SHA-256 of a text, base64url. One-shot `crypto.hash` (Node 20.12 and later) costs half of a
 * `createHash` object fed line by line (3.2 against 6.3 µs for three ids), with the same digest.
 */
const sha256: (text: string) => string =
  typeof crypto.hash === 'function'
    ? (text) => crypto.hash('sha256', text, 'base64url')
    : (text) => crypto.createHash('sha256').update(text).digest('base64url');

/**
 * One log message carrying, in order, the events of several messages of one thread and run
 * (bodies {@link encodeLogMessages} wrote): the body their records would have had if they had
 * been encoded together. It asks for commit receipts if any of them did (a receipt nobody
 * waits for costs a NATS message; a missing one would hold a PERSISTED ack to its deadline).
 * The caller keeps the result within the server's max_payload.
 */
export function mergeLogBodies(bodies: readonly string[]): string {
  let receipts = false;
  let ids = '';
  const entries: string[] = new Array(bodies.length);
  const payloads: string[] = new Array(bodies.length);
  for (let i = 0; i < bodies.length; i++) {
    const body = bodies[i] as string;
    const marked = body.startsWith(NO_RECEIPTS_PREFIX);
    if (!marked) receipts = true;
    // Ids are [A-Za-z0-9_-]: the first `"events":[` is the key, and the header ends in `]}\n`.
    const open = body.indexOf(EVENTS_KEY) + EVENTS_KEY.length;
    const newline = body.indexOf('\n');
    if (i === 0) ids = body.slice((marked ? NO_RECEIPTS_PREFIX : V2_PREFIX).length, open);
    entries[i] = body.slice(open, newline - 2);
    payloads[i] = body.slice(newline + 1);
  }
  return `${receipts ? V2_PREFIX : NO_RECEIPTS_PREFIX}${ids}${entries.join(',')}]}\n${payloads.join('')}`;
}

const EVENTS_KEY = '"events":[';
const V2_PREFIX = '{"v":2,';
/** A v2 header marked as wanting no receipts; an older reader's JSON.parse ignores the key. */
const NO_RECEIPTS_PREFIX = '{"v":2,"receipts":false,';

interface V2Header {
  readonly receipts?: unknown;
  readonly thread_id: unknown;
  readonly run_id: unknown;
  readonly events: readonly Record<string, unknown>[];
}

/**
 * The records of a log message, each checked as {@link decodeLogRecord} does (a message put
 * on the log by anything but ingest cannot make Postgres refuse a batch).
 */
export function decodeLogMessage(text: string): LogRecord[] {
  return readLogMessage(text).records;
}

/**
 * A log message's records (see {@link decodeLogMessage}) and whether its commit receipts are
 * wanted: true unless the message is marked `"receipts":false` (see the file comment).
 */
export function readLogMessage(text: string): DecodedLogMessage {
  if (text.startsWith(V2_PREFIX)) return decodeV2(text);
  if (!text.startsWith('[')) return { records: [decodeLogRecord(JSON.parse(text))], receipts: true };
  const items = JSON.parse(text) as unknown[];
  if (items.length === 0) throw new Error('log message holds no records');
  return { records: items.map((item) => decodeLogRecord(item)), receipts: true };
}

function decodeV2(text: string): DecodedLogMessage {
  const newline = text.indexOf('\n');
  if (newline < 0) throw new Error('log message has no end of header');
  const h = JSON.parse(text.slice(0, newline)) as V2Header;
  if (!Array.isArray(h.events) || h.events.length === 0) throw new Error('log message holds no records');
  let at = newline + 1;
  const take = (length: unknown, field: string): string => {
    if (
      typeof length !== 'number' ||
      !Number.isSafeInteger(length) ||
      length < 0 ||
      at + length > text.length
    ) {
      throw new Error(`log record has a bad ${field}`);
    }
    const part = text.slice(at, at + length);
    at += length;
    return part;
  };
  let previous: LogRecord | undefined;
  const records = h.events.map((e) => {
    const fields: Record<string, unknown> = {
      thread_id: h.thread_id,
      run_id: h.run_id,
      event_id: e.event_id,
      event_type: e.event_type,
      category: e.category,
      user_id: e.user_id,
      created_at: e.created_at,
      content_json: take(e.content_length, 'content_length'),
      metadata_json: take(e.metadata_length, 'metadata_length'),
    };
    // Added after the literal, not spread into it (domain/event.ts storedEvent says why).
    if (e.created_at_text !== undefined) fields.created_at_text = e.created_at_text;
    previous = decodeLogRecord(fields, previous);
    return previous;
  });
  if (at !== text.length) throw new Error('log message has bytes past its last record');
  return { records, receipts: h.receipts !== false };
}
