/**
 * B-js, the JetStream baseline for ingest: raw nats.js publishes of the same token events
 * as log records, one ack per message, a bounded window in flight, into a fresh stream
 * on the same nats-server the broker uses, from a load-generator process. No broker.
 */

import type { Servers } from '../../test/helpers/stack.js';
import { type CpuMs, coresUsed, cpuPerEvent, cpuSnapshot } from '../lib/cpu.js';
import { forkLoadgen } from '../lib/loadgen.js';
import type { JsPublisherArgs, JsPublisherResult } from '../loadgen/js-publisher.js';

export interface JsBaselineOptions {
  readonly events: number;
  readonly threads: number;
  /** Publishes not yet acked. */
  readonly window: number;
}

export interface JsBaselineResult {
  readonly events: number;
  readonly acked: number;
  readonly ms: number;
  /** Messages acked per second. */
  readonly eventsPerS: number;
  readonly cores: CpuMs | undefined;
  readonly cpuUsPerEvent: Omit<CpuMs, 'other'> | undefined;
}

export async function runJsBaseline(servers: Servers, o: JsBaselineOptions): Promise<JsBaselineResult> {
  await using publisher = await forkLoadgen<JsPublisherResult>('js-publisher', {
    natsUrl: servers.nats.url,
    ...o,
  } satisfies JsPublisherArgs);
  const before = cpuSnapshot([]);
  const t0 = performance.now();
  publisher.go();
  const res = await publisher.result();
  const after = cpuSnapshot([]);
  return {
    events: o.events,
    acked: res.acked,
    ms: res.ms,
    eventsPerS: (res.acked / res.ms) * 1000,
    cores: coresUsed(before, after, performance.now() - t0),
    cpuUsPerEvent: cpuPerEvent(before, after, res.acked),
  };
}
