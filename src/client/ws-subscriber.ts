/**
 * A raw WebSocket connection for tests and benchmarks: sends frames as given, keeps every
 * frame it receives, and does not reconnect or resume. Applications use the resuming
 * subscriber of `@runstream/client` (clients/typescript) instead.
 */
import WebSocket from 'ws';
import type { ChatFrameData } from './chat-view.js';

export interface WireEvent {
  seq: number;
  offset: number;
  thread_id: string;
  run_id: string;
  event_id: string;
  event_type: string;
  category: 'message' | 'trace' | 'lifecycle';
  user_id: string;
  created_at: string;
  content: unknown;
  metadata: Record<string, unknown>;
}

export type ServerFrame =
  | { type: 'event'; id: string; event: WireEvent }
  | { type: 'live'; id: string; seq: number }
  | {
      type: 'error';
      id: string | null;
      code: string;
      message: string;
      seq?: number;
      cursors?: Record<string, number>;
    }
  | { type: 'unsubscribed'; id: string; seq: number }
  /** The run ended at its terminal event `seq`, with `status` (docs/protocol.md, the run lifecycle). */
  | { type: 'end'; id: string; run_id: string; seq: number; status: string }
  /** A `"view": "chat"` subscription's change to one message (apply it with chat-view.ts ChatView). */
  | ({ type: 'chat'; id: string } & ChatFrameData)
  /** The thread (no run_id) or a run the subscription covers was deleted; the subscription is over. */
  | { type: 'deleted'; id: string; thread_id: string; run_id?: string }
  | {
      /** Answer to a `cancel` frame: the request is stored as this `cancel_requested` event. */
      type: 'cancel_requested';
      id: string;
      thread_id: string;
      run_id: string;
      event_id: string;
      offset: number;
    };

export class WsConnection implements AsyncDisposable {
  readonly ws: WebSocket;
  readonly frames: ServerFrame[] = [];
  #listeners = new Set<(f: ServerFrame) => void>();
  readonly closed: Promise<{ code: number; reason: string }>;

  private constructor(ws: WebSocket) {
    this.ws = ws;
    ws.on('message', (data) => {
      const frame = JSON.parse(data.toString()) as ServerFrame;
      this.frames.push(frame);
      for (const l of this.#listeners) l(frame);
    });
    this.closed = new Promise((resolve) =>
      ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
    );
  }

  /** `token` is sent as `Authorization: Bearer …`; `origin` as the Origin header (as a browser would). */
  static open(url: string, opts: { token?: string; origin?: string } = {}): Promise<WsConnection> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, {
        perMessageDeflate: false,
        ...(opts.token === undefined ? {} : { headers: { authorization: `Bearer ${opts.token}` } }),
        ...(opts.origin === undefined ? {} : { origin: opts.origin }),
      });
      const conn = new WsConnection(ws);
      ws.once('open', () => resolve(conn));
      ws.once('error', reject);
    });
  }

  onFrame(listener: (f: ServerFrame) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  subscribe(id: string, threadId: string, afterSeq?: number): void {
    this.sendRaw({
      type: 'subscribe',
      id,
      thread_id: threadId,
      ...(afterSeq === undefined ? {} : { after_seq: afterSeq }),
    });
  }

  unsubscribe(id: string): void {
    this.sendRaw({ type: 'unsubscribe', id });
  }

  /** Asks the run's producer to stop; answered by a `cancel_requested` or an `error` frame with this `id`. */
  cancel(id: string, threadId: string, runId: string, reason?: string): void {
    this.sendRaw({
      type: 'cancel',
      id,
      thread_id: threadId,
      run_id: runId,
      ...(reason === undefined ? {} : { reason }),
    });
  }

  sendRaw(frame: unknown): void {
    this.ws.send(typeof frame === 'string' ? frame : JSON.stringify(frame));
  }

  /** Resolves with the first frame (from now, or already received) that matches. */
  waitFor(pred: (f: ServerFrame) => boolean, timeoutMs = 30_000): Promise<ServerFrame> {
    const seen = this.frames.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(
          new Error(`no matching frame within ${timeoutMs} ms; last: ${JSON.stringify(this.frames.at(-1))}`),
        );
      }, timeoutMs);
      const off = this.onFrame((f) => {
        if (pred(f)) {
          clearTimeout(timer);
          off();
          resolve(f);
        }
      });
    });
  }

  /** Events received on a subscription, in arrival order. */
  events(subId: string): WireEvent[] {
    return this.frames.flatMap((f) => (f.type === 'event' && f.id === subId ? [f.event] : []));
  }

  async close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return;
    this.ws.close();
    await this.closed;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
