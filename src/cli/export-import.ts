/**
 * `runstream export <thread>` writes a thread's events as JSON lines (cli/jsonl.ts), read
 * from History page by page; `runstream import <file>` publishes such a file back, each
 * event with its own id and time, so importing twice stores nothing twice.
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import type { WireEvent } from '@runstream/client';
import { loadCliEnv } from '../config.js';
import { ID_PATTERN } from '../domain/ids.js';
import {
  CommandError,
  choiceFlag,
  EXIT_OK,
  httpUrlFlag,
  intFlag,
  parseFlags,
  patternFlag,
  type Subcommand,
  threadIdArg,
} from './args.js';
import { historyGet } from './history-http.js';
import { parseEventLines } from './jsonl.js';
import { Progress } from './progress.js';
import { ACK_LEVELS, DEFAULT_CLI_BATCH_EVENTS, grpcTargetFlag, readInput, sendEvents } from './publish.js';

/** Events per History page read by `export` (History's maximum). */
export const EXPORT_PAGE_EVENTS = 1000;

const EXPORT_USAGE = `usage: runstream export <thread_id> [flags]

Writes a thread's events, in seq order, as JSON lines: each event in its JSON form, as
subscribers receive it. \`runstream import\` reads the file back.

  --out FILE         write to this file (default stdout); a progress bar is drawn on stderr
  --after-seq N      only events after this seq
  --run ID           only this run's events
  --token JWT        bearer token (env RS_TOKEN)
  --url URL          the broker's HTTP base (env RS_URL; default http://127.0.0.1:8080)`;

const IMPORT_USAGE = `usage: runstream import <file> [flags]

Publishes the events of a file \`runstream export\` wrote ("-" for stdin), in order. Each keeps
its event_id, created_at, run and user; the broker numbers them anew in the thread they go to.
An event the thread already has is stored once, so an interrupted import can be run again.
Every line is checked first: a bad one stops the command, naming its line, and nothing is sent.

  --thread ID        import into this thread instead of each line's thread_id
  --ack LEVEL        PERSISTED (default: stored, with its seq) or ACCEPTED
  --batch N          events per request, at most (default ${DEFAULT_CLI_BATCH_EVENTS})
  --token JWT        bearer token (env RS_TOKEN)
  --grpc HOST:PORT   the broker's gRPC port (env RS_GRPC_TARGET; default 127.0.0.1:50051)`;

interface EventsPage {
  events: WireEvent[];
  next_after_seq?: number;
  has_more: boolean;
}

export const exportCommand: Subcommand = {
  name: 'export',
  summary: "write a thread's events as JSON lines (stdout or a file)",
  usage: EXPORT_USAGE,
  async run(argv, io) {
    const parsed = parseFlags(
      this,
      argv,
      {
        out: { type: 'string' },
        'after-seq': { type: 'string' },
        run: { type: 'string' },
        token: { type: 'string' },
        url: { type: 'string' },
      },
      io,
      { min: 1, max: 1, name: '<thread_id>' },
    );
    if (!parsed) return EXIT_OK;
    const { values, positionals } = parsed;
    const threadId = threadIdArg(positionals[0] as string);
    const env = loadCliEnv();
    const base = httpUrlFlag('url', values.url ?? env.httpUrl);
    let after = intFlag('after-seq', values['after-seq'], 0);
    const runId = values.run === undefined ? undefined : patternFlag('run', values.run, ID_PATTERN);
    const token = values.token ?? env.token;
    const path = `/v1/threads/${threadId}${runId === undefined ? '' : `/runs/${runId}`}/events`;

    // The newest event's seq bounds how many there are: the progress bar's total.
    const newest = await historyGet<EventsPage>(
      base,
      path,
      { before_seq: Number.MAX_SAFE_INTEGER, limit: 1 },
      token,
    );
    const total = Math.max(0, (newest.events[0]?.seq ?? 0) - after);
    let file: WriteStream | undefined;
    if (values.out !== undefined) {
      file = createWriteStream(values.out);
      await new Promise<void>((resolve, reject) => {
        file?.once('open', () => resolve());
        file?.once('error', (err) => reject(new CommandError(`cannot write ${values.out}: ${err.message}`)));
      });
    }
    const write = (text: string): Promise<void> =>
      file === undefined
        ? Promise.resolve(io.out(text))
        : new Promise((resolve, reject) => file?.write(text, (err) => (err ? reject(err) : resolve())));
    const progress = new Progress(io, `exporting ${threadId}`, file === undefined ? undefined : total);
    try {
      for (;;) {
        if (io.signal.aborted) throw new CommandError(`interrupted after seq ${after}`);
        const page = await historyGet<EventsPage>(
          base,
          path,
          { after_seq: after, limit: EXPORT_PAGE_EVENTS },
          token,
        );
        if (page.events.length > 0) await write(`${page.events.map((e) => JSON.stringify(e)).join('\n')}\n`);
        progress.add(page.events.length);
        after = page.next_after_seq ?? after;
        if (!page.has_more) break;
      }
    } finally {
      progress.finish();
      if (file) await new Promise<void>((resolve) => file?.end(() => resolve()));
    }
    if (file) io.out(`exported ${progress.done} events of ${threadId} to ${values.out}\n`);
    else io.err(`exported ${progress.done} events of ${threadId}\n`);
    return EXIT_OK;
  },
};

export const importCommand: Subcommand = {
  name: 'import',
  summary: 'publish a file `export` wrote, keeping ids and times (safe to repeat)',
  usage: IMPORT_USAGE,
  async run(argv, io) {
    const parsed = parseFlags(
      this,
      argv,
      {
        thread: { type: 'string' },
        ack: { type: 'string' },
        batch: { type: 'string' },
        token: { type: 'string' },
        grpc: { type: 'string' },
      },
      io,
      { min: 1, max: 1, name: '<file>' },
    );
    if (!parsed) return EXIT_OK;
    const { values, positionals } = parsed;
    const env = loadCliEnv();
    const ack = choiceFlag('ack', values.ack ?? 'PERSISTED', ACK_LEVELS);
    const batchEvents = intFlag('batch', values.batch, DEFAULT_CLI_BATCH_EVENTS, 1, 5000);
    const threadId =
      values.thread === undefined ? undefined : patternFlag('thread', values.thread, ID_PATTERN);
    const target = grpcTargetFlag(values.grpc ?? env.grpcTarget);
    const events = parseEventLines(await readInput(io, positionals[0]), {
      threadId,
      forceThread: threadId !== undefined,
      requireIds: true,
    });
    const acks = await sendEvents(events, {
      target,
      token: values.token ?? env.token,
      ack,
      batchEvents,
      io,
      label: 'importing',
    });
    const duplicates = acks.filter((a) => a.duplicate).length;
    const threads = [...new Set(events.map((e) => e.threadId))];
    io.out(
      `imported ${acks.length - duplicates} events into ${threads.length === 1 ? threads[0] : `${threads.length} threads`} at ${ack}` +
        `${duplicates > 0 ? `; ${duplicates} were there already` : ''}\n`,
    );
    return EXIT_OK;
  },
};
