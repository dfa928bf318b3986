/**
 * What the persister tells the rest of the cluster after each commit, on core NATS.
 *
 * - events subject: the newly stored events, client-facing JSON texts separated by
 *   {@link EVENT_SEPARATOR}, each starting with `{"seq":N,`;
 * - receipts subject: `[[event_id, seq, offset], ...]` for every message of the batch,
 *   duplicates included, for PERSISTED acks; an event the store refused is
 *   `[event_id, 0, offset, reason]`.
 */
import type { Msg } from '@nats-io/transport-node';
import { eventJson, type StoredEvent } from '../domain/event.js';
import type { Receipt } from '../domain/receipt.js';

/** A committed event as fan-out sees it: what filters need, and its JSON text, serialised once. */
export interface CommittedEvent {
  readonly seq: number;
  readonly run_id: string;
  readonly category: string;
  readonly event_type: string;
  /** For user-scoped subscriptions (tokens with a `user_id` claim). */
  readonly user_id: string;
  readonly json: string;
}

const SEQ_PREFIX = '{"seq":';

/**
 * Header by which a persister of an earlier version said when it committed an announcement's
 * events. The commit time (epoch ms, for the persisted-to-delivered latency; the clocks of the
 * two nodes must agree) now travels as the announcement's reply subject,
 * `<prefix>.committed.<ms>` (Subjects.committedAt): a message with no headers is parsed by
 * nats-server and nats.js without a header block, and the header decoded per announcement was
 * 16% of what a fan-out node allocated at one event per request. Nothing answers on it.
 */
export const LEGACY_COMMITTED_AT_HEADER = 'Rs-Committed-Ms';

/** The commit time an announcement carries (epoch ms), or undefined. */
export function committedAtMs(msg: Msg, replyPrefix: string): number | undefined {
  const reply = msg.reply;
  const v = reply?.startsWith(replyPrefix)
    ? reply.slice(replyPrefix.length)
    : msg.headers?.get(LEGACY_COMMITTED_AT_HEADER);
  if (!v) return undefined;
  const ms = Number(v);
  return Number.isFinite(ms) ? ms : undefined;
}

/**
 * Between events in an announcement: the RFC 7464 record separator. The producer's JSON
 * text may hold raw newlines (whitespace between tokens), but never a raw 0x1E: JSON
 * allows no such whitespace, and control characters inside strings must be escaped.
 */
export const EVENT_SEPARATOR = '\x1e';

export function encodeEvents(events: readonly StoredEvent[]): string {
  return events.map(eventJson).join(EVENT_SEPARATOR);
}

/**
 * The events as announcement payloads of at most `maxBytes` each (an event larger than
 * that alone goes in a message of its own, which the server will refuse: subscribers
 * then fill the hole from Postgres).
 */
export function chunkEvents(events: readonly StoredEvent[], maxBytes: number): string[] {
  const chunks: string[] = [];
  let lines: string[] = [];
  let bytes = 0;
  for (const e of events) {
    const line = eventJson(e);
    const size = Buffer.byteLength(line) + 1;
    if (lines.length > 0 && bytes + size > maxBytes) {
      chunks.push(lines.join(EVENT_SEPARATOR));
      lines = [];
      bytes = 0;
    }
    lines.push(line);
    bytes += size;
  }
  if (lines.length > 0) chunks.push(lines.join(EVENT_SEPARATOR));
  return chunks;
}

export function decodeEvents(msg: Msg): CommittedEvent[] {
  return msg.string().split(EVENT_SEPARATOR).map(decodeEventHeader);
}

/**
 * Reads the header fields of an {@link eventJson} text without parsing the content: the
 * key order is fixed, ids cannot hold a quote, and the header precedes the content.
 */
export function decodeEventHeader(json: string): CommittedEvent {
  if (!json.startsWith(SEQ_PREFIX)) throw new Error('committed event does not start with its seq');
  const seq = Number(json.slice(SEQ_PREFIX.length, json.indexOf(',', SEQ_PREFIX.length)));
  const between = (key: string, end: string, from = 0): [string, number] => {
    const start = json.indexOf(key, from) + key.length;
    const stop = json.indexOf(end, start);
    return [json.slice(start, stop), stop];
  };
  const [run_id, afterRun] = between(',"run_id":"', '"');
  const [eventType, afterType] = between(',"event_type":', ',"category":"', afterRun);
  const [category, afterCategory] = between(',"category":"', '"', afterType);
  const [user_id] = between(',"user_id":"', '"', afterCategory);
  return { seq, run_id, category, event_type: JSON.parse(eventType) as string, user_id, json };
}

export function encodeReceipts(receipts: readonly Receipt[]): string {
  return JSON.stringify(
    receipts.map((r) =>
      r.rejected === undefined ? [r.event_id, r.seq, r.offset] : [r.event_id, r.seq, r.offset, r.rejected],
    ),
  );
}

export function decodeReceipts(msg: Msg): Receipt[] {
  const raw = JSON.parse(msg.string()) as [string, number, number, string?][];
  return raw.map(([event_id, seq, offset, rejected]) =>
    rejected === undefined ? { event_id, seq, offset } : { event_id, seq, offset, rejected },
  );
}
