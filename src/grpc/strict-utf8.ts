/**
 * Request messages whose strings must be UTF-8, as proto3 requires. protobufjs decodes a
 * string field's bytes leniently: a byte sequence that is not UTF-8 (a client that encoded a
 * lone UTF-16 surrogate, a bit flipped) comes out as U+FFFD, and the broker would store an
 * event other than the one sent and acknowledge it. {@link StrictReader} refuses such a
 * string instead; {@link notUtf8Field} names the field, for the refusal.
 */
import { isUtf8 } from 'node:buffer';
import protobuf from 'protobufjs';
import { PROTO_DIR, PROTO_FILES } from '../proto.js';

/** Thrown by {@link StrictReader} where a string field's bytes are not UTF-8. */
export class NotUtf8Error extends Error {
  override name = 'NotUtf8Error';
}

/**
 * A protobufjs reader whose strings are checked. Only a string that decoded with a U+FFFD in
 * it is checked against its bytes (a U+FFFD sent as such is UTF-8, and stays): the common
 * string, without one, costs one search that V8 ends at once in a Latin-1 string.
 */
export class StrictReader extends protobuf.BufferReader {
  override string(): string {
    const length = this.uint32();
    const start = this.pos;
    // As protobufjs reads one: a length past the message's end takes what is there.
    const end = Math.min(start + length, this.len);
    this.pos = end;
    const buf = this.buf as Buffer;
    const text = buf.utf8Slice(start, end);
    if (text.indexOf('\uFFFD') !== -1 && !isUtf8(buf.subarray(start, end))) {
      throw new NotUtf8Error('a string field is not valid UTF-8');
    }
    return text;
  }
}

declare module 'node:buffer' {
  interface Buffer {
    /** Node's own UTF-8 decoder of a range, without `toString`'s argument checks. */
    utf8Slice(start: number, end: number): string;
  }
}

let root: protobuf.Root | undefined;

/** The wire contract as protobufjs types, loaded on first use (a refusal's path only). */
function contract(): protobuf.Root {
  if (!root) {
    const r = new protobuf.Root();
    r.resolvePath = (_origin, target) =>
      target.startsWith('google/protobuf/') ? target : `${PROTO_DIR}${target}`;
    r.loadSync([...PROTO_FILES], { keepCase: true });
    r.resolveAll();
    root = r;
  }
  return root;
}

/**
 * The path of the first string field of a request to `method` (`/runstream.v1.Ingest/Publish`)
 * whose bytes are not UTF-8, such as `events[3].content_json`; undefined when the method is
 * not one of the contract's or no such field is found.
 */
export function notUtf8Field(method: string, bytes: Uint8Array): string | undefined {
  const [, service, name] = /^\/([^/]+)\/([^/]+)$/.exec(method) ?? [];
  if (service === undefined || name === undefined) return undefined;
  let type: protobuf.Type | undefined;
  try {
    type = contract().lookupService(service).methods[name]?.resolvedRequestType ?? undefined;
  } catch {
    return undefined;
  }
  if (!type) return undefined;
  try {
    return search(type, protobuf.Reader.create(bytes), bytes.length, '');
  } catch {
    return undefined;
  }
}

function search(type: protobuf.Type, r: protobuf.Reader, end: number, prefix: string): string | undefined {
  const seen = new Map<number, number>();
  while (r.pos < end) {
    const tag = r.uint32();
    const id = tag >>> 3;
    const wireType = tag & 7;
    const field = type.fieldsById[id];
    if (wireType !== 2 || field === undefined) {
      r.skipType(wireType);
      continue;
    }
    const length = r.uint32();
    const start = r.pos;
    r.pos = start + length;
    const index = seen.get(id) ?? 0;
    seen.set(id, index + 1);
    const path = field.repeated ? `${prefix}${field.name}[${index}]` : `${prefix}${field.name}`;
    if (field.type === 'string' && !isUtf8(r.buf.subarray(start, start + length))) return path;
    if (field.resolvedType instanceof protobuf.Type) {
      const inner = protobuf.Reader.create(r.buf.subarray(start, start + length));
      const found = search(field.resolvedType, inner, length, `${path}.`);
      if (found !== undefined) return found;
    }
  }
  return undefined;
}
