/**
 * Load generator side of B-ws: a bare `ws` server, in its own process as the broker is.
 * It answers each client's subscribe with `live` (so the clients are the very ones that
 * subscribe to the broker), and on `go` sends every client the same pre-serialised event
 * frames, built as the broker builds them (eventJson + eventFrame), seq 1..N, as fast as
 * each socket takes them: like a real server it bounds what it queues per client and
 * waits for a slow one to drain, rather than buffering without limit.
 */

import { type WebSocket, WebSocketServer } from 'ws';
import { eventJson } from '../../src/domain/event.js';
import { eventFrame, liveFrame } from '../../src/fanout/ws/frames.js';
import { type LoadgenIo, runLoadgen } from '../lib/loadgen.js';
import { epochMs, makeThreads, nextTokenEvent } from '../lib/payload.js';

export interface WsBaselineServerArgs {
  /** Clients to wait for before the parent may say `go`. */
  readonly clients: number;
  /** Frames sent to every client. */
  readonly events: number;
}

export interface WsBaselineServerInfo {
  readonly port: number;
}

export interface WsBaselineServerResult {
  /** Epoch ms when sending began and when the last frame was written to every socket. */
  readonly startedAtMs: number;
  readonly writtenAtMs: number;
}

/** One send in this many carries a callback, to learn how far each socket has written. */
const CHECK_EVERY = 64;
/**
 * Bytes a client may have queued before the server waits for it to drain: the broker's
 * catch-up pauses at 1 MB queued too (src/fanout/connection.ts), and its live fan-out
 * queues up to 16 MB before it cuts a client off.
 */
const MAX_QUEUED_BYTES = 1024 * 1024;

interface Client {
  readonly ws: WebSocket;
  pending: number;
  wake: (() => void) | undefined;
}

async function main(a: WsBaselineServerArgs, io: LoadgenIo): Promise<WsBaselineServerResult> {
  const [thread] = makeThreads(1);
  const createdAt = new Date().toISOString();
  const frames = Array.from({ length: a.events }, (_, i) => {
    const e = nextTokenEvent(thread as NonNullable<typeof thread>);
    return eventFrame(
      's0',
      eventJson({ ...e, category: 'message', user_id: '', created_at: createdAt, seq: i + 1, offset: i + 1 }),
    );
  });

  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, path: '/v1/ws', perMessageDeflate: false });
  await new Promise<void>((resolve) => wss.once('listening', resolve));
  const clients: Client[] = [];
  wss.on('connection', (ws) => {
    const client: Client = { ws, pending: 0, wake: undefined };
    ws.on('message', (data) => {
      const f = JSON.parse(data.toString()) as { type: string; id: string };
      if (f.type !== 'subscribe') return;
      ws.send(liveFrame(f.id, 0));
      clients.push(client);
    });
  });
  const address = wss.address();
  io.ready({
    port: typeof address === 'object' && address !== null ? address.port : 0,
  } satisfies WsBaselineServerInfo);
  await io.go;
  if (clients.length !== a.clients) throw new Error(`${clients.length} of ${a.clients} clients subscribed`);

  const checked = (c: Client) => () => {
    c.pending--;
    c.wake?.();
  };
  const maxPendingChecks = Math.max(
    1,
    Math.floor(MAX_QUEUED_BYTES / (CHECK_EVERY * (frames[0]?.length ?? 1))),
  );
  const startedAtMs = epochMs();
  for (let i = 0; i < frames.length; i++) {
    const frame = frames[i] as string;
    const check = i % CHECK_EVERY === CHECK_EVERY - 1 || i === frames.length - 1;
    for (const c of clients) {
      if (check) {
        c.pending++;
        c.ws.send(frame, checked(c));
      } else {
        c.ws.send(frame);
      }
    }
    if (!check) continue;
    const limit = i === frames.length - 1 ? 0 : maxPendingChecks;
    for (const c of clients) {
      while (c.pending > limit) {
        await new Promise<void>((resolve) => {
          c.wake = resolve;
        });
      }
    }
  }
  return { startedAtMs, writtenAtMs: epochMs() };
}

runLoadgen(main);
