/**
 * Ingest's own reading of a publish request and writing of its answer, for the usual message
 * only. proto-loader decodes a request to protobufjs message objects and copies them into
 * plain ones (`toObject`), and encodes an answer by building message objects from the plain
 * ones first (`fromObject`, a `Long` per offset): about 1 µs an event each way, a tenth of
 * ingest's CPU at 100 events per request (docs/benchmarks.md). Here the bytes become the plain
 * objects, and the plain objects bytes, directly.
 *
 * Only what producers send is taken: known fields with their wire types, strings that decode
 * without a U+FFFD, known enum values, numbers below 2^49, tags, lengths and enums in at most 5
 * bytes. Anything else (an unknown field, a truncated message, a string that may not be UTF-8,
 * a negative time, an overlong varint) is left to the
 * contract's decoder ({@link decodePublishRequest} returns undefined), so it is decoded, or
 * refused by name, exactly as before. A decoded request equals the contract decoder's output
 * (test/ingest-wire.test.ts compares them on generated and mangled messages).
 */

import type { Event__Output } from '../gen/runstream/v1/Event.js';
import type { EventAck } from '../gen/runstream/v1/EventAck.js';
import type { PublishRequest__Output } from '../gen/runstream/v1/PublishRequest.js';
import type { PublishResponse } from '../gen/runstream/v1/PublishResponse.js';

/** Thrown inside the decoder where the message is not the usual kind; never escapes it. */
const UNUSUAL: unique symbol = Symbol('unusual request');

function unusual(): never {
  throw UNUSUAL;
}

const CATEGORIES = ['CATEGORY_UNSPECIFIED', 'MESSAGE', 'TRACE', 'LIFECYCLE'] as const;
const ACK_LEVELS = ['ACK_LEVEL_UNSPECIFIED', 'ACCEPTED', 'PERSISTED'] as const;

/** Wire types. */
const VARINT = 0;
const LENGTH = 2;

/** A read position in a message's bytes, up to `end`. */
interface Cursor {
  readonly buf: Buffer;
  pos: number;
  end: number;
}

/**
 * A 64-bit varint (seq, offset, seconds) of at most 7 bytes: below 2^49, exact as a number, as
 * protobufjs reads it; else unusual.
 */
function varint64(c: Cursor): number {
  return varintOf(c, 7);
}

/**
 * A 32-bit varint (a tag, a length, an enum, nanos) of at most 5 bytes and below 2^32, else
 * unusual: protobufjs reads one of more bytes as 10, skipping the rest unread, so a longer one
 * (valid, if wasteful) would be read here otherwise than by the contract's decoder.
 */
function varint(c: Cursor): number {
  const value = varintOf(c, 5);
  if (value > 0xffffffff) throw UNUSUAL;
  return value;
}

function varintOf(c: Cursor, maxBytes: number): number {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < maxBytes; i++) {
    if (c.pos >= c.end) throw UNUSUAL;
    const b = c.buf[c.pos++] as number;
    value += (b & 0x7f) * scale;
    if (b < 0x80) return value;
    scale *= 128;
  }
  throw UNUSUAL;
}

/** The end of a length-delimited field whose length comes next; unusual past the message. */
function span(c: Cursor): number {
  const length = varint(c);
  const end = c.pos + length;
  if (end > c.end) throw UNUSUAL;
  return end;
}

/** A string field's text; unusual when it may not be UTF-8 (the contract's decoder names it). */
function text(c: Cursor, wireType: number): string {
  if (wireType !== LENGTH) throw UNUSUAL;
  return textTo(c, span(c));
}

/** A varint field's value (64 bits if `long`); unusual under another wire type. */
function number(c: Cursor, wireType: number, long = false): number {
  if (wireType !== VARINT) throw UNUSUAL;
  return long ? varint64(c) : varint(c);
}

function textTo(c: Cursor, end: number): string {
  const s = c.buf.utf8Slice(c.pos, end);
  c.pos = end;
  if (s.indexOf('\uFFFD') !== -1) throw UNUSUAL;
  return s;
}

/** The last text read of one field of a request's events, where its bytes are. */
interface Slot {
  start: number;
  length: number;
  value: string;
}

/** Fields compared with the previous event's before being decoded (ids and types: short). */
const REUSED_MAX_BYTES = 256;

/**
 * {@link text}, reusing the previous event's string when the bytes are the same: the events of
 * a request mostly share their thread, run, type, user and metadata, and a string made from
 * bytes costs ~70 ns where comparing a short run of bytes costs a few.
 */
function reused(c: Cursor, wireType: number, slot: Slot): string {
  if (wireType !== LENGTH) throw UNUSUAL;
  const end = span(c);
  const start = c.pos;
  const length = end - start;
  if (length === slot.length && length <= REUSED_MAX_BYTES) {
    const buf = c.buf;
    let i = 0;
    while (i < length && buf[start + i] === buf[slot.start + i]) i++;
    if (i === length) {
      c.pos = end;
      return slot.value;
    }
  }
  const s = textTo(c, end);
  slot.start = start;
  slot.length = length;
  slot.value = s;
  return s;
}

/** One slot per reused field of a request's events. */
interface Slots {
  readonly thread: Slot;
  readonly run: Slot;
  readonly type: Slot;
  readonly metadata: Slot;
  readonly user: Slot;
  readonly categoryName: Slot;
}

const slot = (): Slot => ({ start: 0, length: -1, value: '' });

function timestamp(c: Cursor, wireType: number): { seconds: number; nanos: number } {
  if (wireType !== LENGTH) throw UNUSUAL;
  const end = span(c);
  const outer = c.end;
  c.end = end;
  let seconds = 0;
  let nanos = 0;
  while (c.pos < end) {
    const tag = varint(c);
    if (tag === ((1 << 3) | VARINT)) seconds = varint64(c);
    else if (tag === ((2 << 3) | VARINT)) {
      nanos = varint(c);
      if (nanos > 0x7fffffff) throw UNUSUAL; // an int32 read as a negative number
    } else throw UNUSUAL;
  }
  c.end = outer;
  return { seconds, nanos };
}

function event(c: Cursor, slots: Slots): Event__Output {
  const end = span(c);
  const outer = c.end;
  c.end = end;
  const e: Event__Output = {
    thread_id: '',
    run_id: '',
    event_type: '',
    category: 'CATEGORY_UNSPECIFIED',
    content_json: '',
    metadata_json: '',
    event_id: '',
    created_at: null,
    user_id: '',
    category_name: '',
    created_at_text: '',
    seq: 0,
    offset: 0,
  };
  while (c.pos < end) {
    const tag = varint(c);
    const wireType = tag & 7;
    switch (tag >>> 3) {
      case 1:
        e.thread_id = reused(c, wireType, slots.thread);
        break;
      case 2:
        e.run_id = reused(c, wireType, slots.run);
        break;
      case 3:
        e.event_type = reused(c, wireType, slots.type);
        break;
      case 4:
        e.category = CATEGORIES[number(c, wireType)] ?? unusual();
        break;
      case 5:
        e.content_json = text(c, wireType);
        break;
      case 6:
        e.metadata_json = reused(c, wireType, slots.metadata);
        break;
      case 7:
        e.event_id = text(c, wireType);
        break;
      case 8:
        e.created_at = timestamp(c, wireType);
        break;
      case 9:
        e.user_id = reused(c, wireType, slots.user);
        break;
      case 10:
        e.category_name = reused(c, wireType, slots.categoryName);
        break;
      case 11:
        e.created_at_text = text(c, wireType);
        break;
      case 16:
        e.seq = number(c, wireType, true);
        break;
      case 17:
        e.offset = number(c, wireType, true);
        break;
      default:
        throw UNUSUAL;
    }
  }
  c.end = outer;
  return e;
}

/**
 * A `PublishRequest` as proto-loader's deserializer would give it (the broker's options:
 * defaults filled, enums as names, 64-bit numbers as numbers), or undefined when the message
 * is not the usual kind and the contract's decoder must take it.
 */
export function decodePublishRequest(bytes: Buffer): PublishRequest__Output | undefined {
  const c: Cursor = { buf: bytes, pos: 0, end: bytes.length };
  const events: Event__Output[] = [];
  let ack: PublishRequest__Output['ack'] = 'ACK_LEVEL_UNSPECIFIED';
  const slots: Slots = {
    thread: slot(),
    run: slot(),
    type: slot(),
    metadata: slot(),
    user: slot(),
    categoryName: slot(),
  };
  try {
    while (c.pos < c.end) {
      const tag = varint(c);
      if (tag === ((1 << 3) | LENGTH)) events.push(event(c, slots));
      else if (tag === ((2 << 3) | VARINT)) ack = ACK_LEVELS[varint(c)] ?? unusual();
      else throw UNUSUAL;
    }
  } catch (err) {
    if (err === UNUSUAL) return undefined;
    throw err;
  }
  return { events, ack };
}

/** Bytes of `n` as a varint. */
function varintSize(n: number): number {
  let size = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

function writeVarint(buf: Buffer, pos: number, n: number): number {
  while (n >= 128) {
    buf[pos++] = (n % 128) | 0x80;
    n = Math.floor(n / 128);
  }
  buf[pos++] = n;
  return pos;
}

/** A whole non-negative number that fits a double exactly, as uint64 fields here hold. */
function isCount(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
}

/** An EventAck's fields as written, or undefined when one is not of the usual kind. */
function ackSize(a: EventAck): number | undefined {
  const { event_id: id = '', duplicate = false, seq = 0, offset = 0, rejected = '' } = a;
  if (typeof id !== 'string' || typeof duplicate !== 'boolean' || typeof rejected !== 'string')
    return undefined;
  if (!isCount(seq) || !isCount(offset)) return undefined;
  let size = 0;
  if (id !== '') {
    const n = Buffer.byteLength(id, 'utf8');
    size += 1 + varintSize(n) + n;
  }
  if (duplicate) size += 2;
  if (seq !== 0) size += 1 + varintSize(seq);
  if (offset !== 0) size += 1 + varintSize(offset);
  if (rejected !== '') {
    const n = Buffer.byteLength(rejected, 'utf8');
    size += 1 + varintSize(n) + n;
  }
  return size;
}

function writeText(buf: Buffer, pos: number, tag: number, s: string): number {
  buf[pos++] = tag;
  const n = Buffer.byteLength(s, 'utf8');
  pos = writeVarint(buf, pos, n);
  return pos + buf.utf8Write(s, pos, n);
}

/**
 * A `PublishResponse` of acks alone in proto3's wire format, fields at their defaults left
 * out; undefined for any other answer (a control message, a value of another type), which
 * the contract's serializer writes.
 */
export function encodePublishResponse(r: PublishResponse): Buffer | undefined {
  if (r.control != null) return undefined;
  const acks = r.acks ?? [];
  const sizes: number[] = new Array(acks.length);
  let total = 0;
  for (let i = 0; i < acks.length; i++) {
    const size = ackSize(acks[i] as EventAck);
    if (size === undefined) return undefined;
    sizes[i] = size;
    total += 1 + varintSize(size) + size;
  }
  const buf = Buffer.allocUnsafe(total);
  let pos = 0;
  for (let i = 0; i < acks.length; i++) {
    const a = acks[i] as EventAck;
    buf[pos++] = (1 << 3) | LENGTH;
    pos = writeVarint(buf, pos, sizes[i] as number);
    if (a.event_id) pos = writeText(buf, pos, (1 << 3) | LENGTH, a.event_id);
    if (a.duplicate) {
      buf[pos++] = (2 << 3) | VARINT;
      buf[pos++] = 1;
    }
    if (a.seq) {
      buf[pos++] = (3 << 3) | VARINT;
      pos = writeVarint(buf, pos, a.seq as number);
    }
    if (a.offset) {
      buf[pos++] = (4 << 3) | VARINT;
      pos = writeVarint(buf, pos, a.offset as number);
    }
    if (a.rejected) pos = writeText(buf, pos, (5 << 3) | LENGTH, a.rejected);
  }
  return buf;
}

declare module 'node:buffer' {
  interface Buffer {
    /** Node's own UTF-8 encoder into a range, without `write`'s argument checks. */
    utf8Write(s: string, offset: number, length: number): number;
  }
}
