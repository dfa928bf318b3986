/**
 * A client for the History API over HTTP (docs/api.md), for browsers and Node (`fetch`).
 * Pages are ascending with `afterSeq`, descending ("load earlier") with `beforeSeq`, exactly as
 * the broker serves them; `events()` walks a thread from a cursor to its head.
 */
import { RunstreamError } from './errors.js';
import type { Category, ChatMessage, RunRecord, RunStatus, WireEvent } from './types.js';

export interface HistoryClientOptions {
  /** The broker's HTTP base, e.g. `http://127.0.0.1:8080`. */
  url: string;
  token?: string;
  /** Called before every request; wins over `token`. */
  getToken?: () => string | Promise<string>;
  /** Default: `globalThis.fetch`. */
  fetch?: typeof fetch;
  /**
   * The largest answer read (default 64 MiB; the broker's pages are at most its
   * `RS_MAX_PAGE_BYTES`, 2 MiB, of content): a longer one is cut off with `resource_exhausted`.
   */
  maxResponseBytes?: number;
}

export const DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

export interface PageQuery {
  afterSeq?: number;
  beforeSeq?: number;
  /** 1–1000; the broker's default is 100. */
  limit?: number;
  userId?: string;
}

export interface EventsQuery extends PageQuery {
  runId?: string;
  categories?: readonly Category[];
  eventTypes?: readonly string[];
  /** Long-poll: wait up to this long (≤ 60 000) for the first events past `afterSeq`. */
  waitMs?: number;
  signal?: AbortSignal;
}

export interface EventsPage {
  events: WireEvent[];
  /** Ascending pages: the next `afterSeq`. It covers filtered-out events too. */
  next_after_seq?: number;
  /** Descending pages: the next `beforeSeq`. */
  next_before_seq?: number;
  has_more: boolean;
  /** A run's long-poll (`runId` and `waitMs`), once the run has ended by the cursor: its end. */
  end?: { run_id: string; seq: number; status: RunStatus };
}

export interface ChatPage {
  messages: ChatMessage[];
  next_after_seq?: number;
  next_before_seq?: number;
  has_more: boolean;
}

export interface RunsPage {
  runs: RunRecord[];
  next_before_seq: number | null;
  has_more: boolean;
}

export interface DeleteResult {
  thread_id: string;
  run_id?: string;
  deleted_events: number;
  deleted_runs: number;
  purged_messages: number;
  head_seq: number;
}

type Params = Record<string, string | number | readonly string[] | undefined>;

export class HistoryClient {
  readonly #base: string;
  readonly #opts: HistoryClientOptions;
  readonly #fetch: typeof fetch;

  constructor(opts: HistoryClientOptions) {
    this.#base = opts.url.replace(/\/+$/, '');
    this.#opts = opts;
    const f = opts.fetch ?? globalThis.fetch;
    if (f === undefined) throw new RunstreamError('unsupported', 'no fetch: pass { fetch }');
    const max = opts.maxResponseBytes;
    if (max !== undefined && !(Number.isSafeInteger(max) && max >= 1)) {
      throw new RunstreamError(
        'invalid_argument',
        `maxResponseBytes: must be an integer of at least 1, not ${max}`,
      );
    }
    this.#fetch = f.bind(globalThis);
  }

  /** One page of a thread's events (or one run's, with `runId`). */
  listEvents(threadId: string, q: EventsQuery = {}): Promise<EventsPage> {
    const path =
      q.runId === undefined
        ? `${thread(threadId)}/events`
        : `${thread(threadId)}/runs/${seg(q.runId)}/events`;
    return this.#get<EventsPage>(
      path,
      {
        ...paging(q),
        categories: q.categories,
        event_types: q.eventTypes,
        wait_ms: q.waitMs,
      },
      q.signal,
    );
  }

  /** Every event after `afterSeq` up to the head, page by page, ascending. */
  async *events(
    threadId: string,
    q: Omit<EventsQuery, 'beforeSeq' | 'waitMs'> = {},
  ): AsyncGenerator<WireEvent> {
    let after = q.afterSeq ?? 0;
    for (;;) {
      const page = await this.listEvents(threadId, { ...q, afterSeq: after });
      yield* page.events;
      const next = page.next_after_seq ?? page.events.at(-1)?.seq ?? after;
      if (!page.has_more) return;
      if (!(next > after)) {
        throw new RunstreamError(
          'protocol_error',
          `the broker answered has_more without moving the cursor past ${after}`,
        );
      }
      after = next;
    }
  }

  /** A page of message-category events (or one run's, with `runId`). */
  listMessages(threadId: string, q: PageQuery & { runId?: string } = {}): Promise<EventsPage> {
    const path =
      q.runId === undefined
        ? `${thread(threadId)}/messages`
        : `${thread(threadId)}/runs/${seg(q.runId)}/messages`;
    return this.#get<EventsPage>(path, paging(q));
  }

  /** The chat projection (docs/api.md, the chat projection). */
  listChatMessages(threadId: string, q: PageQuery & { runId?: string } = {}): Promise<ChatPage> {
    const path =
      q.runId === undefined
        ? `${thread(threadId)}/messages`
        : `${thread(threadId)}/runs/${seg(q.runId)}/messages`;
    return this.#get<ChatPage>(path, { ...paging(q), view: 'chat' });
  }

  async countMessages(threadId: string, q: { runId?: string; userId?: string } = {}): Promise<number> {
    const body = await this.#get<{ count: number }>(`${thread(threadId)}/messages/count`, {
      run_id: q.runId,
      user_id: q.userId,
    });
    return body.count;
  }

  getRun(threadId: string, runId: string, q: { userId?: string } = {}): Promise<RunRecord> {
    return this.#get<RunRecord>(`${thread(threadId)}/runs/${seg(runId)}`, { user_id: q.userId });
  }

  listRuns(
    threadId: string,
    q: { beforeSeq?: number; limit?: number; status?: readonly RunStatus[]; userId?: string } = {},
  ): Promise<RunsPage> {
    return this.#get<RunsPage>(`${thread(threadId)}/runs`, {
      before_seq: q.beforeSeq,
      limit: q.limit,
      status: q.status,
      user_id: q.userId,
    });
  }

  deleteThread(threadId: string, q: { userId?: string } = {}): Promise<DeleteResult> {
    return this.#request<DeleteResult>('DELETE', thread(threadId), { user_id: q.userId });
  }

  deleteRun(threadId: string, runId: string, q: { userId?: string } = {}): Promise<DeleteResult> {
    return this.#request<DeleteResult>('DELETE', `${thread(threadId)}/runs/${seg(runId)}`, {
      user_id: q.userId,
    });
  }

  /** Asks the run's producer to stop (docs/protocol.md §13). */
  cancelRun(
    threadId: string,
    runId: string,
    reason?: string,
  ): Promise<{ thread_id: string; run_id: string; event_id: string; offset: number }> {
    return this.#request('POST', `${thread(threadId)}/runs/${seg(runId)}/cancel`, {}, undefined, {
      ...(reason === undefined ? {} : { reason }),
    });
  }

  #get<T>(path: string, params: Params, signal?: AbortSignal): Promise<T> {
    return this.#request<T>('GET', path, params, signal);
  }

  async #request<T>(
    method: string,
    path: string,
    params: Params,
    signal?: AbortSignal,
    body?: unknown,
  ): Promise<T> {
    const url = new URL(this.#base + path);
    for (const [k, v] of Object.entries(params)) {
      if (v === undefined) continue;
      if (typeof v === 'object') {
        if (v.length > 0) url.searchParams.set(k, v.join(','));
      } else url.searchParams.set(k, String(v));
    }
    const headers: Record<string, string> = {};
    const token = this.#opts.getToken ? await this.#opts.getToken() : this.#opts.token;
    if (token) headers.authorization = `Bearer ${token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    try {
      res = await this.#fetch(url, {
        method,
        headers,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        ...(signal === undefined ? {} : { signal }),
      });
    } catch (err) {
      throw new RunstreamError('connection_failed', `${method} ${path}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    const text = await this.#body(res, method, path);
    if (!res.ok) {
      let code = 'internal';
      let message = text;
      try {
        const e = (JSON.parse(text) as { error?: { code?: string; message?: string } }).error;
        code = e?.code ?? code;
        message = e?.message ?? message;
      } catch {
        // Not a runstream error body (a proxy's page): keep the text.
      }
      throw new RunstreamError(code, message, { status: res.status });
    }
    if (text === '') return {} as T;
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new RunstreamError(
        'protocol_error',
        `${method} ${path}: the answer is not JSON: ${text.slice(0, 100)}`,
        {
          status: res.status,
        },
      );
    }
  }

  /** The answer's text, read up to maxResponseBytes. */
  async #body(res: Response, method: string, path: string): Promise<string> {
    const max = this.#opts.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    const declared = Number(res.headers.get('content-length') ?? Number.NaN);
    const tooLarge = (): RunstreamError =>
      new RunstreamError(
        'resource_exhausted',
        `${method} ${path}: the answer is larger than maxResponseBytes (${max})`,
      );
    if (declared > max) {
      await res.body?.cancel().catch(() => undefined);
      throw tooLarge();
    }
    if (res.body === null) return '';
    const reader = res.body.getReader();
    const chunks: Uint8Array[] = [];
    let size = 0;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        size += value.byteLength;
        if (size > max) {
          await reader.cancel().catch(() => undefined);
          throw tooLarge();
        }
        chunks.push(value);
      }
    } catch (err) {
      if (err instanceof RunstreamError) throw err;
      throw new RunstreamError('connection_failed', `${method} ${path}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    const all = new Uint8Array(size);
    let at = 0;
    for (const c of chunks) {
      all.set(c, at);
      at += c.byteLength;
    }
    return new TextDecoder().decode(all);
  }
}

function seg(id: string): string {
  return encodeURIComponent(id);
}

function thread(threadId: string): string {
  return `/v1/threads/${seg(threadId)}`;
}

function paging(q: PageQuery): Params {
  return {
    after_seq: q.afterSeq,
    before_seq: q.beforeSeq,
    limit: q.limit,
    user_id: q.userId,
  };
}
