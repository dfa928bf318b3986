/**
 * A stored event's client-facing JSON text (see {@link eventJson}) as a `runstream.v1.Event`.
 *
 * Fan-out holds each event as its JSON text, serialised once by the persister (live) or the
 * catch-up query, which is what WebSocket and SSE clients get. gRPC subscribers need the
 * proto form, with `content_json` and `metadata_json` as the producer's exact text. The
 * text has a fixed key order, ids that cannot hold a quote and a fixed timestamp format, so
 * the fields are cut out of it by position, and content and metadata by
 * {@link eventJsonParts} (no parse, no re-serialisation: the producer's text, trimmed of
 * surrounding whitespace). Text of any other shape
 * falls back to a full parse, so a change to {@link eventJson} can cost speed, never
 * correctness.
 */
import { CATEGORY_PATTERN, categoryEnum } from '../../domain/event.js';
import { timeTextMs } from '../../domain/time-text.js';
import type { Event } from '../../gen/runstream/v1/Event.js';
import { eventJsonParts, jsonValueEnd } from '../core/event-json-parts.js';

/** The proto form of an event's {@link eventJson} text. */
export function eventProtoFromJson(json: string): Event {
  return cutEvent(json) ?? parseEvent(json);
}

/** A text that does not have the shape {@link cutEvent} expects. */
class ShapeError extends Error {}

/** Reads the fields by position; undefined when the text is not of the expected shape. */
function cutEvent(json: string): Event | undefined {
  let pos = 0;
  const expect = (literal: string): void => {
    if (!json.startsWith(literal, pos)) throw new ShapeError(literal);
    pos += literal.length;
  };
  const until = (end: string): string => {
    const stop = json.indexOf(end, pos);
    if (stop < 0) throw new ShapeError(end);
    const value = json.slice(pos, stop);
    pos = stop;
    return value;
  };
  const int = (end: string): number => {
    const n = Number(until(end));
    if (!Number.isSafeInteger(n)) throw new ShapeError('integer');
    return n;
  };
  try {
    expect('{"seq":');
    const seq = int(',');
    expect(',"offset":');
    const offset = int(',');
    expect(',"thread_id":"');
    const thread_id = until('"');
    expect('","run_id":"');
    const run_id = until('"');
    expect('","event_id":"');
    const event_id = until('"');
    expect('","event_type":');
    const typeStart = pos;
    pos = jsonValueEnd(json, pos);
    const event_type = JSON.parse(json.slice(typeStart, pos)) as string;
    expect(',"category":"');
    const category_name = until('"');
    if (!CATEGORY_PATTERN.test(category_name)) throw new ShapeError('category');
    expect('","user_id":"');
    const user_id = until('"');
    expect('","created_at":"');
    const createdAt = until('"');
    expect('","content":');
    const { content: content_json, metadata: metadata_json } = eventJsonParts(json);
    return {
      seq,
      offset,
      thread_id,
      run_id,
      event_id,
      event_type,
      category: categoryEnum(category_name),
      category_name,
      user_id,
      created_at: timestamp(createdAt),
      created_at_text: createdAt,
      content_json,
      metadata_json,
    };
  } catch {
    return undefined;
  }
}

/** The slow path: parse the whole text and serialise content and metadata again. */
function parseEvent(json: string): Event {
  const e = JSON.parse(json) as Record<string, unknown>;
  return {
    seq: Number(e.seq),
    offset: Number(e.offset),
    thread_id: String(e.thread_id),
    run_id: String(e.run_id),
    event_id: String(e.event_id),
    event_type: String(e.event_type),
    category: categoryEnum(String(e.category)),
    category_name: String(e.category),
    user_id: typeof e.user_id === 'string' ? e.user_id : '',
    created_at: timestamp(String(e.created_at)),
    created_at_text: String(e.created_at),
    content_json: JSON.stringify(e.content ?? null),
    metadata_json: JSON.stringify(e.metadata ?? {}),
  };
}

/** The instant of an event's created_at text: the broker's RFC 3339, or the producer's own. */
function timestamp(text: string): { seconds: number; nanos: number } {
  const ms = timeTextMs(text);
  if (ms === undefined) throw new ShapeError('created_at');
  const seconds = Math.floor(ms / 1000);
  return { seconds, nanos: (ms - seconds * 1000) * 1_000_000 };
}
