/**
 * Whether JetStream can answer: at start-up (a broker started while the cluster elects a
 * leader waits for it instead of exiting) and for `/readyz` (a cluster without quorum
 * keeps client connections but stores nothing, so the node says it is not ready).
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from '../logger.js';

/** The first pause between start-up attempts; it doubles up to the cap. */
export const JETSTREAM_START_RETRY_MIN_MS = 250;
export const JETSTREAM_START_RETRY_MAX_MS = 1_000;
/** How long one start-up attempt waits for each JetStream API answer. */
export const JETSTREAM_START_ATTEMPT_TIMEOUT_MS = 1_000;
/** How long `/readyz` waits for JetStream to describe the log stream. */
export const JETSTREAM_PROBE_TIMEOUT_MS = 1_000;
/** How long one answer of the probe stands, so frequent probes cost one request a second. */
export const JETSTREAM_PROBE_CACHE_MS = 1_000;

/**
 * An error that says JetStream (or the stream's leader) is not answering for now, rather
 * than that the request is wrong: a timeout, no responders (503), or JetStream's own
 * "temporarily unavailable" and "cluster not available" answers during an election.
 */
export function isJetStreamUnavailable(err: unknown): boolean {
  const e = err as { name?: string; code?: unknown; api_error?: { err_code?: number; code?: number } };
  const apiCode = e?.api_error?.err_code;
  if (apiCode === 10008 || apiCode === 10074 || e?.api_error?.code === 503) return true;
  const text = `${e?.name ?? ''} ${String((err as Error)?.message ?? err)}`;
  return /timeout|no responders|503|temporarily unavailable|not available|no suitable peers|leader/i.test(
    text,
  );
}

/**
 * Runs `attempt` until it succeeds, pausing with a doubling backoff (logged) while JetStream
 * is unavailable; any other error is thrown at once. Stops with the signal's reason.
 */
export async function untilJetStreamAnswers<T>(
  what: string,
  attempt: () => Promise<T>,
  log: Logger,
  signal: AbortSignal,
): Promise<T> {
  let pauseMs = JETSTREAM_START_RETRY_MIN_MS;
  for (let n = 1; ; n++) {
    signal.throwIfAborted();
    try {
      const value = await attempt();
      if (n > 1) log.info({ attempts: n }, `${what}: JetStream answered`);
      return value;
    } catch (err) {
      if (!isJetStreamUnavailable(err)) throw err;
      log.warn(
        { err: (err as Error).message, attempt: n, retryInMs: pauseMs },
        `${what}: JetStream is not answering (a leader election?), trying again`,
      );
    }
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, pauseMs);
      signal.addEventListener(
        'abort',
        () => {
          clearTimeout(t);
          resolve();
        },
        { once: true },
      );
    });
    pauseMs = Math.min(pauseMs * 2, JETSTREAM_START_RETRY_MAX_MS);
  }
}

/**
 * Asks JetStream for the log stream's info with a short timeout, and wants an answer that
 * names the stream's leader (on a cluster): a cluster that lost its quorum first answers
 * nothing, then a replica answers alone without a leader; both say no. One answer serves every probe for {@link JETSTREAM_PROBE_CACHE_MS}.
 */
export class JetStreamProbe {
  #last: { at: number; ok: Promise<boolean> } | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly streamName: string,
    private readonly timeoutMs = JETSTREAM_PROBE_TIMEOUT_MS,
    private readonly cacheMs = JETSTREAM_PROBE_CACHE_MS,
  ) {}

  /** true when JetStream described the stream within the timeout (cached briefly). */
  answers(): Promise<boolean> {
    const now = Date.now();
    if (this.#last && now - this.#last.at < this.cacheMs) return this.#last.ok;
    const ok = this.#ask();
    this.#last = { at: now, ok };
    return ok;
  }

  async #ask(): Promise<boolean> {
    try {
      const msg = await this.nc.request(`$JS.API.STREAM.INFO.${this.streamName}`, undefined, {
        timeout: this.timeoutMs,
      });
      const r = JSON.parse(msg.string()) as {
        error?: unknown;
        config?: unknown;
        cluster?: { leader?: string };
      };
      // Without quorum a replica still describes the stream, from its own copy, leaderless.
      const led = r.cluster === undefined || (r.cluster.leader ?? '') !== '';
      return r.error === undefined && r.config !== undefined && led;
    } catch {
      return false;
    }
  }
}
