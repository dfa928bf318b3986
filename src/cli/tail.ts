/**
 * `runstream tail <thread_id> [--after-seq N] [--run ID] [--category C] [--event-type T]
 * [--token JWT] [--json] [--url URL]` (also `npm run tail -- …`).
 *
 * Follows a thread over WebSocket and prints one line per event (`#seq run event_type: summary`),
 * then the `live` marker where catch-up ends. When the connection drops it reconnects and
 * resubscribes after the last seq it printed, so the output never has a gap or a duplicate.
 * Ctrl-C prints where it stopped (to resume with `--after-seq`) and exits 0.
 */
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CATEGORIES, type Category, subscribe, type WireEvent } from '@runstream/client';
import WebSocket from 'ws';
import { DEFAULT_CLI_HTTP_URL, loadCliEnv } from '../config.js';
import { CATEGORY_PATTERN, CATEGORY_RULE } from '../domain/event.js';
import { EVENT_TYPE_PATTERN, ID_PATTERN } from '../domain/ids.js';
import {
  CommandError,
  EXIT_OK,
  httpUrlFlag,
  intFlag,
  listFlag,
  parseFlags,
  patternFlag,
  type Subcommand,
  TOKEN_HINT,
  threadIdArg,
  UsageError,
  wsUrlOf,
} from './args.js';
import { runAsMain } from './run.js';

export const DEFAULT_WS_URL = 'ws://127.0.0.1:8080/v1/ws';
export const RECONNECT_MIN_DELAY_MS = 250;
export const RECONNECT_MAX_DELAY_MS = 5000;
/** A client ping goes out this often; no pong by the next one means the peer is gone. */
export const PING_INTERVAL_MS = 15_000;
export const SUMMARY_MAX_CHARS = 160;

/** One readable line for an event: `#seq run event_type: summary`. */
export function formatEvent(e: WireEvent): string {
  return `#${e.seq} ${e.run_id} ${e.event_type}: ${summarize(e.event_type, e.content)}`;
}

/** The gist of an event's content: the text of a message, `name(args)` of a tool call, else compact JSON. */
export function summarize(eventType: string, content: unknown): string {
  if (typeof content === 'string') return clip(JSON.stringify(content));
  if (typeof content === 'object' && content !== null && !Array.isArray(content)) {
    const c = content as Record<string, unknown>;
    if (typeof c.name === 'string' && 'arguments' in c) {
      const args = typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments);
      return clip(`${c.name}(${args})`);
    }
    if (typeof c.content === 'string') {
      return clip(`${JSON.stringify(c.content)}${c.is_error === true ? ' [error]' : ''}`);
    }
    if (eventType.endsWith('_end') || typeof c.status === 'string') {
      const { status, ...rest } = c;
      if (typeof status === 'string') {
        return clip(Object.keys(rest).length > 0 ? `${status} ${JSON.stringify(rest)}` : status);
      }
    }
  }
  return clip(JSON.stringify(content) ?? 'null');
}

function clip(text: string): string {
  const chars = [...text];
  return chars.length <= SUMMARY_MAX_CHARS ? text : `${chars.slice(0, SUMMARY_MAX_CHARS - 1).join('')}…`;
}

export interface TailOptions {
  readonly url: string;
  readonly threadId: string;
  readonly afterSeq: number;
  readonly json: boolean;
  /** Only this run; the tail ends after the run's terminal event. */
  readonly runId?: string | undefined;
  readonly categories?: readonly Category[] | undefined;
  readonly eventTypes?: readonly string[] | undefined;
  /** A JWT, for a broker with authentication on. */
  readonly token?: string | undefined;
  /** Event and live lines. */
  readonly out: (line: string) => void;
  /** Connection notices. */
  readonly note: (line: string) => void;
}

/** The broker refused the subscription for good; `code` is its error code (`unauthenticated`, …). */
export class TailRefused extends CommandError {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
  }
}

/**
 * Follows the thread until `signal` fires (resolves with the last seq shown) or the server
 * refuses the subscription for good (rejects). The client package's subscriber does the
 * resuming: it reconnects with backoff and resubscribes after the last seq.
 */
export async function tail(o: TailOptions, signal: AbortSignal): Promise<number> {
  let lastSeq = o.afterSeq;
  let outage = false;
  const sub = subscribe({
    url: o.url,
    threadId: o.threadId,
    afterSeq: o.afterSeq,
    ...(o.runId === undefined ? {} : { runId: o.runId }),
    ...(o.categories === undefined || o.categories.length === 0 ? {} : { categories: o.categories }),
    ...(o.eventTypes === undefined || o.eventTypes.length === 0 ? {} : { eventTypes: o.eventTypes }),
    ...(o.token === undefined ? {} : { token: o.token }),
    WebSocket,
    signal,
    pingIntervalMs: PING_INTERVAL_MS,
    backoff: { initialDelayMs: RECONNECT_MIN_DELAY_MS, maxDelayMs: RECONNECT_MAX_DELAY_MS },
  });
  for await (const item of sub) {
    switch (item.type) {
      case 'event':
        o.out(o.json ? JSON.stringify(item.event) : formatEvent(item.event));
        lastSeq = item.event.seq;
        outage = false;
        break;
      case 'live':
        o.out(o.json ? JSON.stringify(item) : `-- live at #${item.seq} --`);
        outage = false;
        break;
      case 'reconnecting':
        // Say it once per outage, not once per attempt.
        if (!outage) o.note(`-- ${item.reason}; reconnecting to resume after #${lastSeq} --`);
        outage = true;
        break;
      case 'error':
        if (!item.retrying) throw new TailRefused(item.error.code, item.error.message);
        break;
      case 'end':
      case 'deleted':
        o.note(`-- ${item.type} --`);
        return lastSeq;
    }
  }
  return lastSeq;
}

const USAGE = `usage: runstream tail <thread_id> [flags]   (also: npm run tail -- <thread_id> [flags])

Follows a thread over WebSocket: its history after --after-seq, then live. Reconnects and
resumes after the last event shown, so the output has no gap and no duplicate. Events go to
stdout, notices to stderr. Ctrl-C prints where it stopped and exits 0.

  --after-seq N      show events after this seq (default 0: the whole thread, then live)
  --run ID           only this run; stops after the run's terminal event
  --category C       only these categories: message, trace, lifecycle, or any other name
                     (repeat or comma-separate)
  --event-type T     only these event types (repeat or comma-separate)
  --token JWT        bearer token (env RS_TOKEN); a refused token is fatal
  --json             print each event as its JSON instead of a summary line
  --url URL          the broker: http://host:8080 or its ws://host:8080/v1/ws endpoint
                     (env RS_URL, or RS_WS_URL; default ${DEFAULT_WS_URL})`;

const TAIL_FLAGS = {
  'after-seq': { type: 'string' },
  run: { type: 'string' },
  category: { type: 'string', multiple: true },
  'event-type': { type: 'string', multiple: true },
  token: { type: 'string' },
  json: { type: 'boolean' },
  url: { type: 'string' },
} as const;

/** `runstream tail`. */
export const tailCommand: Subcommand = {
  name: 'tail',
  summary: 'follow a thread: its history, then live, resuming across drops',
  usage: USAGE,
  async run(argv, io) {
    const parsed = parseFlags(this, argv, TAIL_FLAGS, io, { min: 1, max: 1, name: '<thread_id>' });
    if (!parsed) return EXIT_OK;
    const { values, positionals } = parsed;
    const threadId = threadIdArg(positionals[0] as string);
    const env = loadCliEnv();
    const afterSeq = intFlag('after-seq', values['after-seq'], 0);
    const runId = values.run === undefined ? undefined : patternFlag('run', values.run, ID_PATTERN);
    const categories = listFlag(values.category).map((c) => {
      const known = CATEGORIES.find((k) => k === c.toLowerCase());
      if (known) return known;
      if (!CATEGORY_PATTERN.test(c)) {
        throw new UsageError(
          `--category ${JSON.stringify(c)}: message, trace, lifecycle or another category name; ${CATEGORY_RULE}`,
        );
      }
      return c;
    });
    const eventTypes = listFlag(values['event-type']).map((t) =>
      patternFlag('event-type', t, EVENT_TYPE_PATTERN),
    );
    const url = tailUrl(
      values.url ?? env.wsUrl ?? (env.httpUrl === DEFAULT_CLI_HTTP_URL ? DEFAULT_WS_URL : env.httpUrl),
    );
    const token = values.token ?? env.token;

    io.err(`-- following ${threadId} after #${afterSeq} on ${url} (Ctrl-C to stop) --\n`);
    try {
      const last = await tail(
        {
          url,
          threadId,
          afterSeq,
          json: values.json === true,
          runId,
          categories,
          eventTypes,
          token,
          out: (line) => io.out(`${line}\n`),
          note: (line) => io.err(`${line}\n`),
        },
        io.signal,
      );
      io.err(`-- stopped after #${last} (resume with --after-seq ${last}) --\n`);
      return EXIT_OK;
    } catch (err) {
      if (err instanceof TailRefused && (err.code === 'unauthenticated' || err.code === 'token_expired')) {
        throw new CommandError(`${err.message}\n  hint: ${TOKEN_HINT}`);
      }
      throw err;
    }
  },
};

/** `--url`: a ws(s) endpoint as given, or an http(s) base with /v1/ws added. */
function tailUrl(raw: string): string {
  if (/^wss?:\/\//.test(raw)) return raw;
  return wsUrlOf(httpUrlFlag('url', raw));
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  runAsMain(tailCommand, process.argv.slice(2), 'tail');
}
