/**
 * B-ws, the WebSocket baseline for fan-out (K = 1,000) and catch-up (K = 1): a bare `ws`
 * server in its own process sends N pre-serialised event frames, exactly the broker's
 * frames, to K clients as fast as their sockets take them. The clients are the broker
 * scenarios' own (bench/loadgen/ws-subscribers.ts), in load-generator processes.
 *
 * delivered messages/s = frames received by all clients / (last receipt − start of sending)
 */

import { type CpuMs, coresUsed, cpuPerEvent, cpuSnapshot } from '../lib/cpu.js';
import { forkLoadgen } from '../lib/loadgen.js';
import { startWsLoad } from '../lib/ws-load.js';
import type { WsBaselineServerInfo, WsBaselineServerResult } from '../loadgen/ws-baseline-server.js';

export interface WsBaselineOptions {
  readonly clients: number;
  /** Frames each client receives. */
  readonly events: number;
  /** Load-generator processes the clients are spread over. */
  readonly processes: number;
  readonly timeoutMs: number;
}

export interface WsBaselineResult {
  readonly clients: number;
  readonly events: number;
  readonly delivered: number;
  readonly outOfOrder: number;
  readonly ms: number;
  readonly deliveredPerS: number;
  /** The bare server's CPU is reported as "broker". */
  readonly cores: CpuMs | undefined;
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
}

export async function runWsBaseline(o: WsBaselineOptions): Promise<WsBaselineResult> {
  await using server = await forkLoadgen<WsBaselineServerResult, WsBaselineServerInfo>('ws-baseline-server', {
    clients: o.clients,
    events: o.events,
  });
  await using clients = await startWsLoad(
    `ws://127.0.0.1:${server.info.port}/v1/ws`,
    Array.from({ length: o.clients }, (_, i) => `bws-${i}`),
    o.processes,
    { expect: o.events, timeoutMs: o.timeoutMs },
  );
  const before = cpuSnapshot([server.pid]);
  const t0 = performance.now();
  clients.go();
  server.go();
  const [sent, got] = await Promise.all([server.result(o.timeoutMs), clients.result(o.timeoutMs + 10_000)]);
  const after = cpuSnapshot([server.pid]);
  if (got.errors.length > 0) throw new Error(`B-ws clients: ${got.errors.join('; ')}`);
  const ms = got.lastAtMs - sent.startedAtMs;
  return {
    clients: o.clients,
    events: o.events,
    delivered: got.delivered,
    outOfOrder: got.outOfOrder,
    ms,
    deliveredPerS: (got.delivered / ms) * 1000,
    cores: coresUsed(before, after, performance.now() - t0),
    cpuUsPerEvent: cpuPerEvent(before, after, got.delivered),
  };
}
