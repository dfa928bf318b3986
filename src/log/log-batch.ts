/**
 * How events travel in the JetStream log: a request's events of one thread and run go
 * out together as one message, a JSON array of {@link LogRecord}s in send order. A
 * thread's events keep their request order, so its events are cut into a new message
 * where the run changes, and where the server's max_payload requires. One message per
 * event cost a JetStream round trip, a stored message and an ack per event
 * (docs/benchmarks.md); a message per run-batch costs them once per request.
 *
 * Every event of a message shares its log offset (its stream sequence). Messages written
 * before batching hold a single record object and are still read.
 *
 * `Nats-Msg-Id` names the message's content: `thread:event_id` for a single event (as
 * before), and for several the thread, the first event_id, the count and a hash of all
 * the event_ids, so JetStream drops an identical retry within its window and nothing
 * else. A retry that regroups events is not identical; Postgres drops its duplicates.
 */
import { createHash } from 'node:crypto';
import { decodeLogRecord, type LogRecord } from '../event.js';
import { msgId } from './subjects.js';

export interface LogMessage {
  readonly threadId: string;
  readonly runId: string;
  readonly body: string;
  readonly msgId: string;
  /** Indexes, into the records given, of the events this message carries. */
  readonly indexes: readonly number[];
}

/**
 * Packs records into messages, each of one thread and run, whose bodies stay within
 * `maxBytes` (a record larger than that still gets a message of its own). A thread's
 * records keep their order across its messages: a thread's next record joins the
 * thread's last message only if it is of the same run and fits; messages are listed
 * in the order they were opened, which is the order they must be published in.
 */
export function encodeLogMessages(records: readonly LogRecord[], maxBytes: number): LogMessage[] {
  const open: Draft[] = [];
  const lastOfThread = new Map<string, Draft>();
  for (let i = 0; i < records.length; i++) {
    const r = records[i] as LogRecord;
    const json = JSON.stringify(r);
    // Ids and enum fields are ASCII; content may not be, so count what it really takes.
    const size = Buffer.byteLength(json, 'utf8') + 1;
    let d = lastOfThread.get(r.thread_id);
    if (!d || d.runId !== r.run_id || d.bytes + size > maxBytes) {
      d = { runId: r.run_id, parts: [], indexes: [], bytes: 1 };
      open.push(d);
      lastOfThread.set(r.thread_id, d);
    }
    d.parts.push(json);
    d.indexes.push(i);
    d.bytes += size;
  }
  return open.map((d) => message(records, d.parts, d.indexes));
}

interface Draft {
  readonly runId: string;
  readonly parts: string[];
  readonly indexes: number[];
  /** Body bytes so far: the brackets and each part with its separator. */
  bytes: number;
}

function message(records: readonly LogRecord[], parts: readonly string[], indexes: number[]): LogMessage {
  const first = records[indexes[0] as number] as LogRecord;
  return {
    threadId: first.thread_id,
    runId: first.run_id,
    body: `[${parts.join(',')}]`,
    msgId: indexes.length === 1 ? msgId(first.thread_id, first.event_id) : batchMsgId(records, indexes),
    indexes,
  };
}

function batchMsgId(records: readonly LogRecord[], indexes: readonly number[]): string {
  const hash = createHash('sha256');
  for (const i of indexes) hash.update(`${(records[i] as LogRecord).event_id}\n`);
  const first = records[indexes[0] as number] as LogRecord;
  return `${msgId(first.thread_id, first.event_id)}+${indexes.length}:${hash.digest('base64url').slice(0, 22)}`;
}

/** The records of a log message, each checked as {@link decodeLogRecord} does. */
export function decodeLogMessage(text: string): LogRecord[] {
  if (!text.startsWith('[')) return [decodeLogRecord(JSON.parse(text))];
  const items = JSON.parse(text) as unknown[];
  if (items.length === 0) throw new Error('log message holds no records');
  return items.map(decodeLogRecord);
}
