/**
 * Events as JSON lines, the format `publish` and `import` read and `export` writes: one
 * event per line in its client-facing JSON form (docs/protocol.md), `content` and
 * `metadata` as JSON values. Every line is checked with ingest's own validation
 * (ingest/validate.ts) before anything is sent, so a bad line stops the command with its
 * line number and field, and nothing of the input is stored.
 */
import type { PublishEvent } from '@runstream/client/node';
import { DEFAULT_MAX_CONTENT_BYTES, DEFAULT_MAX_JSON_DEPTH } from '../config.js';
import { CATEGORIES, categoryEnum } from '../domain/event.js';
import { TIME_TEXT_RULE, timeTextMs } from '../domain/time-text.js';
import { validateEvents } from '../ingest/validate.js';
import { CommandError } from './args.js';

/** The keys a line may have; `seq` and `offset` (in an export) are the broker's, and ignored. */
const KEYS = new Set([
  'thread_id',
  'run_id',
  'event_id',
  'event_type',
  'category',
  'user_id',
  'created_at',
  'content',
  'metadata',
  'seq',
  'offset',
]);

const LIMITS = {
  maxContentBytes: DEFAULT_MAX_CONTENT_BYTES,
  maxEventsPerRequest: 1,
  maxJsonDepth: DEFAULT_MAX_JSON_DEPTH,
};

export interface LineDefaults {
  /** For lines without `thread_id`; with `force`, for every line. */
  readonly threadId?: string | undefined;
  readonly runId?: string | undefined;
  /** `threadId` replaces every line's `thread_id` (an import into another thread). */
  readonly forceThread?: boolean;
  /** Every line must carry `event_id` and `created_at` (an import: retried imports store nothing twice). */
  readonly requireIds?: boolean;
}

/** Parses and validates every non-blank line; throws a {@link CommandError} naming the first bad one. */
export function parseEventLines(text: string, d: LineDefaults = {}): PublishEvent[] {
  const events: PublishEvent[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = (lines[i] as string).trim();
    if (line === '') continue;
    try {
      events.push(parseLine(line, d));
    } catch (err) {
      throw new CommandError(`line ${i + 1}: ${(err as Error).message}; nothing was published`);
    }
  }
  if (events.length === 0) throw new CommandError('no events in the input; nothing was published');
  return events;
}

function parseLine(line: string, d: LineDefaults): PublishEvent {
  let obj: unknown;
  try {
    obj = JSON.parse(line);
  } catch (err) {
    throw new Error(`not JSON (${(err as Error).message})`);
  }
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) throw new Error('not a JSON object');
  const o = obj as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!KEYS.has(k)) throw new Error(`${k}: unknown key`);
  const str = (k: string): string => {
    const v = o[k];
    if (v === undefined || v === null) return '';
    if (typeof v !== 'string') throw new Error(`${k}: must be a string`);
    return v;
  };
  const threadId = d.forceThread ? (d.threadId as string) : str('thread_id') || d.threadId || '';
  const runId = str('run_id') || d.runId || '';
  // The three known categories in any case (MESSAGE, as the enum spells them); any other name as given.
  const rawCategory = str('category');
  const known = CATEGORIES.find((c) => c === rawCategory.toLowerCase());
  const category = known ?? rawCategory;
  const createdAt = str('created_at');
  const eventId = str('event_id');
  if (d.requireIds && eventId === '') throw new Error('event_id: is required (an import keeps each id)');
  if (d.requireIds && createdAt === '')
    throw new Error('created_at: is required (an import keeps each time)');
  // Sent as text, which the broker keeps exactly (an export gives back the text it stored).
  if (createdAt !== '' && timeTextMs(createdAt) === undefined)
    throw new Error(`created_at: ${TIME_TEXT_RULE}`);
  const contentJson = o.content === undefined ? 'null' : jsonText(o.content, 'content');
  const metadataJson = o.metadata === undefined ? '{}' : jsonText(o.metadata, 'metadata');
  // The broker's own checks, on the event as ingest would receive it.
  try {
    validateEvents(
      [
        {
          thread_id: threadId,
          run_id: runId,
          event_type: str('event_type'),
          category: categoryEnum(category),
          category_name: known === undefined ? category : '',
          created_at_text: createdAt,
          content_json: contentJson,
          metadata_json: metadataJson,
          event_id: eventId,
          created_at: null,
          user_id: str('user_id'),
          seq: 0,
          offset: 0,
        },
      ],
      LIMITS,
    );
  } catch (err) {
    const message = (err as Error).message.replace(/^events\[0\]\./, '');
    throw new Error(message.replace(/^(\w+)_json:/, '$1:').replace(/^category_name:/, 'category:'));
  }
  return {
    threadId,
    runId,
    eventType: str('event_type'),
    category,
    contentJson,
    metadataJson,
    ...(eventId === '' ? {} : { eventId }),
    ...(createdAt === '' ? {} : { createdAtText: createdAt }),
    ...(str('user_id') === '' ? {} : { userId: str('user_id') }),
  };
}

/** A parsed value's JSON text; one nested past the stack (JSON.stringify recurses) is refused, named. */
function jsonText(value: unknown, field: string): string {
  try {
    return JSON.stringify(value);
  } catch (err) {
    if (err instanceof RangeError)
      throw new Error(`${field}: nested too deeply (at most ${LIMITS.maxJsonDepth} levels)`);
    throw err;
  }
}
