/**
 * Load generator: WebSocket subscribers, one subscription per connection on `/v1/ws`
 * (the broker, or the bare baseline server that answers a subscribe with `live`). Ready
 * once every subscription is live (or, for a catch-up, once connected: it subscribes at
 * `go`); then counts the events each one receives and checks
 * that their seqs run 1, 2, 3, ... with no gap or duplicate. With `expect` > 0 the result
 * comes when every subscription has that many events after the parent's `go` (or at the
 * timeout); with 0 (idle connections) it comes at `go`, telling how many are still open.
 */
import WebSocket from 'ws';
import { type LoadgenIo, runLoadgen } from '../lib/loadgen.js';
import { epochMs } from '../lib/payload.js';

export interface WsSubscribersArgs {
  readonly url: string;
  /** Thread of each connection's subscription; the connection count is its length. */
  readonly threadIds: readonly string[];
  /** Events each subscription must receive; 0 for idle connections. */
  readonly expect: number;
  readonly afterSeq?: number;
  /**
   * Subscribe at `go` rather than before `ready` (a catch-up: its events come before
   * `live`, so the clock must run from the subscribe).
   */
  readonly subscribeOnGo?: boolean;
  /** Give up waiting for the events this long after `go`. */
  readonly timeoutMs: number;
}

export interface WsSubscribersResult {
  readonly connections: number;
  /** Connections still open at the end. */
  readonly open: number;
  /** Epoch ms of the parent's `go` (and of the subscribes, with `subscribeOnGo`). */
  readonly goAtMs: number;
  readonly delivered: number;
  /** Events whose seq was not the previous one + 1 on their subscription. */
  readonly outOfOrder: number;
  /** Subscriptions that received all `expect` events, in order. */
  readonly complete: number;
  /** Epoch ms (performance.timeOrigin + now) of the first and last event received. */
  readonly firstAtMs: number;
  readonly lastAtMs: number;
  readonly errors: string[];
}

/** Connections opened at once: more would overflow the server's accept backlog. */
const OPENING_AT_ONCE = 100;
const SUB_ID = 's0';

async function main(a: WsSubscribersArgs, io: LoadgenIo): Promise<WsSubscribersResult> {
  const n = a.threadIds.length;
  const lastSeq = new Array<number>(n).fill(a.afterSeq ?? 0);
  const sockets: WebSocket[] = [];
  const errors: string[] = [];
  let delivered = 0;
  let outOfOrder = 0;
  let done = 0;
  let live = 0;
  let firstAtMs = Number.NaN;
  let lastAtMs = Number.NaN;
  let onLive: () => void = () => undefined;
  let onDone: () => void = () => undefined;
  const allLive = new Promise<void>((resolve) => {
    onLive = resolve;
  });
  const allDone = new Promise<void>((resolve) => {
    onDone = resolve;
  });

  const subscribe = (i: number) =>
    sockets[i]?.send(
      JSON.stringify({
        type: 'subscribe',
        id: SUB_ID,
        thread_id: a.threadIds[i],
        ...(a.afterSeq === undefined ? {} : { after_seq: a.afterSeq }),
      }),
    );
  const open = (i: number): Promise<void> =>
    new Promise((resolve, reject) => {
      const ws = new WebSocket(a.url, { perMessageDeflate: false });
      sockets[i] = ws;
      ws.on('message', (data) => {
        const f = JSON.parse(data.toString()) as { type: string; event?: { seq: number }; message?: string };
        if (f.type === 'event') {
          const seq = (f.event as { seq: number }).seq;
          if (seq !== (lastSeq[i] as number) + 1) outOfOrder++;
          lastSeq[i] = seq;
          lastAtMs = epochMs();
          if (delivered++ === 0) firstAtMs = lastAtMs;
          if (seq === (a.afterSeq ?? 0) + a.expect && ++done === n) onDone();
        } else if (f.type === 'live') {
          if (++live === n) onLive();
        } else if (f.type === 'error') {
          if (errors.length < 5) errors.push(`connection ${i}: ${f.message}`);
          onLive();
        }
      });
      ws.once('open', () => {
        if (!a.subscribeOnGo) subscribe(i);
        resolve();
      });
      ws.once('error', reject);
      ws.on('close', (code) => {
        if (errors.length < 5 && code !== 1000 && code !== 1005)
          errors.push(`connection ${i} closed: ${code}`);
      });
    });

  for (let i = 0; i < n; i += OPENING_AT_ONCE) {
    await Promise.all(Array.from({ length: Math.min(OPENING_AT_ONCE, n - i) }, (_, k) => open(i + k)));
  }
  if (!a.subscribeOnGo) await allLive;
  if (errors.length > 0) throw new Error(`subscribe failed: ${errors[0]}`);
  io.ready();

  await io.go;
  const goAtMs = epochMs();
  if (a.subscribeOnGo) for (let i = 0; i < n; i++) subscribe(i);
  if (a.expect > 0) {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, a.timeoutMs);
    });
    await Promise.race([allDone, timedOut]);
    clearTimeout(timer);
  }
  const result: WsSubscribersResult = {
    connections: n,
    open: sockets.filter((ws) => ws.readyState === WebSocket.OPEN).length,
    goAtMs,
    delivered,
    outOfOrder,
    complete: a.expect === 0 ? 0 : lastSeq.filter((s) => s === (a.afterSeq ?? 0) + a.expect).length,
    firstAtMs,
    lastAtMs,
    errors,
  };
  for (const ws of sockets) ws.terminate();
  return result;
}

runLoadgen(main);
