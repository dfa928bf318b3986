/**
 * What the persister tells the rest of the cluster after each commit, on core NATS.
 *
 * - events subject: the newly stored events, client-facing JSON texts separated by
 *   {@link EVENT_SEPARATOR}, each starting with `{"seq":N,`;
 * - receipts subject: `[[event_id, seq, offset], ...]` for every message of the batch,
 *   duplicates included, for PERSISTED acks; an event the store refused is
 *   `[event_id, 0, offset, reason]`.
 */
import { isUtf8 } from 'node:buffer';
import type { Msg } from '@nats-io/transport-node';
import { CATEGORY_PATTERN, eventJson, MAX_CATEGORY_LENGTH, type StoredEvent } from '../domain/event.js';
import { EVENT_TYPE_PATTERN, ID_PATTERN, MAX_EVENT_TYPE_LENGTH, MAX_ID_LENGTH } from '../domain/ids.js';
import type { Receipt } from '../domain/receipt.js';

/**
 * A committed event as fan-out sees it: what filters need, read from its header, and its JSON
 * text as the persister wrote it, in UTF-8. One object per event on the node, shared by every
 * subscription it goes to (as a `DeliveredEvent`: fanout/core/subscription.ts), so what a
 * transport builds from it once serves them all.
 *
 * The text stays bytes from the NATS payload to the WebSocket frame: decoded to a string per
 * announcement and encoded back per frame, it was the largest share of what fan-out allocated
 * per event. Transports that want a string ({@link json}) get it decoded once.
 */
export class CommittedEvent {
  /** What a transport last built of it for its subscribers, with the subscription id it names (ws/frames.ts). */
  frame: { readonly subId: string; readonly bytes: Buffer } | undefined = undefined;
  /** It is one object for all its subscribers. */
  readonly shared = true as const;
  #text: string | undefined = undefined;
  #owned: CommittedEvent | undefined = undefined;
  constructor(
    readonly seq: number,
    readonly run_id: string,
    readonly category: string,
    readonly event_type: string,
    /** For user-scoped subscriptions (tokens with a `user_id` claim). */
    readonly user_id: string,
    /** {@link eventJson}'s UTF-8: a view of the announcement's payload (a copy of its own, not the socket's). */
    readonly bytes: Buffer,
  ) {}

  /** The JSON text, decoded once. */
  json(): string {
    if (this.#text === undefined) this.#text = this.bytes.toString('utf8');
    return this.#text;
  }

  /**
   * The event with bytes of its own, for keeping past its delivery (a subscription holding it
   * while it catches up counts only its bytes): a view keeps its whole announcement alive, up
   * to max_payload, and a small copy shares one of Node's 8 KiB pool slabs with whatever was
   * allocated beside it (other threads' events), which it keeps alive too. One copy per event,
   * however many subscriptions hold it.
   */
  owned(): CommittedEvent {
    const b = this.bytes;
    if (b.byteOffset === 0 && b.length === b.buffer.byteLength) return this;
    if (this.#owned === undefined) {
      const copy = Buffer.allocUnsafeSlow(b.length);
      b.copy(copy);
      this.#owned = new CommittedEvent(
        this.seq,
        this.run_id,
        this.category,
        this.event_type,
        this.user_id,
        copy,
      );
    }
    return this.#owned;
  }
}

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
 * The events as announcement payloads of at most `maxBytes` each, each event's bytes
 * {@link eventJson}'s UTF-8 and the events separated by {@link EVENT_SEPARATOR} (an event larger
 * than that alone goes in a message of its own, which the server will refuse: subscribers then
 * fill the hole from Postgres). Greedy: a new payload only where the next event would not fit.
 *
 * Each event is written into one reused buffer, and each payload copied out of it once:
 * joined as a string and then encoded by nats.js, a payload of one event (the common case at
 * token rates) cost 3.5 µs, 1.0 µs so (0.7 against 0.8 µs an event for payloads of 100).
 */
export function chunkEvents(events: readonly StoredEvent[], maxBytes: number): Uint8Array[] {
  const chunks: Uint8Array[] = [];
  // The payload being written is scratch[0, at); the event being written starts at `start`.
  let at = 0;
  for (const e of events) {
    const start = at;
    if (start > 0) at = put(at, EVENT_SEPARATOR, 'latin1');
    // One write of the whole text: a write per part costs more in calls than it saves.
    at = put(at, eventJson(e), 'utf8');
    if (start > 0 && at > maxBytes) {
      // It does not fit after the others: they go out, and it starts the next payload.
      chunks.push(Buffer.from(scratch.subarray(0, start)));
      scratch.copyWithin(0, start + 1, at);
      at -= start + 1;
    }
  }
  if (at > 0) chunks.push(Buffer.from(scratch.subarray(0, at)));
  // Grown for payloads up to the limit, it is kept: brought back to its first size after each
  // call, a batch of 1,000 events grew it anew each time, 64 KiB to 512 KiB, a fifth of what
  // the persister allocated. Grown further by an event larger than the limit, it is not kept.
  if (scratch.length > SCRATCH_KEPT_BYTES + 2 * maxBytes) scratch = Buffer.allocUnsafe(SCRATCH_KEPT_BYTES);
  return chunks;
}

/** The size {@link chunkEvents}'s buffer starts at, and is brought back to past twice the limit. */
const SCRATCH_KEPT_BYTES = 64 * 1024;
/** Where {@link chunkEvents} writes; grown for a larger payload, and reused. */
let scratch = Buffer.allocUnsafe(SCRATCH_KEPT_BYTES);

/** Writes `text` at `at` in `scratch` (grown first when it may not fit); returns the end. */
function put(at: number, text: string, encoding: 'latin1' | 'utf8'): number {
  // At most 3 bytes of UTF-8 per UTF-16 unit (a surrogate pair is 4 bytes for 2 units).
  const most = encoding === 'latin1' ? text.length : text.length * 3;
  if (at + most > scratch.length) {
    const grown = Buffer.allocUnsafe(Math.max(scratch.length * 2, at + most));
    scratch.copy(grown, 0, 0, at);
    scratch = grown;
  }
  return at + scratch.write(text, at, encoding);
}

/**
 * The events of an announcement on thread `threadId`'s subject, their bytes in one copy of its
 * payload (the socket's buffer is not kept). Refused: a payload that is not UTF-8 (its bytes
 * go into WebSocket text frames as they are, and a client fails the connection on invalid
 * UTF-8) and events of another thread.
 */
export function decodeEvents(msg: Msg, threadId: string): CommittedEvent[] {
  if (!isUtf8(msg.data)) throw new Error('announcement is not UTF-8');
  return decodeEventPayload(Buffer.from(msg.data), threadId);
}

const SEPARATOR_BYTE = 0x1e;

/** The events of an announcement's payload of thread `threadId`, which their bytes stay views of. */
export function decodeEventPayload(payload: Buffer, threadId: string): CommittedEvent[] {
  const events: CommittedEvent[] = [];
  let start = 0;
  for (;;) {
    const at = payload.indexOf(SEPARATOR_BYTE, start);
    const end = at < 0 ? payload.length : at;
    events.push(decodeEventHeader(payload, start, end, threadId));
    if (at < 0) return events;
    start = at + 1;
  }
}

/**
 * Reads the header fields of an {@link eventJson} text of thread `threadId` in `b[start, end)`
 * without reading its content: the keys come first, in a fixed order, and every value but
 * `event_type` is digits or an id, which holds no quote or escape. Anything else is refused,
 * as are values ingest would not have let in (ids outside `[A-Za-z0-9_-]{1,128}`, a category
 * or event type off its pattern): a filter or a transport's frame (an SSE `event:` line) must
 * not see what the event's text does not say.
 */
export function decodeEventHeader(b: Buffer, start: number, end: number, threadId: string): CommittedEvent {
  const r = new HeaderReader(b, start, end);
  r.expect(SEQ_KEY);
  const seq = r.digits();
  r.expect(OFFSET_KEY);
  r.digits();
  r.expect(THREAD_KEY);
  if (r.id(false) !== threadId) throw r.bad();
  r.expect(RUN_KEY);
  const runId = r.id(false);
  r.expect(EVENT_ID_KEY);
  r.id(false);
  r.expect(EVENT_TYPE_KEY);
  const eventType = r.jsonString();
  r.expect(CATEGORY_KEY);
  const category = r.category();
  r.expect(USER_KEY);
  const userId = r.id(true);
  r.expect(CREATED_KEY);
  return new CommittedEvent(seq, runId, category, eventType, userId, b.subarray(start, end));
}

const key = (text: string): Buffer => Buffer.from(text, 'latin1');
const SEQ_KEY = key('{"seq":');
const OFFSET_KEY = key(',"offset":');
const THREAD_KEY = key(',"thread_id":"');
const RUN_KEY = key('","run_id":"');
const EVENT_ID_KEY = key('","event_id":"');
const EVENT_TYPE_KEY = key('","event_type":');
const CATEGORY_KEY = key(',"category":"');
const USER_KEY = key('","user_id":"');
const CREATED_KEY = key('","created_at":"');
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** A cursor over an event's header bytes; any mismatch throws. */
class HeaderReader {
  at: number;
  constructor(
    readonly b: Buffer,
    readonly start: number,
    readonly end: number,
  ) {
    this.at = start;
  }

  expect(k: Buffer): void {
    const { b, at } = this;
    if (at + k.length > this.end) throw this.bad();
    for (let i = 0; i < k.length; i++) if (b[at + i] !== k[i]) throw this.bad();
    this.at = at + k.length;
  }

  /** A non-negative integer. */
  digits(): number {
    const { b, end } = this;
    let n = 0;
    let i = this.at;
    for (; i < end; i++) {
      const c = b[i] as number;
      if (c < 0x30 || c > 0x39) break;
      n = n * 10 + (c - 0x30);
    }
    if (i === this.at) throw this.bad();
    this.at = i;
    return n;
  }

  /** An id (domain/ids.ts ID_PATTERN, or empty if `empty`), which a quote ends; the cursor is left on the quote. */
  id(empty: boolean): string {
    return this.#token(ID_BYTE, empty ? 0 : 1, MAX_ID_LENGTH);
  }

  /** A category (domain/event.ts CATEGORY_PATTERN), which a quote ends. */
  category(): string {
    if (!CATEGORY_FIRST_BYTE[this.b[this.at] as number]) throw this.bad();
    return this.#token(CATEGORY_BYTE, 1, MAX_CATEGORY_LENGTH);
  }

  #token(allowed: readonly boolean[], min: number, max: number): string {
    const { b, end } = this;
    let i = this.at;
    while (i < end && allowed[b[i] as number]) i++;
    const length = i - this.at;
    if (i >= end || b[i] !== QUOTE || length < min || length > max) throw this.bad();
    const text = b.toString('latin1', this.at, i);
    this.at = i;
    return text;
  }

  /** An event type: a JSON string of printable ASCII; the cursor is left past its closing quote. */
  jsonString(): string {
    const { b, end } = this;
    if (b[this.at] !== QUOTE) throw this.bad();
    let escaped = false;
    let i = this.at + 1;
    for (; i < end; i++) {
      const c = b[i] as number;
      if (c === BACKSLASH) {
        escaped = true;
        i++;
      } else if (c === QUOTE) break;
      else if (!EVENT_TYPE_BYTE[c]) throw this.bad();
    }
    if (i >= end) throw this.bad();
    const text = escaped
      ? (JSON.parse(b.toString('latin1', this.at, i + 1)) as string)
      : b.toString('latin1', this.at + 1, i);
    // Unescaped, its bytes were checked above; escaped, what they stand for is checked here.
    if (
      (escaped || text.length === 0 || text.length > MAX_EVENT_TYPE_LENGTH) &&
      !EVENT_TYPE_PATTERN.test(text)
    )
      throw this.bad();
    this.at = i + 1;
    return text;
  }

  bad(): Error {
    return new Error(`committed event header unreadable at byte ${this.at - this.start}`);
  }
}

/** Each byte's verdict by `ok`, read as the one-character text it is in latin1. */
const byteTable = (ok: (c: string) => boolean): readonly boolean[] =>
  Array.from({ length: 256 }, (_, c) => ok(String.fromCharCode(c)));
/** The bytes the domain's patterns allow: in an id, an event type, and a category's first and later characters. */
const ID_BYTE = byteTable((c) => ID_PATTERN.test(c));
const EVENT_TYPE_BYTE = byteTable((c) => EVENT_TYPE_PATTERN.test(c));
const CATEGORY_FIRST_BYTE = byteTable((c) => CATEGORY_PATTERN.test(c));
const CATEGORY_BYTE = byteTable((c) => CATEGORY_PATTERN.test(`a${c}`));

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
