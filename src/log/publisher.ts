/**
 * Publishes validated events to the JetStream log: a request's events for one thread and
 * run as one message on that thread+run subject (log-batch.ts), `Nats-Msg-Id` naming the
 * message's content so JetStream drops an identical retry within its duplicate window
 * (Postgres drops the rest).
 *
 * Publishes are queued and issued together once per event-loop turn (setImmediate), in
 * the order they were queued: every request that arrived in one turn shares one socket
 * write to NATS. One write per request cost ~70 µs of syscall time each, over a quarter of
 * the broker's CPU with token-sized requests (docs/benchmarks.md). The log keeps the
 * order of the calls, and a call costs one round trip.
 *
 * JetStream's acks come back on one wildcard subscription of this publisher's inbox,
 * matched by a counter in the reply subject, and are timed out by one sweep a second.
 * That is the JetStream publish protocol without nats.js's per-request machinery (a
 * request object, a timer and two `Error`s per publish, ~15% of the broker's busy time at
 * 5,000 requests/s).
 *
 * nats.js drops whatever it buffered while disconnected when it reconnects, and a publish
 * written just before a connection died may never have arrived. So on every reconnect the
 * publishes still waiting for their ack are issued again, in their original order, under
 * the same `Nats-Msg-Id`: JetStream stores one that arrived the first time only once, and
 * acks it with the original's sequence.
 *
 * In a cluster the connection may stay up while the stream's leader dies: a publish routed
 * to it gets no answer, and those sent while the others elect a new one get "no responders"
 * (503). So a publish without an ack is issued again after {@link DEFAULT_PUBLISH_RETRY_MS}
 * (doubling each time), and one answered 503 after {@link NO_RESPONDERS_RETRY_MS}, same
 * `Nats-Msg-Id`, until its deadline. With a stream name, each publish carries
 * `Nats-Expected-Stream`, so an ack can only come from the thread's partition stream.
 *
 * A retry must not overtake: if a thread's message A were issued again after its next message
 * B was stored, the log would hold B before A, and seqs follow the log. So a thread has one
 * message issued at a time; the ones after it wait for its ack, and fail with it if it fails
 * (the producer sends them again, in order). Messages of different threads go out together as
 * before; a request is one message per thread unless it interleaves runs or is split by size.
 *
 * The messages a thread's line holds when its head is stored go out as one message, as far as
 * they are of the same run, fit max_payload and repeat no event of one another (log-batch.ts:
 * mergeLogBodies): under load, when a thread's tokens arrive faster than JetStream's round
 * trip, they were a message, a stored message and an ack each, and then a message for the
 * persister to read each; merged, they cost that once, so the log batches hard exactly when the
 * broker is busy and not at all when it is not. Each of their calls gets the merged message's ack
 * (its offset). A repeat is never merged with the event it repeats, so a PERSISTED ack still tells
 * a repeat by its different offset; at ACCEPTED a retry is a JetStream duplicate only when neither
 * it nor its original went out merged (docs/protocol.md §5).
 */
import { createInbox, type Msg, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import type { LogRecord } from '../domain/event.js';
import { partitionOf } from '../domain/partition.js';
import { UnavailableError } from '../errors.js';
import { maxBodyBytes } from './connection.js';
import { headerBytes } from './header-bytes.js';
import {
  encodeLogMessages,
  type LogMessage,
  type LogMessageOptions,
  mergedMsgId,
  mergeLogBodies,
} from './log-batch.js';
import { partitionStream } from './streams.js';
import type { Subjects } from './subjects.js';

export const DEFAULT_PUBLISH_TIMEOUT_MS = 10_000;
/** A publish still without an ack this long after it was issued is issued again (then 2×, 4×, …). */
export const DEFAULT_PUBLISH_RETRY_MS = 1_000;
/** Pause before issuing again a publish answered "no responders" (no stream leader, yet). */
export const NO_RESPONDERS_RETRY_MS = 250;
const MAX_RETRY_PAUSE_MS = 4_000;
const SWEEP_INTERVAL_MS = 250;

export interface LogPublisherOptions {
  /**
   * The log's name (RS_STREAM): a publish expects its thread's partition stream
   * (`Nats-Expected-Stream`), so an ack from another stream is refused.
   */
  readonly streamName?: string;
  /** See {@link DEFAULT_PUBLISH_RETRY_MS}. */
  readonly retryMs?: number;
}

/** How one {@link LogPublisher.publish} call's messages are written. */
export interface PublishOptions extends LogMessageOptions {
  /**
   * Makes the messages' ids differ from an earlier publish of the same events (see ingest's
   * republish of deleted events).
   */
  readonly msgIdSuffix?: string;
}

/** JetStream's answer to a publish: where the message is in the stream. */
export interface LogAck {
  /** The message's stream sequence (of the original, for a duplicate). */
  readonly seq: number;
  /** JetStream dropped the message as a repeat within its duplicate window. */
  readonly duplicate: boolean;
}

interface Waiter {
  readonly resolve: (ack: LogAck) => void;
  readonly reject: (err: Error) => void;
  readonly deadline: number;
  /** What was published, to issue it again after a reconnect. */
  readonly subject: string;
  readonly body: string;
  readonly msgId: string;
  /** `Nats-Expected-Stream`, if any. */
  readonly stream: string | undefined;
  /** When it is issued again if no ack came, and the pause after that. */
  retryAt: number;
  retryPauseMs: number;
  /** What the last answer said, for the error at the deadline. */
  lastAnswer?: string;
  /** The thread: one message of it is issued at a time. */
  readonly thread: string;
  /** Waits for the message before it of its thread (not issued yet). */
  held: boolean;
  /** 503 answers so far. */
  noResponders?: number;
  /** The body's UTF-8 bytes, once counted (to merge). */
  bytes?: number;
  /** The events it carries, as `records[i]` for i of `indexes` (read only to merge). */
  readonly records: readonly LogRecord[];
  readonly indexes: readonly number[];
}

interface Queued extends Pick<Waiter, 'resolve' | 'reject'> {
  readonly message: LogMessage;
  readonly records: readonly LogRecord[];
}

/** Adds the waiter's event_ids to `ids`; false (and nothing added) if one is there already. */
function addEventIds(ids: Set<string>, w: Waiter): boolean {
  const eventId = (i: number) => (w.records[i] as LogRecord).event_id;
  if (w.indexes.some((i) => ids.has(eventId(i)))) return false;
  for (const i of w.indexes) ids.add(eventId(i));
  return true;
}

function bodyBytes(w: Waiter): number {
  w.bytes ??= Buffer.byteLength(w.body, 'utf8');
  return w.bytes;
}

function unavailable(err: unknown): never {
  throw new UnavailableError(`the event log did not accept the events: ${(err as Error).message}`, {
    cause: err,
  });
}

export class LogPublisher {
  #queue: Queued[] = [];
  readonly #inbox = createInbox();
  #sub: Subscription | undefined;
  #nextId = 0;
  /** Publishes awaiting their ack (or held behind one of their thread), by id. */
  readonly #waiting = new Map<number, Waiter>();
  /** Per thread with a publish waiting: the ids waiting, the one issued first. */
  readonly #lines = new Map<string, number[]>();
  #sweeper: NodeJS.Timeout | undefined;
  /** No retries go into a connection that is down: nats.js would drop them on reconnect. */
  #connected = true;
  readonly #retryMs: number;

  constructor(
    private readonly nc: NatsConnection,
    private readonly subjects: Subjects,
    private readonly timeoutMs: number = DEFAULT_PUBLISH_TIMEOUT_MS,
    private readonly options: LogPublisherOptions = {},
  ) {
    this.#retryMs = options.retryMs ?? DEFAULT_PUBLISH_RETRY_MS;
    void (async () => {
      // Status events are delivered in a microtask after the connection is back, before any
      // later #flush (a setImmediate): re-issued publishes keep their place in the log.
      for await (const s of nc.status()) {
        if (s.type === 'disconnect') this.#connected = false;
        if (s.type === 'reconnect') {
          this.#connected = true;
          this.#reissue();
        }
      }
    })().catch(() => undefined);
  }

  /**
   * Queues the records' messages (so that callers can order batches by the order of their
   * calls) and returns the promise of one ack per record, in input order: the ack of the
   * message that carries it.
   */
  publish(records: readonly LogRecord[], options: PublishOptions = {}): Promise<LogAck[]> {
    let messages = encodeLogMessages(records, maxBodyBytes(this.nc), options);
    const suffix = options.msgIdSuffix ?? '';
    if (suffix !== '') messages = messages.map((m) => ({ ...m, msgId: `${m.msgId}${suffix}` }));
    if (messages.length === 1) {
      // One message (every request of one thread and run): every record shares its ack.
      return this.#enqueue(messages[0] as LogMessage, records).then(
        (ack) => (records.length === 1 ? [ack] : new Array<LogAck>(records.length).fill(ack)),
        unavailable,
      );
    }
    const acks = messages.map((m) => this.#enqueue(m, records));
    return Promise.all(acks).then((messageAcks) => {
      const perRecord: LogAck[] = new Array(records.length);
      messages.forEach((m, k) => {
        for (const i of m.indexes) perRecord[i] = messageAcks[k] as LogAck;
      });
      return perRecord;
    }, unavailable);
  }

  #enqueue(message: LogMessage, records: readonly LogRecord[]): Promise<LogAck> {
    return new Promise<LogAck>((resolve, reject) => {
      if (this.#queue.push({ message, records, resolve, reject }) === 1) setImmediate(() => this.#flush());
    });
  }

  /** Issues every queued publish in one synchronous pass: nats.js writes them in one flush. */
  #flush(): void {
    const queue = this.#queue;
    this.#queue = [];
    // The SUB goes out before the first PUB on the same connection, so no ack can be missed.
    this.#sub ??= this.nc.subscribe(`${this.#inbox}.*`, { callback: (err, msg) => this.#onAck(err, msg) });
    this.#sweeper ??= setInterval(() => this.#sweep(), SWEEP_INTERVAL_MS).unref();
    const now = Date.now();
    const deadline = now + this.timeoutMs;
    const failed = new Map<string, Error>();
    for (const q of queue) {
      const id = ++this.#nextId;
      const m = q.message;
      const w: Waiter = {
        resolve: q.resolve,
        reject: q.reject,
        deadline,
        subject: this.subjects.log(m.threadId, m.runId),
        body: m.body,
        msgId: m.msgId,
        stream:
          this.options.streamName === undefined
            ? undefined
            : partitionStream(this.options.streamName, partitionOf(m.threadId, this.subjects.partitions)),
        retryAt: now + this.#retryMs,
        retryPauseMs: this.#retryMs,
        thread: m.threadId,
        held: false,
        records: q.records,
        indexes: m.indexes,
      };
      const earlier = failed.get(w.thread);
      if (earlier) {
        // An earlier message of its thread in this flush could not be sent: neither is this one.
        q.reject(new Error(`an earlier message of its thread failed: ${earlier.message}`));
        continue;
      }
      const line = this.#lines.get(w.thread);
      if (line) {
        // Its thread has a message waiting for its ack: this one goes once that one is stored.
        w.held = true;
        line.push(id);
        this.#waiting.set(id, w);
        continue;
      }
      // Recorded before it is sent: should the send throw, #settle fails the rest of its thread too.
      this.#lines.set(w.thread, [id]);
      this.#waiting.set(id, w);
      try {
        this.#send(id, w);
      } catch (err) {
        this.#settle(id, w, err as Error);
        failed.set(w.thread, err as Error);
      }
    }
  }

  /**
   * The issued publish `id` is answered (`err` unset) or has failed: the next one of its thread is
   * issued, or, after a failure, every one after it fails too, so none lands before it.
   */
  #settle(id: number, w: Waiter, err?: Error): void {
    this.#waiting.delete(id);
    const line = this.#lines.get(w.thread) ?? [];
    line.shift();
    if (err) {
      w.reject(err);
      for (const next of line) {
        const n = this.#waiting.get(next);
        this.#waiting.delete(next);
        n?.reject(new Error(`an earlier message of its thread failed: ${err.message}`));
      }
      this.#lines.delete(w.thread);
      return;
    }
    const nextId = line[0];
    const next = nextId === undefined ? undefined : this.#waiting.get(nextId);
    if (nextId === undefined || !next) {
      this.#lines.delete(w.thread);
      return;
    }
    const [headId, head] = this.#mergeHead(line, nextId, next);
    head.held = false;
    head.retryAt = Date.now() + head.retryPauseMs;
    if (!this.#connected) return; // issued with the others on reconnect
    try {
      this.#send(headId, head);
    } catch (sendErr) {
      this.#settle(headId, head, sendErr as Error);
    }
  }

  /**
   * The held messages at the head of a thread's line, as one message where there are several of
   * one run that fit max_payload together (see the file comment); returns the head then. A
   * message carrying an event_id already in the group is not merged: sent apart, a retry of a
   * request stays a JetStream duplicate, and its events' acks still say `duplicate` (a PERSISTED
   * ack tells a repeat by its offset, which a merged repeat would share).
   */
  #mergeHead(line: number[], firstId: number, first: Waiter): [number, Waiter] {
    if (line.length === 1) return [firstId, first]; // nothing waits behind it
    const parts = [first];
    let max = 0;
    let bytes = 0;
    let ids: Set<string> | undefined;
    for (let n = 1; n < line.length; n++) {
      const w = this.#waiting.get(line[n] as number);
      if (!w || w.subject !== first.subject || w.stream !== first.stream) break;
      if (ids === undefined) {
        // Only once there is something to merge.
        max = maxBodyBytes(this.nc);
        bytes = bodyBytes(first);
        ids = new Set();
        addEventIds(ids, first);
      }
      const b = bodyBytes(w);
      if (bytes + b > max || !addEventIds(ids, w)) break;
      bytes += b;
      parts.push(w);
    }
    if (parts.length === 1) return [firstId, first];
    // Only the callers are kept, not the parts' bodies (the merged one holds them all).
    const resolves = parts.map((p) => p.resolve);
    const rejects = parts.map((p) => p.reject);
    const merged: Waiter = {
      resolve: (ack) => {
        for (const resolve of resolves) resolve(ack);
      },
      reject: (err) => {
        for (const reject of rejects) reject(err);
      },
      // Flushed first, so the earliest deadline of them.
      deadline: first.deadline,
      subject: first.subject,
      body: mergeLogBodies(parts.map((p) => p.body)),
      msgId: mergedMsgId(parts.map((p) => p.msgId)),
      stream: first.stream,
      retryAt: first.retryAt,
      retryPauseMs: first.retryPauseMs,
      thread: first.thread,
      held: true,
      bytes,
      records: [],
      indexes: [],
    };
    // The parts leave the line only once the merged message exists.
    for (const id of line.splice(0, parts.length)) this.#waiting.delete(id);
    const id = ++this.#nextId;
    this.#waiting.set(id, merged);
    line.unshift(id);
    return [id, merged];
  }

  #send(id: number, w: Waiter): void {
    const h = headerBytes(
      w.stream === undefined
        ? [['Nats-Msg-Id', w.msgId]]
        : [
            ['Nats-Msg-Id', w.msgId],
            ['Nats-Expected-Stream', w.stream],
          ],
    );
    // Bytes, not the text: nats.js encodes a text with a TextEncoder, whose every call on Node 20
    // allocates an ArrayBuffer of its own (1-3 µs); Buffer.from takes a small one from Node's pool.
    this.nc.publish(w.subject, Buffer.from(w.body, 'utf8'), { reply: `${this.#inbox}.${id}`, headers: h });
  }

  /** Issues every publish still waiting for its ack again, in order (see the file comment). */
  #reissue(): void {
    const now = Date.now();
    for (const [id, w] of [...this.#waiting]) {
      if (w.held || !this.#waiting.has(id)) continue;
      w.retryAt = now + w.retryPauseMs;
      try {
        this.#send(id, w);
      } catch (err) {
        this.#settle(id, w, err as Error);
      }
    }
  }

  #onAck(err: Error | null, msg: Msg): void {
    if (err) {
      // The subscription is gone (connection closed): nothing will be acked.
      for (const w of this.#waiting.values()) w.reject(err);
      this.#waiting.clear();
      this.#lines.clear();
      this.#sub = undefined;
      return;
    }
    const id = Number(msg.subject.slice(this.#inbox.length + 1));
    const w = this.#waiting.get(id);
    if (!w || w.held) return; // timed out already, or an answer to an earlier issue of it
    if (msg.headers?.hasError) {
      // 503: nothing listens on the subject: no stream holds it, or (in a cluster) its
      // leader is gone and the next one is not elected yet. Try again soon, until the deadline.
      w.lastAnswer = `JetStream answered ${msg.headers.code} ${msg.headers.description}`;
      w.retryAt = Date.now() + this.#noResponderPause(w);
      return;
    }
    try {
      const r = JSON.parse(msg.string()) as {
        seq?: number;
        duplicate?: boolean;
        error?: { code?: number; err_code?: number; description?: string };
      };
      if (r.error?.code === 503) {
        // JetStream itself is between leaders ("temporarily unavailable").
        w.lastAnswer = `JetStream answered 503 ${r.error.description ?? ''}`;
        w.retryAt = Date.now() + this.#noResponderPause(w);
        return;
      }
      if (r.error || typeof r.seq !== 'number') {
        this.#settle(
          id,
          w,
          new Error(`JetStream refused the message: ${r.error?.description ?? msg.string()}`),
        );
      } else {
        w.resolve({ seq: r.seq, duplicate: r.duplicate === true });
        this.#settle(id, w);
      }
    } catch (parseErr) {
      this.#settle(id, w, parseErr as Error);
    }
  }

  /** The pause before issuing again a publish answered 503: short at first, then doubling. */
  #noResponderPause(w: Waiter): number {
    const pause = Math.min(w.retryPauseMs, NO_RESPONDERS_RETRY_MS * 2 ** (w.noResponders ?? 0));
    w.noResponders = (w.noResponders ?? 0) + 1;
    return Math.min(pause, MAX_RETRY_PAUSE_MS);
  }

  /** Fails the publishes whose ack is overdue; issues again those due for a retry. */
  #sweep(): void {
    const now = Date.now();
    for (const [id, w] of [...this.#waiting]) {
      // Held ones wait behind a publish of their thread flushed no later: it fails first.
      if (w.held || !this.#waiting.has(id)) continue;
      if (w.deadline <= now) {
        this.#settle(id, w, new Error(w.lastAnswer ?? `no ack from JetStream within ${this.timeoutMs} ms`));
        continue;
      }
      if (w.retryAt > now || !this.#connected) continue;
      w.retryAt = now + w.retryPauseMs;
      w.retryPauseMs = Math.min(w.retryPauseMs * 2, MAX_RETRY_PAUSE_MS);
      try {
        this.#send(id, w);
      } catch (err) {
        this.#settle(id, w, err as Error);
      }
    }
  }
}
