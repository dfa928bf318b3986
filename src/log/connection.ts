import { connect, type NatsConnection } from '@nats-io/transport-node';
import type { Logger } from '../logger.js';

export const NATS_RECONNECT_WAIT_MS = 250;
/** Bytes nats.js buffers in a turn before it writes them inline. */
const PENDING_LIMIT_BYTES = 1024 * 1024;

/**
 * Connects to NATS and keeps reconnecting forever: a NATS restart pauses the broker,
 * it does not end it.
 */
export async function connectNats(url: string, name: string, log: Logger): Promise<NatsConnection> {
  const nc = await connect({
    servers: url.split(','),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: NATS_RECONNECT_WAIT_MS,
    waitOnFirstConnect: true,
    pingInterval: 10_000,
    // Capturing an async stack for every request (each JetStream publish) costs ~8% of
    // the broker's CPU at full speed (measured, see docs/benchmarks.md).
    noAsyncTraces: true,
    // nats.js writes its buffer inline once it holds 32 KiB, so a turn's publishes of
    // 27 KB run-batches went out one syscall each (13% of the broker's busy time at full
    // speed). A larger limit lets a turn's publishes share one write. (A connect option
    // nats.js reads but does not declare.)
    ...{ pendingLimit: PENDING_LIMIT_BYTES },
  });
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === 'disconnect' || s.type === 'reconnect' || s.type === 'error') {
        log.warn({ nats: s.type, server: 'server' in s ? s.server : undefined }, `nats ${s.type}`);
      }
    }
  })();
  return nc;
}

/** nats-server's default max_payload, used until the server's INFO says otherwise. */
const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;
/** Room left in a message for its subject and headers. */
const PAYLOAD_HEADROOM_BYTES = 1024;

/** The largest body a message may carry on this connection, headers and subject aside. */
export function maxBodyBytes(nc: NatsConnection): number {
  return (nc.info?.max_payload ?? DEFAULT_MAX_PAYLOAD_BYTES) - PAYLOAD_HEADROOM_BYTES;
}
