/**
 * Many WebSocket subscribers, spread over a few load-generator processes
 * (bench/loadgen/ws-subscribers.ts, one subscription per connection), started and
 * summed as one: the fan-out, catch-up and connection scenarios and B-ws use it, so the
 * broker and the bare baseline server are measured with the very same clients.
 */
import type { WsSubscribersArgs, WsSubscribersResult } from '../loadgen/ws-subscribers.js';
import { forkLoadgen, type Loadgen } from './loadgen.js';

export interface WsLoad extends AsyncDisposable {
  readonly pids: readonly number[];
  /** Releases every process: they start counting towards their result. */
  go(): void;
  /** Every process's result, summed. */
  result(timeoutMs: number): Promise<WsSubscribersResult>;
}

/**
 * Opens `threadIds.length` connections over `processes` load generators (connection i
 * subscribes to threadIds[i]); resolves once every subscription is live.
 */
export async function startWsLoad(
  url: string,
  threadIds: readonly string[],
  processes: number,
  o: Omit<WsSubscribersArgs, 'url' | 'threadIds'>,
): Promise<WsLoad> {
  const parts = Array.from({ length: processes }, (_, p) => threadIds.filter((_, i) => i % processes === p));
  const started = await Promise.allSettled(
    parts.map((ids) =>
      forkLoadgen<WsSubscribersResult>('ws-subscribers', {
        ...o,
        url,
        threadIds: ids,
      } satisfies WsSubscribersArgs),
    ),
  );
  const loadgens = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = started.find((s) => s.status === 'rejected');
  if (failed) {
    await Promise.all(loadgens.map((l) => l.kill()));
    throw failed.reason;
  }
  return {
    pids: loadgens.map((l) => l.pid),
    go: () => {
      for (const l of loadgens) l.go();
    },
    result: async (timeoutMs) => sumResults(await Promise.all(loadgens.map((l) => l.result(timeoutMs)))),
    async [Symbol.asyncDispose]() {
      await Promise.all(loadgens.map((l: Loadgen) => l.kill()));
    },
  };
}

function sumResults(rs: readonly WsSubscribersResult[]): WsSubscribersResult {
  const sum = (f: (r: WsSubscribersResult) => number) => rs.reduce((a, r) => a + f(r), 0);
  const finite = (xs: number[]) => xs.filter(Number.isFinite);
  return {
    connections: sum((r) => r.connections),
    open: sum((r) => r.open),
    delivered: sum((r) => r.delivered),
    outOfOrder: sum((r) => r.outOfOrder),
    complete: sum((r) => r.complete),
    goAtMs: Math.min(...rs.map((r) => r.goAtMs)),
    firstAtMs: Math.min(...finite(rs.map((r) => r.firstAtMs)), Number.POSITIVE_INFINITY),
    lastAtMs: Math.max(...finite(rs.map((r) => r.lastAtMs)), Number.NEGATIVE_INFINITY),
    errors: rs.flatMap((r) => r.errors).slice(0, 5),
  };
}
