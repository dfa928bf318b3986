/**
 * `npm run tail -- <thread_id> [--after-seq N] [--url ws://127.0.0.1:8080/v1/ws] [--json]`
 *
 * Follows a thread over WebSocket and prints one line per event (`#seq run event_type: summary`),
 * then the `live` marker where catch-up ends. When the connection drops it reconnects and
 * resubscribes after the last seq it printed, so the output never has a gap or a duplicate.
 * Ctrl-C prints where it stopped (to resume with `--after-seq`) and exits 0.
 */
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { subscribe, type WireEvent } from '@runstream/client';
import WebSocket from 'ws';
import { ID_PATTERN } from '../domain/ids.js';

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
  /** Event and live lines. */
  readonly out: (line: string) => void;
  /** Connection notices. */
  readonly note: (line: string) => void;
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
        if (!item.retrying) throw new Error(`${item.error.code}: ${item.error.message}`);
        break;
      case 'end':
      case 'deleted':
        o.note(`-- ${item.type} --`);
        return lastSeq;
    }
  }
  return lastSeq;
}

const USAGE = `usage: npm run tail -- <thread_id> [--after-seq N] [--url URL] [--json]
  --after-seq  show events after this seq (default 0: the whole thread, then live)
  --url        the broker's WebSocket endpoint (env RS_WS_URL; default ${DEFAULT_WS_URL})
  --json       print each event as its JSON instead of a summary line`;

const CLI_OPTIONS = {
  'after-seq': { type: 'string' },
  url: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

function parseCli(): ReturnType<typeof parseArgs<{ options: typeof CLI_OPTIONS; allowPositionals: true }>> {
  return parseArgs({ options: CLI_OPTIONS, allowPositionals: true });
}

async function main(): Promise<number> {
  let parsed: ReturnType<typeof parseCli>;
  try {
    parsed = parseCli();
  } catch (err) {
    process.stderr.write(`tail: ${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const threadId = positionals[0];
  const rawAfter = values['after-seq'] ?? '0';
  const afterSeq = Number(rawAfter);
  const problems: string[] = [];
  if (threadId === undefined || positionals.length > 1) problems.push('exactly one <thread_id> is required');
  else if (!ID_PATTERN.test(threadId))
    problems.push(`thread_id ${JSON.stringify(threadId)} must match ${ID_PATTERN}`);
  if (!/^\d+$/.test(rawAfter) || !Number.isSafeInteger(afterSeq)) {
    problems.push(`--after-seq ${JSON.stringify(rawAfter)}: not an integer ≥ 0`);
  }
  if (problems.length > 0 || threadId === undefined) {
    process.stderr.write(`tail: ${problems.join('; ')}\n${USAGE}\n`);
    return 2;
  }
  const url = values.url ?? (process.env.RS_WS_URL || DEFAULT_WS_URL);

  // `tail ... | head` closes our stdout: that is the end, not an error.
  process.stdout.on('error', () => process.exit(0));
  const out = (line: string): void => {
    process.stdout.write(`${line}\n`);
  };
  const note = (line: string): void => {
    process.stderr.write(`${line}\n`);
  };
  const stop = new AbortController();
  const onSignal = (): void => {
    if (stop.signal.aborted) process.exit(130);
    stop.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  note(`-- following ${threadId} after #${afterSeq} on ${url} (Ctrl-C to stop) --`);
  try {
    const last = await tail({ url, threadId, afterSeq, json: values.json === true, out, note }, stop.signal);
    note(`-- stopped after #${last} (resume with --after-seq ${last}) --`);
    return 0;
  } catch (err) {
    note(`tail: ${(err as Error).message}`);
    return 1;
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(`tail: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}
