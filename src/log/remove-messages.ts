/**
 * Removes a subject's messages from a stream, up to an offset, one message at a time.
 *
 * Not a filtered purge (`$JS.API.STREAM.PURGE` with `filter` and `seq`): a purge also moves
 * the stream's consumers, and which ones it moves has changed from release to release of
 * nats-server (nats-io/nats-server#3838, #5075, #8572). 2.9.10 moves every consumer of the
 * stream, whatever its filter, to the first message left on the purged subject, or past the
 * stream's end when none is left: the persister reading the partition then skipped every
 * other thread's message it had not yet been delivered (in the log, never stored). Removing
 * single messages moves no consumer.
 *
 * The messages are found by a consumer of their subject alone that reads headers only, so a
 * thread's offsets cost one small delivery each; removals go out a window at a time.
 */
import { randomBytes } from 'node:crypto';
import { AckPolicy, DeliverPolicy, JetStreamApiError, type JetStreamManager } from '@nats-io/jetstream';

/** Removals in flight at once. */
const REMOVE_WINDOW = 128;
/** A fetch of offsets, in messages. */
const FETCH_MESSAGES = 1024;
/**
 * How long one fetch may wait for its messages. The server has them all already, but another
 * delete may be removing some of those it counted, and a fetch then waits out its expiry.
 */
const FETCH_EXPIRES_MS = 1000;

/**
 * The message is gone already (aged out, or removed by another delete): nats-server answers
 * 10057 "no message found" below the stream's first sequence, and 10043 "sequence N not
 * found" inside it.
 */
function isGone(err: unknown): boolean {
  return (
    err instanceof JetStreamApiError &&
    ((err.code === 10057 && /no message found/i.test(err.message)) ||
      (err.code === 10043 && /not found/i.test(err.message)))
  );
}

/** The part of a stream to look in: from `from` (at least 1) up to `upTo`, both included. */
export interface OffsetRange {
  readonly from: number;
  readonly upTo: number;
}

/**
 * Offsets of the messages on `filter` in `stream` within `range`, in order. The server reads
 * the stream from `range.from` on to find them: a thread's first offset spares it the rest of
 * a partition's history (hundreds of thousands of messages at token rates).
 */
async function offsetsOf(
  jsm: JetStreamManager,
  stream: string,
  filter: string,
  { from, upTo }: OffsetRange,
): Promise<number[]> {
  const info = await jsm.consumers.add(stream, {
    name: `rs-offsets-${randomBytes(6).toString('hex')}`,
    filter_subject: filter,
    ...(from > 1
      ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from }
      : { deliver_policy: DeliverPolicy.All }),
    ack_policy: AckPolicy.None,
    headers_only: true,
    mem_storage: true,
    inactive_threshold: 30_000_000_000, // ns: gone by itself if this process dies mid-read
  });
  const offsets: number[] = [];
  try {
    const consumer = await jsm.jetstream().consumers.get(stream, info.name);
    let pending = info.num_pending;
    while (pending > 0) {
      let delivered = 0;
      for await (const m of await consumer.fetch({
        max_messages: Math.min(pending, FETCH_MESSAGES),
        expires: FETCH_EXPIRES_MS,
      })) {
        delivered++;
        pending = m.info.pending;
        if (m.seq > upTo) {
          pending = 0;
          break;
        }
        offsets.push(m.seq);
        if (pending === 0) break;
      }
      if (delivered === 0) {
        // Messages counted at the start may have aged out since; anything else is a fault.
        pending = (await consumer.info()).num_pending;
        if (pending > 0) throw new Error(`the log delivered none of ${pending} messages on ${filter}`);
      }
    }
  } finally {
    await jsm.consumers.delete(stream, info.name).catch(() => undefined);
  }
  return offsets;
}

/** Removes the messages on `filter` in `stream` within `range`; returns how many it removed. */
export async function removeMessages(
  jsm: JetStreamManager,
  stream: string,
  filter: string,
  range: OffsetRange,
): Promise<number> {
  if (range.upTo <= 0 || range.from > range.upTo) return 0;
  const offsets = await offsetsOf(jsm, stream, filter, range);
  let removed = 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < offsets.length) {
      const seq = offsets[next++] as number;
      try {
        if (await jsm.streams.deleteMessage(stream, seq, false)) removed++;
      } catch (err) {
        if (!isGone(err)) throw err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(REMOVE_WINDOW, offsets.length) }, worker));
  return removed;
}
