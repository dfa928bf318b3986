/**
 * A Server-Sent Events client for tests that does what a browser's EventSource does with
 * the bytes (the WHATWG parsing rules: `field: value` lines, `data` lines joined with
 * "\n", a blank line dispatches, `:` lines are comments, the last `id` sticks), but keeps
 * every block, comments included, so tests can assert on all of it.
 */

import type { IncomingMessage } from 'node:http';
import { request } from 'node:http';

/** One dispatched block, as received. */
export interface SseBlock {
  readonly id: string | undefined;
  readonly event: string | undefined;
  readonly data: string | undefined;
  readonly comments: readonly string[];
}

export class SseClient {
  readonly status: number;
  readonly headers: IncomingMessage['headers'];
  readonly blocks: SseBlock[] = [];
  /** The EventSource `lastEventId`: the last `id` field seen, kept across blocks. */
  lastEventId = '';
  /** Resolves when the response ends or the connection drops. */
  readonly ended: Promise<void>;
  /** The body of a non-SSE answer (an HTTP error). */
  body = '';
  readonly res: IncomingMessage;
  #buffer = '';
  #pending: { id?: string; event?: string; data?: string[]; comments: string[] } = { comments: [] };
  #listeners = new Set<() => void>();

  private constructor(res: IncomingMessage) {
    this.res = res;
    this.status = res.statusCode ?? 0;
    this.headers = res.headers;
    res.setEncoding('utf8');
    const sse = (res.headers['content-type'] ?? '').startsWith('text/event-stream');
    res.on('data', (chunk: string) => {
      if (sse) this.#feed(chunk);
      else this.body += chunk;
      for (const l of this.#listeners) l();
    });
    this.ended = new Promise((resolve) => {
      res.on('end', resolve);
      res.on('close', resolve);
      res.on('error', () => resolve());
    });
    void this.ended.then(() => {
      for (const l of this.#listeners) l();
    });
  }

  /** GETs `url` and resolves once the response's headers are in. */
  static open(url: string, headers: Record<string, string> = {}): Promise<SseClient> {
    return new Promise((resolve, reject) => {
      // A connection of its own, as an EventSource has: no reuse of a socket the server may be closing.
      const options = { agent: false, headers: { accept: 'text/event-stream', ...headers } };
      const req = request(url, options, (res) => resolve(new SseClient(res)));
      req.on('error', reject);
      req.end();
    });
  }

  /** Blocks that dispatch an event (they have data), in order. */
  get events(): SseBlock[] {
    return this.blocks.filter((b) => b.data !== undefined);
  }

  /** The parsed data of the events named `event`. */
  dataOf<T = unknown>(event: string): T[] {
    return this.events.filter((b) => b.event === event).map((b) => JSON.parse(b.data as string) as T);
  }

  /** The `id`s of the blocks that carry one, as numbers. */
  get ids(): number[] {
    return this.blocks.filter((b) => b.id !== undefined).map((b) => Number(b.id));
  }

  /** Resolves with the first block (already received or coming) that satisfies `pred`. */
  waitFor(pred: (b: SseBlock) => boolean, what = 'a matching block'): Promise<SseBlock> {
    return new Promise((resolve, reject) => {
      const check = (): boolean => {
        const hit = this.blocks.find(pred);
        if (hit) {
          this.#listeners.delete(listener);
          resolve(hit);
          return true;
        }
        return false;
      };
      let done = false;
      const listener = (): void => {
        if (done || check()) {
          done = true;
          return;
        }
        if (this.res.complete || this.res.destroyed) {
          done = true;
          this.#listeners.delete(listener);
          reject(new Error(`stream ended without ${what}; got ${JSON.stringify(this.blocks.slice(-5))}`));
        }
      };
      this.#listeners.add(listener);
      listener();
    });
  }

  /** Drops the connection, as a client that goes away does. */
  close(): void {
    this.res.destroy();
  }

  #feed(chunk: string): void {
    this.#buffer += chunk;
    for (;;) {
      const nl = this.#buffer.search(/\r\n|\r|\n/);
      if (nl < 0) return;
      const line = this.#buffer.slice(0, nl);
      this.#buffer = this.#buffer.slice(nl + (this.#buffer.startsWith('\r\n', nl) ? 2 : 1));
      this.#line(line);
    }
  }

  #line(line: string): void {
    const p = this.#pending;
    if (line === '') {
      if (p.id !== undefined || p.event !== undefined || p.data !== undefined || p.comments.length > 0) {
        this.blocks.push({ id: p.id, event: p.event, data: p.data?.join('\n'), comments: p.comments });
      }
      this.#pending = { comments: [] };
      return;
    }
    if (line.startsWith(':')) {
      p.comments.push(line.slice(1).trimStart());
      return;
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'id') {
      p.id = value;
      this.lastEventId = value;
    } else if (field === 'event') {
      p.event = value;
    } else if (field === 'data') {
      p.data = [...(p.data ?? []), value];
    }
  }
}
