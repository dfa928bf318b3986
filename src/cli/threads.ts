/**
 * `runstream threads` and `runs <thread>`: History's thread list (`GET /v1/threads`) and a
 * thread's runs (`GET /v1/threads/{id}/runs`) as tables, or their JSON.
 */
import { loadCliEnv } from '../config.js';
import { ID_PATTERN } from '../domain/ids.js';
import { RUN_STATUSES } from '../domain/run-lifecycle.js';
import type { ThreadRecord } from '../persist/threads.js';
import {
  choiceFlag,
  EXIT_OK,
  httpUrlFlag,
  intFlag,
  listFlag,
  parseFlags,
  patternFlag,
  type Subcommand,
  threadIdArg,
} from './args.js';
import { historyGet } from './history-http.js';
import { table } from './table.js';

const COMMON = `  --token JWT        bearer token (env RS_TOKEN)
  --url URL          the broker's HTTP base (env RS_URL; default http://127.0.0.1:8080)
  --json             print the broker's JSON pages instead of a table`;

const THREADS_USAGE = `usage: runstream threads [flags]

Lists the threads you may read that have runs, in id order, as a table: each thread's head seq,
runs, events, latest run and its status, and last activity.

  --limit N          threads per page (1-1000, default 100)
  --after ID         start after this thread id (the previous page's last)
  --all              follow every page
  --user ID          only threads with runs of this user
${COMMON}`;

const RUNS_USAGE = `usage: runstream runs <thread_id> [flags]

Lists a thread's runs, newest first, as a table: status, seqs, event counts, times.

  --limit N          runs per page (1-1000, default 100)
  --before-seq N     runs that started before this seq (the previous page's next_before_seq)
  --all              follow every page
  --status S         only runs in these states: ${RUN_STATUSES.join(', ')} (repeat or comma-separate)
  --user ID          only runs of this user
${COMMON}`;

const COMMON_FLAGS = {
  token: { type: 'string' },
  url: { type: 'string' },
  json: { type: 'boolean' },
  all: { type: 'boolean' },
  limit: { type: 'string' },
  user: { type: 'string' },
} as const;

interface ThreadsPage {
  threads: ThreadRecord[];
  next_after: string | null;
  has_more: boolean;
}

interface RunJson {
  run_id: string;
  user_id: string;
  status: string;
  first_seq: number;
  last_seq: number;
  event_count: number;
  message_count: number;
  started_at: string;
  updated_at: string;
}

interface RunsPage {
  runs: RunJson[];
  next_before_seq: number | null;
  has_more: boolean;
}

export const threadsCommand: Subcommand = {
  name: 'threads',
  summary: 'list the threads (History GET /v1/threads) as a table',
  usage: THREADS_USAGE,
  async run(argv, io) {
    const parsed = parseFlags(this, argv, { ...COMMON_FLAGS, after: { type: 'string' } }, io);
    if (!parsed) return EXIT_OK;
    const { values } = parsed;
    const env = loadCliEnv();
    const base = httpUrlFlag('url', values.url ?? env.httpUrl);
    const limit = intFlag('limit', values.limit, 100, 1, 1000);
    let after = values.after === undefined ? undefined : patternFlag('after', values.after, ID_PATTERN);
    const user = values.user === undefined ? undefined : patternFlag('user', values.user, ID_PATTERN);
    const token = values.token ?? env.token;
    const rows: ThreadRecord[] = [];
    for (;;) {
      const page = await historyGet<ThreadsPage>(base, '/v1/threads', { limit, after, user_id: user }, token);
      if (values.json) io.out(`${JSON.stringify(page)}\n`);
      rows.push(...page.threads);
      if (!values.all || !page.has_more || page.next_after === null) {
        if (!values.json) {
          io.out(
            table(
              ['THREAD', 'HEAD', 'RUNS', 'EVENTS', 'LAST RUN', 'STATUS', 'UPDATED'],
              rows.map((t) => [
                t.thread_id,
                String(t.head_seq),
                String(t.run_count),
                String(t.event_count),
                t.last_run_id,
                t.last_run_status,
                t.updated_at,
              ]),
            ),
          );
          if (page.has_more) io.err(`more: --after ${page.next_after} (or --all)\n`);
        }
        return EXIT_OK;
      }
      after = page.next_after;
    }
  },
};

export const runsCommand: Subcommand = {
  name: 'runs',
  summary: "list a thread's runs, newest first, as a table",
  usage: RUNS_USAGE,
  async run(argv, io) {
    const parsed = parseFlags(
      this,
      argv,
      { ...COMMON_FLAGS, 'before-seq': { type: 'string' }, status: { type: 'string', multiple: true } },
      io,
      { min: 1, max: 1, name: '<thread_id>' },
    );
    if (!parsed) return EXIT_OK;
    const { values, positionals } = parsed;
    const threadId = threadIdArg(positionals[0] as string);
    const env = loadCliEnv();
    const base = httpUrlFlag('url', values.url ?? env.httpUrl);
    const limit = intFlag('limit', values.limit, 100, 1, 1000);
    let beforeSeq: number | undefined =
      values['before-seq'] === undefined ? undefined : intFlag('before-seq', values['before-seq'], 0, 1);
    const statuses = listFlag(values.status).map((s) => choiceFlag('status', s, RUN_STATUSES));
    const user = values.user === undefined ? undefined : patternFlag('user', values.user, ID_PATTERN);
    const token = values.token ?? env.token;
    const rows: RunJson[] = [];
    for (;;) {
      const page = await historyGet<RunsPage>(
        base,
        `/v1/threads/${threadId}/runs`,
        {
          limit,
          before_seq: beforeSeq,
          status: statuses.length > 0 ? statuses.join(',') : undefined,
          user_id: user,
        },
        token,
      );
      if (values.json) io.out(`${JSON.stringify(page)}\n`);
      rows.push(...page.runs);
      if (!values.all || !page.has_more || page.next_before_seq === null) {
        if (!values.json) {
          io.out(
            table(
              ['RUN', 'STATUS', 'SEQS', 'EVENTS', 'MESSAGES', 'USER', 'STARTED', 'UPDATED'],
              rows.map((r) => [
                r.run_id,
                r.status,
                `${r.first_seq}-${r.last_seq}`,
                String(r.event_count),
                String(r.message_count),
                r.user_id,
                r.started_at,
                r.updated_at,
              ]),
            ),
          );
          if (page.has_more) io.err(`more: --before-seq ${page.next_before_seq} (or --all)\n`);
        }
        return EXIT_OK;
      }
      beforeSeq = page.next_before_seq;
    }
  },
};
