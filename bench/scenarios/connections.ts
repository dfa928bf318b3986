/**
 * Scenario 6, connections: many idle WebSocket connections, each with one subscription
 * on a thread of its own (threads with no events: the subscription goes live at seq 0),
 * opened from a few load-generator processes. Reports the broker's resident memory
 * growth per connection, VmRSS from /proc after a settling pause, before and after.
 */

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchBroker } from '../lib/bench-broker.js';
import type { Measured } from '../lib/measured.js';
import { type Ratio, withinLimit } from '../lib/ratio.js';
import { startWsLoad } from '../lib/ws-load.js';

export interface ConnectionsOptions {
  readonly connections: number;
  /** Load-generator processes the connections are spread over. */
  readonly processes: number;
  /** Pause before each RSS reading, for the broker's heap to settle. */
  readonly settleMs: number;
  readonly timeoutMs: number;
}

export const CONNECTIONS_LIMIT_KB = 30;

export interface ConnectionsResult extends Measured {
  readonly connections: number;
  /** Connections still open when the memory was read. */
  readonly open: number;
  readonly rssBeforeKb: number;
  readonly rssAfterKb: number;
  readonly kbPerConnection: number;
  /** Time to open and subscribe every connection, ms. */
  readonly openMs: number;
  /** KB per connection vs the 30 KB limit. */
  readonly ratio: Ratio;
}

export async function runConnections(broker: BenchBroker, o: ConnectionsOptions): Promise<ConnectionsResult> {
  const pid = broker.pids[0] as number;
  const tag = randomBytes(4).toString('hex');
  const fromEpoch = Date.now();
  await sleep(o.settleMs);
  const rssBeforeKb = vmRssKb(pid);
  const t0 = performance.now();
  await using conns = await startWsLoad(
    broker.wsUrl,
    Array.from({ length: o.connections }, (_, i) => `idle-${tag}-${i}`),
    o.processes,
    { expect: 0, timeoutMs: o.timeoutMs },
  );
  const openMs = performance.now() - t0;
  await sleep(o.settleMs);
  const rssAfterKb = vmRssKb(pid);
  conns.go();
  const got = await conns.result(o.timeoutMs);
  const kbPerConnection = (rssAfterKb - rssBeforeKb) / o.connections;
  return {
    connections: o.connections,
    open: got.open,
    rssBeforeKb,
    rssAfterKb,
    kbPerConnection,
    openMs,
    ratio: withinLimit(kbPerConnection, CONNECTIONS_LIMIT_KB, 'KB/connection'),
    windowEpochMs: [fromEpoch, Date.now()],
  };
}

function vmRssKb(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]);
}
