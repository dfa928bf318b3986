/**
 * `runstream publish [file]`: events as JSON lines (cli/jsonl.ts) from a file or stdin,
 * checked whole first, then sent in batches per thread through the client's batching
 * publisher at the ack level asked for. `import` sends the same way.
 */
import { readFile } from 'node:fs/promises';
import { type AckLevel, type EventAck, type PublishEvent, Publisher } from '@runstream/client/node';
import { loadCliEnv } from '../config.js';
import { ID_PATTERN } from '../domain/ids.js';
import {
  CommandError,
  choiceFlag,
  EXIT_OK,
  type Io,
  intFlag,
  parseFlags,
  patternFlag,
  type Subcommand,
  TOKEN_HINT,
  UsageError,
} from './args.js';
import { parseEventLines } from './jsonl.js';
import { Progress } from './progress.js';

export const ACK_LEVELS: readonly AckLevel[] = ['ACCEPTED', 'PERSISTED'];
/** Events per request, at most (the broker takes up to RS_MAX_EVENTS_PER_REQUEST, 5000 by default). */
export const DEFAULT_CLI_BATCH_EVENTS = 500;
/** A command gives up on a broker that does not answer after this many attempts per batch. */
export const CLI_MAX_ATTEMPTS = 3;

const USAGE = `usage: runstream publish [file] [flags]

Publishes events given as JSON lines, one event per line, from <file> or stdin ("-" or no
file). A line is an event in its JSON form:

  {"thread_id":"t1","run_id":"r1","event_type":"ai_chunk","category":"message","content":{"content":"hi"}}

with optional "event_id" (default: generated), "created_at" (RFC 3339), "user_id" and
"metadata" (an object); "seq" and "offset" (as \`runstream export\` writes them) are ignored.
Every line is checked first: a bad one stops the command, naming its line and field, and
nothing is published. Events go out in batches per thread, in input order.

  --thread ID        thread_id for lines without one
  --run ID           run_id for lines without one
  --ack LEVEL        ACCEPTED (in the log; default) or PERSISTED (stored, with its seq)
  --batch N          events per request, at most (default ${DEFAULT_CLI_BATCH_EVENTS})
  --token JWT        bearer token (env RS_TOKEN)
  --grpc HOST:PORT   the broker's gRPC port (env RS_GRPC_TARGET; default 127.0.0.1:50051)
  --json             print each event's ack as a JSON line on stdout

A progress bar is drawn on stderr when it is a terminal. The summary goes to stdout.`;

const FLAGS = {
  thread: { type: 'string' },
  run: { type: 'string' },
  ack: { type: 'string' },
  batch: { type: 'string' },
  token: { type: 'string' },
  grpc: { type: 'string' },
  json: { type: 'boolean' },
} as const;

/** The whole input: a file, or stdin for none or "-". */
export async function readInput(io: Io, file: string | undefined): Promise<string> {
  if (file !== undefined && file !== '-') {
    try {
      return await readFile(file, 'utf8');
    } catch (err) {
      throw new CommandError(`cannot read ${file}: ${(err as Error).message}`);
    }
  }
  const chunks: Buffer[] = [];
  for await (const chunk of io.stdin) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
  return Buffer.concat(chunks).toString('utf8');
}

export function grpcTargetFlag(raw: string): string {
  if (!/^[A-Za-z0-9.[\]:_-]+:\d{1,5}$/.test(raw)) {
    throw new UsageError(`--grpc ${JSON.stringify(raw)}: must be host:port`);
  }
  return raw;
}

export interface SendOptions {
  readonly target: string;
  readonly token: string | undefined;
  readonly ack: AckLevel;
  readonly batchEvents: number;
  readonly io: Io;
  readonly label: string;
  /** Called with each ack, in input order. */
  readonly onAck?: (ack: EventAck, e: PublishEvent) => void;
}

/** Sends `events` in input order; resolves with their acks, or throws the first refusal. */
export async function sendEvents(events: readonly PublishEvent[], o: SendOptions): Promise<EventAck[]> {
  const publisher = new Publisher({
    target: o.target,
    ...(o.token === undefined ? {} : { token: o.token }),
    ack: o.ack,
    maxBatchEvents: o.batchEvents,
    retry: { maxAttempts: CLI_MAX_ATTEMPTS },
    deadlineMs: 60_000,
  });
  const progress = new Progress(o.io, o.label, events.length);
  const acks: Promise<EventAck>[] = [];
  let failure: unknown;
  try {
    for (const e of events) {
      if (failure !== undefined || o.io.signal.aborted) break;
      await publisher.ready();
      const p = publisher.publish(e);
      p.then(
        () => progress.add(),
        (err: unknown) => {
          failure ??= err;
        },
      );
      acks.push(p);
    }
    const settled = await Promise.allSettled(acks);
    progress.finish();
    if (failure === undefined && o.io.signal.aborted) throw new CommandError('interrupted');
    if (failure !== undefined) throw refusal(failure, progress.done);
    const values = settled.map((s) => (s as PromiseFulfilledResult<EventAck>).value);
    if (o.onAck) for (const [i, a] of values.entries()) o.onAck(a, events[i] as PublishEvent);
    return values;
  } finally {
    await publisher.close().catch(() => undefined);
  }
}

function refusal(err: unknown, done: number): CommandError {
  const e = err as { code?: string; message?: string };
  const what = `${e.code ?? 'error'}: ${e.message ?? String(err)} (${done} events were acknowledged before it)`;
  if (e.code === 'unauthenticated' || e.code === 'permission_denied') {
    return new CommandError(`${what}\n  hint: ${TOKEN_HINT}`);
  }
  if (e.code === 'unavailable')
    return new CommandError(`${what}\n  hint: is the broker running? (--grpc, RS_GRPC_TARGET)`);
  return new CommandError(what);
}

export const publishCommand: Subcommand = {
  name: 'publish',
  summary: 'publish events given as JSON lines (a file or stdin), batched',
  usage: USAGE,
  async run(argv, io) {
    const parsed = parseFlags(this, argv, FLAGS, io, { min: 0, max: 1, name: '[file]' });
    if (!parsed) return EXIT_OK;
    const { values, positionals } = parsed;
    const env = loadCliEnv();
    const ack = choiceFlag('ack', values.ack ?? 'ACCEPTED', ACK_LEVELS);
    const batchEvents = intFlag('batch', values.batch, DEFAULT_CLI_BATCH_EVENTS, 1, 5000);
    const threadId =
      values.thread === undefined ? undefined : patternFlag('thread', values.thread, ID_PATTERN);
    const runId = values.run === undefined ? undefined : patternFlag('run', values.run, ID_PATTERN);
    const target = grpcTargetFlag(values.grpc ?? env.grpcTarget);
    const events = parseEventLines(await readInput(io, positionals[0]), { threadId, runId });
    const acks = await sendEvents(events, {
      target,
      token: values.token ?? env.token,
      ack,
      batchEvents,
      io,
      label: 'publishing',
      onAck: values.json
        ? (a) =>
            io.out(
              `${JSON.stringify({ event_id: a.eventId, duplicate: a.duplicate, seq: a.seq, offset: a.offset })}\n`,
            )
        : undefined,
    });
    const duplicates = acks.filter((a) => a.duplicate).length;
    const threads = new Set(events.map((e) => e.threadId)).size;
    const summary = `published ${acks.length} events to ${threads} thread${threads === 1 ? '' : 's'} at ${ack}${duplicates > 0 ? ` (${duplicates} already there)` : ''}`;
    (values.json ? io.err : io.out)(`${summary}\n`);
    return EXIT_OK;
  },
};
