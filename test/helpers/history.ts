/** Shared pieces of the History tests: the recorded agent runs, HTTP calls, event makers. */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { BUILTIN_FIXTURE_JSONL } from '../../src/cli/demo-fixture.js';
import type { Event } from '../../src/client/ingest-client.js';

const FIXTURE = fileURLToPath(new URL('../../../../shared/fixtures/agent-runs.jsonl', import.meta.url));

const CATEGORY = { message: 'MESSAGE', trace: 'TRACE', lifecycle: 'LIFECYCLE' } as const;

/**
 * The recorded agent runs (../shared/fixtures/agent-runs.jsonl, or the demo's built-in
 * copy of it) on `threadId`: two runs, tokens, three tool calls, an error. Line i is seq i
 * on a fresh thread.
 */
export function fixtureEvents(threadId: string, userId = ''): Event[] {
  const text = existsSync(FIXTURE) ? readFileSync(FIXTURE, 'utf8') : BUILTIN_FIXTURE_JSONL;
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((line, i) => {
      const r = JSON.parse(line) as {
        run_id: string;
        event_type: string;
        category: keyof typeof CATEGORY;
        content: unknown;
        metadata: unknown;
      };
      return {
        thread_id: threadId,
        run_id: r.run_id,
        event_id: `fx-${i + 1}`,
        event_type: r.event_type,
        category: CATEGORY[r.category],
        content_json: JSON.stringify(r.content),
        metadata_json: JSON.stringify(r.metadata),
        user_id: userId,
      };
    });
}

/** One event; `n` makes the event_id and the content. */
export function ev(
  threadId: string,
  runId: string,
  n: number,
  o: {
    type?: string;
    category?: Event['category'];
    user?: string;
    content?: unknown;
    metadata?: unknown;
  } = {},
): Event {
  return {
    thread_id: threadId,
    run_id: runId,
    event_id: `${runId}-e${n}`,
    event_type: o.type ?? 'ai_chunk',
    category: o.category ?? 'MESSAGE',
    content_json: JSON.stringify(o.content ?? { content: `t${n}` }),
    metadata_json: JSON.stringify(o.metadata ?? {}),
    user_id: o.user ?? '',
  };
}

export interface HttpAnswer<T = Record<string, unknown>> {
  readonly status: number;
  readonly body: T;
  readonly headers: Headers;
}

/** A JSON HTTP call. */
export async function http<T = Record<string, unknown>>(
  url: string,
  init: { method?: string; token?: string } = {},
): Promise<HttpAnswer<T>> {
  const res = await fetch(url, {
    method: init.method ?? 'GET',
    headers: init.token === undefined ? {} : { authorization: `Bearer ${init.token}` },
  });
  const text = await res.text();
  return { status: res.status, body: (text === '' ? {} : JSON.parse(text)) as T, headers: res.headers };
}
