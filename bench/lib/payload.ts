/**
 * The benchmark's events: assistant tokens as an agent streams them (`ai_chunk`,
 * category MESSAGE, a few tokens of text, the id of the message they belong to, and an
 * explicit producer-chosen event_id), about 200 bytes as a log record.
 */
import { randomBytes } from 'node:crypto';
import type { Event } from '../../src/client/ingest-client.js';

/** A few tokens per chunk, as an LLM streams them (some multi-byte, as in shared/fixtures). */
const TOKENS = [
  ' The',
  ' model',
  ' compared',
  ' three',
  ' sources',
  ',',
  ' and',
  ' the',
  ' answer',
  ' is',
  ' 相关',
  '史料',
  ' mostly',
  ' consistent',
  '.',
  ' However',
] as const;
const TOKENS_PER_CHUNK = 3;
/** Chunks of one assistant message (they share metadata.id). */
const CHUNKS_PER_MESSAGE = 40;

export interface BenchThread {
  readonly index: number;
  readonly threadId: string;
  readonly runId: string;
  /** Tokens already produced: the next chunk's number. */
  next: number;
}

/** `count` fresh threads with names no other measurement uses. */
export function makeThreads(count: number): BenchThread[] {
  const tag = randomBytes(4).toString('hex');
  return Array.from({ length: count }, (_, index) => ({
    index,
    threadId: `th-${tag}-${String(index).padStart(3, '0')}`,
    runId: `run-${String(index).padStart(3, '0')}`,
    next: 0,
  }));
}

function chunkText(k: number): string {
  let text = '';
  for (let i = 0; i < TOKENS_PER_CHUNK; i++) text += TOKENS[(k * TOKENS_PER_CHUNK + i) % TOKENS.length];
  return text;
}

/** An Event with every field the benchmark sets filled in. */
export type TokenEvent = Required<
  Pick<
    Event,
    'thread_id' | 'run_id' | 'event_type' | 'category' | 'content_json' | 'metadata_json' | 'event_id'
  >
>;

/**
 * The thread's next token event. With `sentAtMs` (an {@link epochMs} reading taken just
 * before the send), it travels in the content, so a subscriber in another process can
 * compute the delivery latency on the same clock.
 */
export function nextTokenEvent(thread: BenchThread, sentAtMs?: number): TokenEvent {
  const k = thread.next++;
  const text = chunkText(k);
  return {
    thread_id: thread.threadId,
    run_id: thread.runId,
    event_type: 'ai_chunk',
    category: 'MESSAGE',
    content_json:
      sentAtMs === undefined
        ? `{"content":${JSON.stringify(text)}}`
        : `{"content":${JSON.stringify(text)},"t":${sentAtMs.toFixed(3)}}`,
    metadata_json: `{"id":"msg-${thread.index}-${Math.floor(k / CHUNKS_PER_MESSAGE)}"}`,
    event_id: `ev-${String(k).padStart(6, '0')}`,
  };
}

/** Bytes of the event as the broker stores it in the JetStream log (a LogRecord as JSON). */
export function logRecordBytes(e: TokenEvent): number {
  return Buffer.byteLength(
    JSON.stringify({
      thread_id: e.thread_id,
      run_id: e.run_id,
      event_id: e.event_id,
      event_type: e.event_type,
      category: 'message',
      user_id: '',
      created_at: new Date().toISOString(),
      content_json: e.content_json,
      metadata_json: e.metadata_json,
    }),
  );
}

/**
 * Epoch ms with sub-ms precision: the clock every bench process stamps and reads latency
 * with (one machine, so the same clock in each of them).
 */
export function epochMs(): number {
  return performance.timeOrigin + performance.now();
}

/** The `send timestamp` a latency-measuring event carries in its content. */
export function sentAtOf(content: unknown): number | undefined {
  const t = (content as { t?: unknown } | null)?.t;
  return typeof t === 'number' ? t : undefined;
}
