/**
 * The persister: stores the partitions of the log it holds leases on (leases.ts), each in
 * log order, with gap-free seqs per thread (batch-assigner.ts); announces what it committed.
 *
 * Partitions: every thread belongs to one (domain/partition.ts), whose log subjects are
 * `<prefix>.log.<p>.<thread>.<run>`. The persisters alive divide the partitions evenly: each
 * renews its leases every fifth of the lease, takes free partitions up to its share
 * (partitions / persisters alive), and lets go of those beyond it, so a persister that joins
 * gets its share within a few renewals, one that stops (SIGTERM) hands its partitions over at
 * once, and the partitions of one that died are taken over once their leases run out.
 *
 * A partition is read with an ordered consumer from its position + 1, so a crash or a
 * handover replays from a position, in log order: events already committed come back as
 * duplicates and take no seq. Messages of every partition held go into one queue while the
 * previous batch is stored, so batches grow with load; a batch's threads are all stored in
 * one transaction that starts with the fence (leases.ts: proves every lease and moves the
 * positions), and a batch is finished before the next starts, so every thread's events are
 * stored in log order. A fenced batch (a lease was taken over) commits nothing: that
 * partition is dropped and the rest of the batch stored. Any other failure (Postgres away, a
 * lost connection) retries the batch with backoff; a persister that cannot renew its leases
 * for a whole lease period drops them and takes partitions again once Postgres answers.
 * Reading pauses while the queue is full, so memory stays bounded.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { type ConsumerMessages, DeliverPolicy, type JetStreamClient, type JsMsg } from '@nats-io/jetstream';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import pg from 'pg';
import type { LogBounds } from '../domain/cursor.js';
import type { LogRecord } from '../domain/event.js';
import { chunkEvents, encodeReceipts } from '../log/announcements.js';
import { maxBodyBytes } from '../log/connection.js';
import { readLogMessage } from '../log/log-batch.js';
import { partitionStream, streamBounds } from '../log/streams.js';
import type { Subjects } from '../log/subjects.js';
import type { Logger } from '../logger.js';
import { type Metrics, secondsSince } from '../metrics.js';
import { endWith, startSpan, traceLinks } from '../tracing.js';
import { storeBatch } from './batch-assigner.js';
import { readCheckpoint, saveCheckpoint } from './checkpoint.js';
import {
  type Adoption,
  acquire,
  adoptLogs,
  ensureLayout,
  FencedError,
  type FenceEntry,
  fence,
  heartbeat,
  holdMemberLock,
  type Lease,
  type LeaseScope,
  type LogFound,
  leave,
  markLegacyDrained,
  reapDead,
  release,
  renew,
  restoreMissing,
  shareOf,
} from './leases.js';
import { REJECTED_EVENT_TYPE, rejectionOf } from './poison.js';
import { withClient } from './pool-client.js';
import { ReceiptWants } from './receipt-wants.js';
import type { PendingEvent, Rejection, ThreadBatchResult } from './seq-assigner.js';

export const RETRY_BASE_MS = 100;
export const RETRY_MAX_MS = 5_000;
/**
 * A partition consumer's pull requests: long, with heartbeats at nats.js's shortest.
 *
 * nats-server (seen on 2.9.10) now and then ends a pull request that expires just as a message
 * arrives without the 408 that tells the client: the message then waits until the client has
 * missed two heartbeats and pulls again. With 2 s pulls (1 s heartbeats) that was a 2 s stall
 * of a partition in about one run in three of the 5,000 events/s bench, i.e. its p99. A request
 * that lives 30 s is refilled (at half: {@link pullMessages}) long before it expires whenever
 * the partition is busy, so busy partitions never see an expiry; and when one is missed, or the
 * server forgot the request (a NATS restart, a node gone), 500 ms heartbeats find it within a
 * second and the consumer is opened again (`#watchPulls`).
 */
export const PULL_EXPIRES_MS = 30_000;
export const PULL_HEARTBEAT_MS = 500;
/** The smallest pull of a partition, in messages (see {@link pullMessages}). */
export const PULL_MIN_MESSAGES = 16;

/**
 * A partition's pull, in messages: its part of a batch. nats.js keeps what a pull brings
 * until it is read, and a partition's reader stops reading while the queue is full, so each
 * partition's pull is held in memory on top of the queue: with a whole batch per partition a
 * persister that cannot store (Postgres away) held one batch per partition, 32 by default.
 * Split, the pulls of all partitions hold about one batch.
 */
export function pullMessages(batchMax: number, partitions: number): number {
  return Math.max(PULL_MIN_MESSAGES, Math.ceil(batchMax / partitions));
}
/**
 * What a partition's consumer reports that has it opened again by the persister (#openConsumer):
 * its pulls went quiet, or nats.js found the consumer or the stream gone and would make the
 * consumer again by itself, from the next sequence, in whatever stream now has the name (one made
 * again numbers from 1: the reader's position says nothing there).
 */
const REOPEN_ON: ReadonlySet<string> = new Set([
  'heartbeats_missed',
  'consumer_deleted',
  'consumer_not_found',
  'stream_not_found',
  'reset',
]);

/** A partition's stream was made again under a reader of the old one. */
class LogRemadeError extends Error {
  constructor(
    readonly partition: number,
    readonly was: string | undefined,
    readonly now: string | undefined,
  ) {
    super('partition log was made again while it was read; letting the partition go to take it again');
  }
}

/**
 * The longest pause between two renewals, whatever the lease: each renewal is also when a dead
 * persister (its connection closed) is noticed and its partitions taken over.
 */
export const MAX_TICK_MS = 1_000;
/** How long the member lock's connection may take to answer a probe before it is replaced. */
const MEMBER_LOCK_PROBE_MS = 1_000;
/** How long one fetch of the older single-subject log waits for messages at an upgrade. */
const LEGACY_FETCH_EXPIRES_MS = 1_000;

export interface PersisterOptions {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly pool: pg.Pool;
  readonly subjects: Subjects;
  readonly streamName: string;
  /** Most events stored in one batch (a batch takes whole log messages, at least one). */
  readonly batchMax: number;
  /** How long a lease lasts unrenewed (RS_PERSISTER_LEASE_MS); renewed every fifth of it. */
  readonly leaseMs: number;
  /** A partition stream's current extent, to check the partition's position against when it is taken. */
  readonly logBounds: (partition: number) => Promise<LogBounds>;
  readonly log: Logger;
  /** Batch sizes and commit latencies. */
  readonly metrics?: Metrics | undefined;
}

/** An event with the partition reader it came from (none: the older single-subject log). */
interface Pending extends PendingEvent {
  readonly reader?: PartitionReader | undefined;
}

/** A log message taken from the log: its offset and its events (none if undecodable). */
interface Taken {
  readonly reader: PartitionReader | undefined;
  readonly offset: number;
  readonly records: readonly LogRecord[];
}

/** One held partition: its lease, its consumer and how far it is stored. */
class PartitionReader {
  /** False once the partition is let go or lost: its queued messages are not stored. */
  current = true;
  /** Last offset stored. */
  position: number;
  /** Last offset taken into the queue. */
  lastQueued: number;
  /** Messages of the partition after the last one taken, when it was taken (the server's count). */
  pending = 0;
  messages: ConsumerMessages | undefined;
  reading: Promise<void> | undefined;
  /** Its consumer was closed to be opened again at once (a NATS reconnect, quiet pulls). */
  reopenNow = false;

  constructor(
    readonly lease: Lease,
    position: number,
    /** Its stream's creation time when it was taken: the log the position counts in. */
    readonly logCreated: string | undefined,
  ) {
    this.position = position;
    this.lastQueued = position;
  }

  get partition(): number {
    return this.lease.partition;
  }
}

export class Persister implements AsyncDisposable {
  readonly #o: PersisterOptions;
  readonly #scope: LeaseScope;
  readonly #readers = new Map<number, PartitionReader>();
  #queue: Taken[] = [];
  /** Events in the queue. */
  #queuedEvents = 0;
  #draining: Promise<void> | undefined;
  /** The batch being stored, if any. */
  #inflight: Promise<void> | undefined;
  /** Log messages taken and not stored yet (queued or in the batch in hand). */
  #unstored = 0;
  /** Readers waiting for room in the queue. */
  #room: (() => void)[] = [];
  /** The events read whose commit receipts a PERSISTED ack waits for. */
  readonly #receiptWants = new ReceiptWants();
  #closed = false;
  #started = false;
  #notices: Subscription | undefined;
  #timer: NodeJS.Timeout | undefined;
  #ticking: Promise<void> | undefined;
  #tickAgain = false;
  /** The connection holding this persister's member lock (leases.ts holdMemberLock). */
  #memberLock: pg.Client | undefined;
  /** When the last renewal that succeeded was sent (performance.now()). */
  #renewedAt = 0;
  /** Events stored since start (not counting duplicates). */
  storedCount = 0;
  /** Events that turned out to be stored already (replays, retries). */
  duplicateCount = 0;
  /** Events the store refused: dead-lettered, a notice stored in their place (poison.ts). */
  rejectedCount = 0;
  /** Refused events whose notice was refused too: only logged. */
  droppedCount = 0;
  /** Batches that found a lease taken over, and committed nothing. */
  fencedCount = 0;
  /** Highest log offset stored (by any partition, or at an upgrade from the older log). */
  position = 0;

  constructor(options: PersisterOptions) {
    this.#o = options;
    this.#scope = {
      stream: options.streamName,
      member: `${hostname()}-${process.pid}-${randomBytes(4).toString('hex')}`,
      leaseMs: options.leaseMs,
    };
  }

  /** This persister's id in `log_partitions.owner` and `persister_members`. */
  get member(): string {
    return this.#scope.member;
  }

  /** The partitions held now, lowest first. */
  get partitions(): number[] {
    return [...this.#readers.keys()].sort((a, b) => a - b);
  }

  /** Log messages of the partitions held not stored yet: taken, and left on the server. */
  get lag(): number {
    let n = this.#unstored;
    for (const r of this.#readers.values()) n += r.pending;
    return n;
  }

  async start(): Promise<void> {
    const { pool, streamName, subjects, nc } = this.#o;
    // Partition streams start after the log from before partitions (log/streams.ts).
    const before = await streamBounds(await this.#o.js.jetstreamManager(), streamName);
    const layout = await ensureLayout(pool, streamName, subjects.partitions, before?.last ?? 0);
    if (!layout.legacyDrained) await this.#drainLegacy();
    this.#started = true;
    this.#notices = nc.subscribe(subjects.persisters, { callback: () => this.#kick() });
    void this.#watchConnection();
    await this.#runTick();
    // The others count this persister from now on: they let go of what is beyond their share.
    this.#notify();
    this.#o.log.info({ member: this.member, partitions: this.partitions.length }, 'persister started');
  }

  /**
   * After a reconnect (a NATS restart, or this connection moved to another node of a cluster)
   * the server may have forgotten the open pulls, and the client would notice only by missed
   * heartbeats: every partition's consumer is opened again at once instead.
   */
  async #watchConnection(): Promise<void> {
    try {
      for await (const s of this.#o.nc.status()) {
        if (this.#closed) return;
        if (s.type !== 'reconnect') continue;
        for (const r of this.#readers.values()) {
          r.reopenNow = true;
          r.messages?.close().catch(() => undefined);
        }
      }
    } catch {
      // The connection closed.
    }
  }

  #notify(): void {
    try {
      this.#o.nc.publish(this.#o.subjects.persisters);
    } catch {
      // The others rebalance at their next renewal anyway.
    }
  }

  /** A rebalance now (a notice from another persister), or as soon as the one running ends. */
  #kick(): void {
    if (this.#closed || !this.#started) return;
    if (this.#ticking) this.#tickAgain = true;
    else this.#schedule(0);
  }

  #schedule(delayMs: number): void {
    clearTimeout(this.#timer);
    if (this.#closed) return;
    this.#timer = setTimeout(() => void this.#runTick(), delayMs);
    this.#timer.unref?.();
  }

  #runTick(): Promise<void> {
    if (this.#ticking) return this.#ticking;
    this.#ticking = this.#tick().finally(() => {
      this.#ticking = undefined;
      const again = this.#tickAgain;
      this.#tickAgain = false;
      this.#schedule(again ? 0 : Math.min(this.#o.leaseMs / 5, MAX_TICK_MS));
    });
    return this.#ticking;
  }

  /** Renews the leases held, drops those lost, and takes or lets go of partitions to the fair share. */
  async #tick(): Promise<void> {
    if (this.#closed) return;
    const { pool, log, subjects } = this.#o;
    const sentAt = performance.now();
    try {
      // Trouble with the lock must not stop the renewal: without it, this persister is only
      // taken over later (its leases run out) rather than at once should it die.
      await this.#holdMemberLock().catch((err: unknown) =>
        log.warn({ err: (err as Error).message }, 'could not hold the persister member lock'),
      );
      const dead = await reapDead(pool, this.#scope);
      if (dead.length > 0)
        log.warn({ dead }, 'persisters gone (their connection is closed): taking their partitions over');
      const members = await heartbeat(pool, this.#scope);
      if (members.rows !== subjects.partitions) await this.#restoreLeases(members.rows);
      const held = await renew(
        pool,
        this.#scope,
        [...this.#readers.values()].map((r) => r.lease),
      );
      this.#renewedAt = sentAt;
      for (const r of [...this.#readers.values()]) {
        if (!held.has(r.partition)) await this.#drop(r, 'its lease was taken over');
      }
      if (this.#closed) return;
      const share = shareOf(subjects.partitions, members);
      if (this.#readers.size > share) {
        const extra = [...this.#readers.values()].sort((a, b) => b.partition - a.partition);
        await this.#letGo(extra.slice(0, this.#readers.size - share));
      } else if (this.#readers.size < share) {
        const taken = await acquire(pool, this.#scope, share - this.#readers.size);
        if (taken.length > 0) await this.#startReaders(taken);
      }
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'could not renew the partition leases');
      if (this.#readers.size > 0 && performance.now() - this.#renewedAt >= this.#o.leaseMs) {
        // Others may hold them by now: stop reading; they are taken again once Postgres answers.
        for (const r of [...this.#readers.values()]) await this.#drop(r, 'its lease could not be renewed');
      }
    }
  }

  /**
   * This persister's member lock, on a connection of its own (outside the pool, so it takes no
   * pool slot), checked every renewal and taken again on a new connection when it was lost or
   * does not answer.
   */
  async #holdMemberLock(): Promise<void> {
    if (this.#closed) return;
    const held = this.#memberLock;
    if (held) {
      const alive = await Promise.race([
        held.query('SELECT 1').then(
          () => true,
          () => false,
        ),
        new Promise<boolean>((resolve) => setTimeout(() => resolve(false), MEMBER_LOCK_PROBE_MS).unref()),
      ]);
      if (alive) return;
      this.#dropMemberLock();
    }
    const client = new pg.Client({ ...this.#o.pool.options, keepAlive: true });
    client.on('error', () => {
      if (this.#memberLock === client) this.#memberLock = undefined;
    });
    try {
      await client.connect();
      if (await holdMemberLock(client, this.#scope)) {
        this.#memberLock = client;
        return;
      }
    } catch (err) {
      client.end().catch(() => undefined);
      throw err;
    }
    client.end().catch(() => undefined);
  }

  /** Ends the lock's connection, which frees the lock (no query that could hang on a dead link). */
  #dropMemberLock(): void {
    const client = this.#memberLock;
    this.#memberLock = undefined;
    client?.end().catch(() => undefined);
  }

  /** The lease store lost rows (wiped or edited by hand): say so, and make the missing ones again. */
  async #restoreLeases(rows: number): Promise<void> {
    const { pool, streamName, subjects, log } = this.#o;
    const made = await restoreMissing(pool, streamName, subjects.partitions);
    if (made.length > 0 || rows > subjects.partitions) {
      log.error(
        { stream: streamName, rows, partitions: subjects.partitions, restored: made },
        `log_partitions holds ${rows} rows for stream ${streamName}, not RS_PARTITIONS=${subjects.partitions}: ` +
          'the lease store was changed outside runstream; missing partitions are made again at position 0 ' +
          '(their logs replay, and what is stored comes back as duplicates)',
      );
    }
  }

  async #startReaders(leases: readonly Lease[]): Promise<void> {
    if (this.#closed) {
      await release(this.#o.pool, this.#scope, leases);
      return;
    }
    const asked = await Promise.allSettled(leases.map((lease) => this.#o.logBounds(lease.partition)));
    const found: LogFound[] = [];
    const bounds = new Map<number, LogBounds>();
    leases.forEach((lease, i) => {
      const answer = asked[i];
      if (answer?.status !== 'fulfilled') return;
      bounds.set(lease.partition, answer.value);
      found.push({ lease, created: answer.value.created ?? '', last: answer.value.last });
    });
    // Leases whose stream could not be asked: given back, for this or another persister's next try.
    let failed: readonly Lease[] = leases.filter((l) => !bounds.has(l.partition));
    let why = String(
      (asked.find((r) => r.status === 'rejected') as PromiseRejectedResult | undefined)?.reason,
    );
    let adoption: Adoption | undefined;
    if (!this.#closed) {
      try {
        adoption = await adoptLogs(this.#o.pool, this.#scope, found, this.#o.subjects.partitions);
      } catch (err) {
        failed = leases;
        why = String(err);
      }
    }
    if (this.#closed) failed = leases;
    const started: Lease[] = [];
    for (const lease of leases) {
      const log = adoption?.logs.get(lease.partition);
      const b = bounds.get(lease.partition);
      if (failed.includes(lease) || !b) continue;
      if (!log) {
        this.#o.log.warn(
          { partition: lease.partition, epoch: lease.epoch },
          'partition taken over while opening it',
        );
        continue;
      }
      const reader = new PartitionReader(lease, log.position, b.created);
      if (log.remade) {
        // Its sequences start again at 1; what the new log holds is read from its start.
        this.#o.log.warn(
          { partition: lease.partition, position: lease.lastOffset, logLast: b.last, logCreated: b.created },
          'partition log was made again; reading it from its start',
        );
      } else if (reader.position + 1 < b.first) {
        this.#o.log.error(
          { partition: lease.partition, position: reader.position, logFirst: b.first },
          'log messages expired (stream max age / limits) before they were persisted',
        );
      }
      // A reader of an older lease of ours (lost, and taken again): stopped first.
      const before = this.#readers.get(lease.partition);
      if (before) await this.#stopReader(before);
      this.#readers.set(lease.partition, reader);
      reader.reading = this.#readForever(reader);
      started.push(lease);
    }
    if (adoption && adoption.clearedThreads > 0) {
      this.#o.log.warn(
        { threads: adoption.clearedThreads },
        "deletion horizons of a log made again (or another stream's) cleared",
      );
    }
    if (failed.length > 0) {
      this.#o.log.warn(
        { partitions: failed.map((l) => l.partition), err: why },
        'could not open partitions; released them',
      );
      await release(this.#o.pool, this.#scope, failed).catch(() => undefined);
    }
    this.#o.log.info(
      { partitions: started.map((l) => l.partition), held: this.#readers.size },
      'took partitions',
    );
  }

  /** Lets partitions go: stops reading them, stores what is in hand, then releases their leases. */
  async #letGo(readers: readonly PartitionReader[]): Promise<void> {
    for (const r of readers) await this.#stopReader(r);
    await this.#inflight?.catch(() => undefined);
    await release(
      this.#o.pool,
      this.#scope,
      readers.map((r) => r.lease),
    );
    this.#o.log.info({ partitions: readers.map((r) => r.partition) }, 'let partitions go');
    this.#notify();
  }

  /** A partition lost (taken over, or its lease not renewed): stop it, store nothing more of it. */
  async #drop(r: PartitionReader, why: string): Promise<void> {
    this.#o.log.warn({ partition: r.partition, epoch: r.lease.epoch }, `dropped a partition: ${why}`);
    await this.#stopReader(r);
  }

  async #stopReader(r: PartitionReader): Promise<void> {
    if (this.#readers.get(r.partition) === r) this.#readers.delete(r.partition);
    r.current = false;
    this.#queue = this.#queue.filter((t) => {
      if (t.reader !== r) return true;
      this.#queuedEvents -= weight(t);
      this.#unstored--;
      return false;
    });
    this.#wake();
    await r.messages?.close().catch(() => undefined);
    await r.reading?.catch(() => undefined);
  }

  /** An ordered consumer of a partition from the message after the last one taken; undefined if let go meanwhile. */
  async #openConsumer(r: PartitionReader): Promise<ConsumerMessages | undefined> {
    // Made again under the same name while this reader had it: its position counts in the old
    // log. The partition is let go, and taken again from the start of the new one (adoptLogs).
    const { created } = await this.#o.logBounds(r.partition);
    if (created !== r.logCreated) throw new LogRemadeError(r.partition, r.logCreated, created);
    const consumer = await this.#o.js.consumers.get(partitionStream(this.#o.streamName, r.partition), {
      // Unique per start: a dead process's consumer lingers until its inactivity threshold.
      name_prefix: `rs-persister-${randomBytes(6).toString('hex')}`,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: r.lastQueued + 1,
    });
    // After a NATS restart the server has forgotten the open pull request, and the client
    // notices only by missed heartbeats: see PULL_EXPIRES_MS.
    const messages = await consumer.consume({
      max_messages: pullMessages(this.#o.batchMax, this.#o.subjects.partitions),
      expires: PULL_EXPIRES_MS,
      idle_heartbeat: PULL_HEARTBEAT_MS,
    });
    if (!r.current || this.#closed) {
      // Let go while opening. (Not awaited: closing messages never iterated waits for ever.)
      messages.close().catch(() => undefined);
      return undefined;
    }
    r.messages = messages;
    void this.#watchPulls(r, messages);
    return messages;
  }

  /**
   * Reopens a partition's consumer at once when its pulls go quiet (two heartbeats missed): the
   * server forgot the pull (a restart), ended it without a word, or the node holding the
   * consumer is gone. nats.js would look for the consumer again itself, but waits up to the
   * pull's expiry (30 s) between looks while the node is away.
   */
  async #watchPulls(r: PartitionReader, messages: ConsumerMessages): Promise<void> {
    try {
      for await (const s of messages.status()) {
        if (!REOPEN_ON.has(s.type) || r.messages !== messages || !r.current || this.#closed) continue;
        this.#o.log.info(
          { partition: r.partition, from: r.lastQueued + 1, status: s.type },
          'partition pull went quiet; reopening',
        );
        r.reopenNow = true;
        messages.close().catch(() => undefined);
        return;
      }
    } catch {
      // The consumer stopped.
    }
  }

  /** Reads a partition until it is let go; if its consumer ends on its own, opens one where it stopped. */
  async #readForever(r: PartitionReader): Promise<void> {
    while (r.current && !this.#closed) {
      try {
        const messages = await this.#openConsumer(r);
        if (messages) await this.#read(r, messages);
      } catch (err) {
        if (err instanceof LogRemadeError && r.current && !this.#closed) {
          this.#o.log.warn({ partition: r.partition, was: err.was, now: err.now }, err.message);
          // Let go once this loop has returned: letting go waits for it.
          setImmediate(() => void this.#letGo([r]).catch(() => undefined));
          return;
        }
        this.#o.log.warn({ err: (err as Error).message, partition: r.partition }, 'reading the log failed');
      }
      if (!r.current || this.#closed) return;
      if (r.reopenNow) {
        r.reopenNow = false;
        continue;
      }
      this.#o.log.warn({ partition: r.partition, from: r.lastQueued + 1 }, 'log reader stopped; reopening');
      await new Promise((resolve) => setTimeout(resolve, RETRY_MAX_MS / 5));
    }
  }

  async #read(r: PartitionReader, messages: ConsumerMessages): Promise<void> {
    for await (const m of messages) {
      if (this.#closed || !r.current) break;
      if (m.seq <= r.lastQueued) continue; // already taken before a reopen
      r.lastQueued = m.seq;
      r.pending = m.info.pending;
      this.#enqueue(this.#decode(m, r));
      while (this.#queuedEvents >= this.#o.batchMax * 2 && r.current && !this.#closed) {
        await new Promise<void>((resolve) => this.#room.push(resolve));
      }
    }
  }

  #enqueue(taken: Taken): void {
    this.#queue.push(taken);
    this.#queuedEvents += weight(taken);
    this.#unstored++;
    this.#draining ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.#drain());
  }

  #wake(): void {
    const waiting = this.#room;
    this.#room = [];
    for (const resolve of waiting) resolve();
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0 && !this.#closed) {
        let n = 0;
        let events = 0;
        while (
          n < this.#queue.length &&
          (n === 0 || events + weight(this.#queue[n] as Taken) <= this.#o.batchMax)
        ) {
          events += weight(this.#queue[n] as Taken);
          n++;
        }
        const batch = this.#queue.splice(0, n);
        this.#queuedEvents -= events;
        this.#wake();
        this.#inflight = this.#storeBatch(batch);
        try {
          await this.#inflight;
        } finally {
          this.#inflight = undefined;
          this.#unstored -= batch.length;
        }
      }
    } finally {
      this.#draining = undefined;
    }
  }

  #decode(m: JsMsg, reader: PartitionReader | undefined): Taken {
    try {
      const { records, receipts } = readLogMessage(m.string());
      // Ingest writes a thread's events on its own subject; anything else was written by
      // someone else, and storing it would put an offset of another stream in the thread.
      const { subjects } = this.#o;
      let checked: LogRecord | undefined;
      for (const r of records) {
        // A message's records share their thread and run: its subject is checked once.
        if (r.thread_id === checked?.thread_id && r.run_id === checked.run_id) continue;
        const own = reader ? subjects.log(r.thread_id, r.run_id) : subjects.legacyLog(r.thread_id, r.run_id);
        if (own !== m.subject)
          throw new Error(`an event of thread ${r.thread_id} on another thread's subject`);
        checked = r;
      }
      if (receipts) this.#receiptWants.add(records);
      return { reader, offset: m.seq, records };
    } catch (err) {
      // Not something ingest wrote: nothing to store, and it must not block the log.
      this.#o.log.error({ err, subject: m.subject, offset: m.seq }, 'skipping undecodable log message');
      return { reader, offset: m.seq, records: [] };
    }
  }

  /** Stores a batch of held partitions' messages; a partition found taken over is dropped from it. */
  async #storeBatch(batch: readonly Taken[]): Promise<void> {
    let items = batch.filter((t) => t.reader?.current);
    while (items.length > 0) {
      const events: Pending[] = [];
      for (const t of items)
        for (const record of t.records) events.push({ record, offset: t.offset, reader: t.reader });
      const entries = fenceEntries(items);
      try {
        if (!(await this.#store(events, entries))) return; // closing: replayed from the position next time
        for (const e of entries) {
          const r = this.#readers.get(e.partition);
          if (r?.lease.epoch === e.epoch) r.position = e.upto;
          this.position = Math.max(this.position, e.upto);
        }
        return;
      } catch (err) {
        if (!(err instanceof FencedError)) throw err;
        this.fencedCount++;
        const lost = new Set(err.lost.map((l) => `${l.partition}/${l.epoch}`));
        for (const r of new Set(items.map((t) => t.reader as PartitionReader))) {
          if (lost.has(`${r.partition}/${r.lease.epoch}`)) await this.#drop(r, 'its lease was taken over');
        }
        items = items.filter((t) => t.reader?.current);
      }
    }
  }

  /**
   * Stores events (in log order) in one transaction whose fence proves `entries`, and
   * announces them per thread; false if given up because the persister is closing. A failure
   * that is Postgres refusing the data splits the events in two halves stored one after the
   * other (so each thread keeps its log order), down to the one refused event, which is
   * dead-lettered (poison.ts); any other failure (Postgres away, a lost connection) is
   * retried with backoff. A {@link FencedError} is thrown to the caller.
   */
  async #store(events: readonly Pending[], entries: readonly FenceEntry[]): Promise<boolean> {
    if (events.length === 0) return this.#retrying(() => fence(this.#o.pool, this.#scope, entries));
    for (let n = 0; ; n++) {
      try {
        const groups = byThread(events);
        const startMs = performance.now();
        // In the traces of the producers whose events it stores (linked: a batch has many).
        const span = startSpan('runstream.persist.batch', {
          attributes: { 'runstream.events': events.length, 'runstream.threads': groups.size },
          links: traceLinks(events.map((e) => e.record.metadata_json)),
        });
        const results = await endWith(
          span,
          withClient(this.#o.pool, (client) => storeBatch(client, groups, { scope: this.#scope, entries })),
        );
        this.#o.metrics?.persistCommitSeconds.observe(secondsSince(startMs));
        this.#o.metrics?.persistBatchEvents.observe(events.length);
        // The batch's announcements say when they were committed (log/announcements.ts).
        const committedAt = this.#o.subjects.committedAt(Date.now());
        for (const [threadId, batch] of groups) {
          const result = results.get(threadId) as ThreadBatchResult;
          this.#count(batch, result);
          this.#announce(threadId, result, committedAt);
        }
        return true;
      } catch (err) {
        if (err instanceof FencedError) throw err;
        if (this.#closed) return false;
        const rejection = rejectionOf(err);
        if (rejection) return this.#isolate(events, entries, rejection);
        if (!(await this.#backoff(n, err, events.length))) return false;
      }
    }
  }

  /** Runs `fn` until it succeeds (a FencedError goes to the caller); false if closing first. */
  async #retrying(fn: () => Promise<void>): Promise<boolean> {
    for (let n = 0; ; n++) {
      try {
        await fn();
        return true;
      } catch (err) {
        if (err instanceof FencedError) throw err;
        if (this.#closed || !(await this.#backoff(n, err, 0))) return false;
      }
    }
  }

  /** Waits before retry `n` of a batch; false if the persister closed meanwhile. */
  async #backoff(n: number, err: unknown, events: number): Promise<boolean> {
    const delay = Math.min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** Math.min(n, 10));
    this.#o.log.warn(
      { err: (err as Error).message, events, retryInMs: delay },
      'storing a batch failed; retrying',
    );
    await new Promise((r) => setTimeout(r, delay));
    return !this.#closed;
  }

  /** Postgres refused something in `events`: store the halves apart, or reject the one event. */
  async #isolate(
    events: readonly Pending[],
    entries: readonly FenceEntry[],
    rejection: Rejection,
  ): Promise<boolean> {
    if (events.length > 1) {
      const half = Math.ceil(events.length / 2);
      const first = events.slice(0, half);
      const second = events.slice(half);
      // The first half moves its partitions' positions only past the messages it holds whole.
      return (await this.#store(first, entriesOf(first, second))) && (await this.#store(second, entries));
    }
    const p = events[0] as Pending;
    if (p.rejection) {
      // The notice and the dead letter were refused too: nothing more can be done with it.
      this.droppedCount++;
      this.#o.log.error(
        { threadId: p.record.thread_id, eventId: p.record.event_id, offset: p.offset, ...rejection },
        'event and its rejection notice refused by the store; event dropped',
      );
      return this.#retrying(() => fence(this.#o.pool, this.#scope, entries));
    }
    // Counted and logged once stored (#count): a copy of an event stored before is only a duplicate.
    return this.#store([{ ...p, rejection }], entries);
  }

  #count(batch: readonly PendingEvent[], result: ThreadBatchResult): void {
    let rejected = 0;
    result.receipts.forEach((r, i) => {
      if (r.rejected === undefined) return;
      rejected++;
      const p = batch[i] as PendingEvent;
      this.#o.log.error(
        { threadId: p.record.thread_id, eventId: p.record.event_id, offset: p.offset, ...p.rejection },
        'event refused by the store: dead-lettered, a notice stored in its place',
      );
    });
    this.rejectedCount += rejected;
    const notices =
      rejected === 0 ? 0 : result.inserted.filter((e) => e.event_type === REJECTED_EVENT_TYPE).length;
    this.storedCount += result.inserted.length - notices;
    this.duplicateCount += batch.length - rejected - (result.inserted.length - notices);
  }

  #announce(threadId: string, r: ThreadBatchResult, committedAt: string): void {
    const { nc, subjects, log } = this.#o;
    // Keep under the server's max_payload: a big batch goes out in several messages.
    const limit = maxBodyBytes(nc);
    try {
      for (const chunk of chunkEvents(r.inserted, limit)) {
        nc.publish(subjects.events(threadId), chunk, { reply: committedAt });
      }
    } catch (err) {
      // Subscribers see the hole at the next event and fill it from Postgres.
      log.warn({ err: (err as Error).message, threadId }, 'could not announce committed events');
    }
    // Only for a PERSISTED ack waiting on one of these events (receipt-wants.ts).
    if (!this.#receiptWants.take(threadId, r.receipts)) return;
    try {
      // As bytes from Node's pool (log/publisher.ts #send says why).
      nc.publish(subjects.receipts(threadId), Buffer.from(encodeReceipts(r.receipts), 'utf8'));
    } catch (err) {
      // PERSISTED waiters time out; a retry with the same event_ids learns the seqs.
      log.warn({ err: (err as Error).message, threadId }, 'could not publish commit receipts');
    }
  }

  /**
   * The log from before partitions (`<prefix>.log.<thread>.<run>`), stored once at an
   * upgrade, before any partition is read, so a run that spans the upgrade keeps its order.
   * One persister does it (a session advisory lock); the others wait for it.
   */
  async #drainLegacy(): Promise<void> {
    const { pool, js, streamName, log, batchMax } = this.#o;
    await withClient(pool, async (lock) => {
      await lock.query("SELECT pg_advisory_lock(hashtextextended('rs-legacy:' || $1, 0))", [streamName]);
      try {
        const { rows } = await lock.query<{ legacy_drained: boolean }>(
          'SELECT legacy_drained FROM log_layout WHERE stream = $1',
          [streamName],
        );
        if (rows[0]?.legacy_drained) return;
        // The stream named RS_STREAM itself, if there is one (log/streams.ts).
        const bounds = await streamBounds(await js.jetstreamManager(), streamName);
        let from = await readCheckpoint(pool, streamName);
        if (bounds && bounds.last > from) {
          log.info({ from: from + 1, to: bounds.last }, 'storing the log written before partitions');
          const consumer = await js.consumers.get(streamName, {
            name_prefix: `rs-persister-legacy-${randomBytes(6).toString('hex')}`,
            deliver_policy: DeliverPolicy.StartSequence,
            opt_start_seq: from + 1,
          });
          // The old stream takes no more messages: read until its last one.
          let pending = bounds.last - from;
          while (from < bounds.last && pending > 0 && !this.#closed) {
            const batch: Taken[] = [];
            for await (const m of await consumer.fetch({
              max_messages: batchMax,
              expires: LEGACY_FETCH_EXPIRES_MS,
            })) {
              batch.push(this.#decode(m, undefined));
              pending = m.info.pending;
            }
            if (batch.length === 0) {
              // A slow server, a leader change: nothing is done until the last message is stored.
              log.warn(
                { from: from + 1, to: bounds.last },
                'no messages from the log written before partitions; asking again',
              );
              continue;
            }
            const events: Pending[] = [];
            for (const t of batch) for (const record of t.records) events.push({ record, offset: t.offset });
            if (!(await this.#store(events, []))) return;
            from = (batch[batch.length - 1] as Taken).offset;
            this.position = Math.max(this.position, from);
            await saveCheckpoint(pool, streamName, from);
            log.info({ upto: from, left: pending }, 'stored part of the log written before partitions');
          }
        }
        if (!this.#closed) await markLegacyDrained(pool, streamName);
      } finally {
        await lock.query("SELECT pg_advisory_unlock(hashtextextended('rs-legacy:' || $1, 0))", [streamName]);
      }
    });
  }

  /**
   * Stops reading, stores the batch in hand, and hands every partition over: its leases
   * released and itself gone from the members, so the others take them at once.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    await this.#ticking?.catch(() => undefined);
    this.#notices?.unsubscribe();
    this.#wake();
    const readers = [...this.#readers.values()];
    for (const r of readers) r.current = false;
    await Promise.all(readers.map((r) => r.messages?.close().catch(() => undefined)));
    await this.#draining;
    await Promise.all(readers.map((r) => r.reading?.catch(() => undefined)));
    if (!this.#started) return;
    try {
      await release(
        this.#o.pool,
        this.#scope,
        readers.map((r) => r.lease),
      );
      await leave(this.#o.pool, this.#scope);
      this.#notify();
    } catch (err) {
      // Their leases run out instead.
      this.#o.log.warn({ err: (err as Error).message }, 'could not hand the partitions over');
    }
    this.#dropMemberLock();
    this.#readers.clear();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Per reader in `items`, its lease and the last offset among them. */
function fenceEntries(items: readonly Taken[]): FenceEntry[] {
  const upto = new Map<PartitionReader, number>();
  for (const t of items) if (t.reader) upto.set(t.reader, Math.max(upto.get(t.reader) ?? 0, t.offset));
  return [...upto].map(([r, offset]) => ({ partition: r.partition, epoch: r.lease.epoch, upto: offset }));
}

/**
 * The fence of `events`, the first part of a batch whose `rest` follows: a partition's
 * position moves to its last message held whole, so a message split between the two parts is
 * read again should the rest never be stored (its stored records come back as duplicates).
 */
function entriesOf(events: readonly Pending[], rest: readonly Pending[]): FenceEntry[] {
  const split = new Set(rest.map((e) => `${e.reader?.partition}/${e.offset}`));
  return fenceEntries(events.map((e) => ({ reader: e.reader, offset: e.offset, records: [] }))).map((f) =>
    split.has(`${f.partition}/${f.upto}`) ? { ...f, upto: f.upto - 1 } : f,
  );
}

/** A message's weight in the queue's bound: its events, and at least 1. */
function weight(t: Taken): number {
  return Math.max(1, t.records.length);
}

/** Events by thread, each thread's in log order. */
function byThread(events: readonly Pending[]): Map<string, Pending[]> {
  const groups = new Map<string, Pending[]>();
  for (const p of events) {
    const g = groups.get(p.record.thread_id);
    if (g) g.push(p);
    else groups.set(p.record.thread_id, [p]);
  }
  return groups;
}
