/**
 * Load generator: the producer, a gRPC `PublishStream` client (src/client/ingest-client.ts)
 * sending token events for many threads over a few streams. Thread i always goes on stream
 * i % streams, so each thread's order holds.
 *
 * Request shape: an agent streams ITS run, so by default each request carries up to
 * `batchSize` events of one thread, round-robin over the threads from request to request.
 * `mixed` restores the old shape for comparison: each request takes tokens round-robin from
 * all of its stream's threads.
 *
 * Two loads, both started by the parent's `go`:
 *  - closed: `events` built before the clock starts, sent as fast as a bounded window of
 *    unacked requests per stream allows (throughput);
 *  - open: a fixed offered rate; every `tickMs` each thread's due events go out as one
 *    request per thread (an agent emitting tokens), never waiting on acks, so a slow broker
 *    shows up as latency, not as a lower rate. Each event carries its send stamp (`t`, epoch
 *    ms) for the subscribers' latency. Before it is ready it primes each thread with one
 *    event (not stamped, not counted in the result).
 * With `linger`, the open load goes through the client library's batching publisher
 * (`@runstream/client`'s `Publisher`, streaming mode, one per stream) instead of raw
 * requests: each event is handed over as it comes, and the publisher sends a thread's events
 * together when they met within `linger` ms or while the thread's previous request was
 * unanswered. Its requests are counted as they leave (a gRPC interceptor); ack latency is then
 * per event, from `publish` to its ack, the linger included.
 * Ready once the client is connected; the ready info says how many events will be delivered.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import * as grpc from '@grpc/grpc-js';
import { type PublishEvent, Publisher } from '@runstream/client/node';
import {
  type AckLevel,
  type Event,
  IngestClient,
  type PublishStream,
} from '../../src/client/ingest-client.js';
import { type LoadgenIo, runLoadgen } from '../lib/loadgen.js';
import { type BenchThread, epochMs, nextTokenEvent, type TokenEvent } from '../lib/payload.js';
import { type BucketCounts, Counts } from '../lib/progress.js';
import { type LatencySummary, summarize } from '../lib/stats.js';

export interface ThreadRef {
  readonly threadId: string;
  readonly runId: string;
}

export interface ClosedLoad {
  readonly kind: 'closed';
  readonly events: number;
  /** Requests per stream sent and not yet acked. */
  readonly window: number;
}

export interface OpenLoad {
  readonly kind: 'open';
  /** Events per second offered, over all threads. */
  readonly rate: number;
  /** Sent, but their acks are not timed (the subscribers drop their latencies too). */
  readonly warmupMs: number;
  readonly durationMs: number;
  readonly tickMs: number;
  /** Give up waiting for acks this long after the last send. */
  readonly drainTimeoutMs: number;
}

export interface ProducerArgs {
  readonly grpcTarget: string;
  readonly threads: readonly ThreadRef[];
  readonly streams: number;
  readonly ack: AckLevel;
  /** The old request shape: tokens of all the stream's threads mixed in each request. */
  readonly mixed: boolean;
  /** Most events in one request. */
  readonly batchSize: number;
  readonly load: ClosedLoad | OpenLoad;
  /** Open load only: send through the client library's Publisher with this linger, ms (see the top). */
  readonly linger?: number;
}

export interface ProducerInfo {
  /** Events the subscribers will receive in all (with the open load's priming events, sent before `go`). */
  readonly events: number;
}

export interface ProducerResult {
  readonly sent: number;
  readonly acked: number;
  readonly requests: number;
  readonly failedRequests: number;
  readonly firstError: string | undefined;
  /** Epoch ms of the first send, the last send and the last ack. */
  readonly firstSendAtMs: number;
  readonly lastSendAtMs: number;
  readonly lastAckAtMs: number;
  /** Events/s sent after the warm-up (open load: the offered rate, if the producer kept up). */
  readonly sentPerS: number;
  readonly meanEventsPerRequest: number;
  /** Send → ack per request, ms (open load: requests sent after the warm-up). */
  readonly ackLatency: LatencySummary;
  /** Open load: how late the producer's ticks woke up, ms (empty for the closed load). */
  readonly tickLateMs: LatencySummary;
  /** Events acked, per 100 ms. */
  readonly acks: BucketCounts;
  /** This process's CPU from `go` to the end, ms. */
  readonly cpuMs: number;
}

const CONNECT_TIMEOUT_MS = 10_000;
const END_TIMEOUT_MS = 5_000;

/** Closed load, per-thread shape: request r carries the next events of thread r mod T. */
function perThreadRequests(threads: readonly BenchThread[], events: number, batchSize: number): Event[][] {
  const requests: Event[][] = [];
  for (let r = 0, left = events; left > 0; r++) {
    const thread = threads[r % threads.length] as BenchThread;
    const n = Math.min(batchSize, left);
    requests.push(Array.from({ length: n }, () => nextTokenEvent(thread)));
    left -= n;
  }
  return requests;
}

/** Closed load, mixed shape: each stream's requests take tokens round-robin from its threads. */
function mixedRequests(own: readonly BenchThread[], events: number, batchSize: number): Event[][] {
  const requests: Event[][] = [];
  let batch: Event[] = [];
  for (let i = 0; i < events; i++) {
    batch.push(nextTokenEvent(own[i % own.length] as BenchThread));
    if (batch.length === batchSize) {
      requests.push(batch);
      batch = [];
    }
  }
  if (batch.length > 0) requests.push(batch);
  return requests;
}

/** Splits `events` into requests of at most `size`. */
function chunks(events: Event[], size: number): Event[][] {
  if (events.length <= size) return [events];
  const out: Event[][] = [];
  for (let i = 0; i < events.length; i += size) out.push(events.slice(i, i + size));
  return out;
}

async function main(a: ProducerArgs, io: LoadgenIo): Promise<ProducerResult> {
  const threads: BenchThread[] = a.threads.map((t, index) => ({ ...t, index, next: 0 }));
  const streamOf = (t: BenchThread) => t.index % a.streams;
  const load = a.load;
  const total =
    load.kind === 'closed' ? load.events : Math.round((load.rate * (load.warmupMs + load.durationMs)) / 1000);

  // Closed load: every request is built before the clock starts, so it measures the broker.
  const planned: Event[][][] = Array.from({ length: a.streams }, () => []);
  if (load.kind === 'closed') {
    if (a.mixed) {
      for (let s = 0; s < a.streams; s++) {
        const share = Math.floor(total / a.streams) + (s < total % a.streams ? 1 : 0);
        planned[s] = mixedRequests(
          threads.filter((t) => streamOf(t) === s),
          share,
          a.batchSize,
        );
      }
    } else {
      const byId = new Map(threads.map((t) => [t.threadId, t]));
      for (const request of perThreadRequests(threads, total, a.batchSize)) {
        const thread = byId.get(request[0]?.thread_id as string) as BenchThread;
        planned[streamOf(thread)]?.push(request);
      }
    }
  }

  using client = new IngestClient(a.grpcTarget);
  await new Promise<void>((resolve, reject) =>
    client.raw.waitForReady(Date.now() + CONNECT_TIMEOUT_MS, (err) => (err ? reject(err) : resolve())),
  );
  const viaPublisher = a.linger !== undefined && load.kind === 'open';
  const streams: PublishStream[] = viaPublisher
    ? []
    : Array.from({ length: a.streams }, () => client.openStream());
  const publishers = viaPublisher ? openPublishers(a, a.linger as number) : undefined;
  // Open load: one event per thread, acked before the clock starts, so every stream is open and
  // each thread's first publish done; otherwise that start-up cost sits in a short run's latencies.
  const priming = load.kind === 'open' ? threads.length : 0;
  if (priming > 0) {
    await Promise.all(
      threads.map((t) =>
        publishers
          ? (publishers.all[streamOf(t)] as Publisher).publish(publishEvent(nextTokenEvent(t)))
          : (streams[streamOf(t)] as PublishStream).send([nextTokenEvent(t)], a.ack),
      ),
    );
  }
  io.ready({ events: total + priming } satisfies ProducerInfo);
  await io.go;
  const requestsBefore = publishers?.requests() ?? 0;

  const cpuBefore = process.cpuUsage();
  const acks = new Counts();
  const ackSamples: number[] = [];
  let sent = 0;
  let acked = 0;
  let requests = 0;
  let failedRequests = 0;
  let firstError: string | undefined;
  let lastAckAtMs = Number.NaN;
  let lastSendAtMs = Number.NaN;
  /** Acks of requests sent from this instant on are timed. */
  let timedFrom = Number.NEGATIVE_INFINITY;
  const pending = new Set<Promise<void>>();
  /** Open load: how late each tick woke up, ms (a starved producer sends late, in bigger bursts). */
  const tickLate: number[] = [];

  /** Sends `n` events by `start` (a request, or one event to a publisher) and times them to their ack. */
  const track = (n: number, start: () => Promise<unknown>): Promise<void> => {
    sent += n;
    const t0 = performance.now();
    lastSendAtMs = performance.timeOrigin + t0;
    const p: Promise<void> = start().then(
      () => {
        const now = performance.now();
        if (t0 >= timedFrom) ackSamples.push(now - t0);
        acked += n;
        lastAckAtMs = performance.timeOrigin + now;
        acks.add(n, lastAckAtMs);
        pending.delete(p);
      },
      (err: unknown) => {
        failedRequests++;
        firstError ??= (err as Error).message;
        pending.delete(p);
      },
    );
    pending.add(p);
    return p;
  };
  const send = (s: number, events: Event[]): Promise<void> => {
    requests++;
    return track(events.length, () => (streams[s] as PublishStream).send(events, a.ack));
  };

  const firstSendAtMs = epochMs();
  let measuredFrom = performance.now();
  /** Events sent before the measured window (open load: the warm-up). */
  let sentBeforeWindow = load.kind === 'closed' ? 0 : -1;
  if (load.kind === 'closed') {
    await Promise.all(
      streams.map(async (_, s) => {
        const inFlight = new Set<Promise<void>>();
        for (const request of planned[s] ?? []) {
          while (inFlight.size >= load.window) await Promise.race(inFlight);
          const p = send(s, request).finally(() => inFlight.delete(p));
          inFlight.add(p);
        }
      }),
    );
  } else {
    const start = performance.now();
    measuredFrom = start + load.warmupMs;
    timedFrom = measuredFrom;
    let next = 0; // event j goes to thread j mod T, and is due at start + j / rate
    while (next < total) {
      const now = performance.now();
      if (sentBeforeWindow < 0 && now >= measuredFrom) sentBeforeWindow = sent;
      const due = Math.min(total, Math.floor(((now - start) * load.rate) / 1000));
      if (due > next) {
        const stamp = epochMs();
        const groups = new Map<number, TokenEvent[]>(); // thread (or stream, if mixed) → its due events
        for (; next < due; next++) {
          const thread = threads[next % threads.length] as BenchThread;
          const key = a.mixed ? streamOf(thread) : thread.index;
          const group = groups.get(key) ?? [];
          group.push(nextTokenEvent(thread, stamp));
          groups.set(key, group);
        }
        for (const [key, events] of groups) {
          const s = a.mixed ? key : key % a.streams;
          if (publishers) {
            const publisher = publishers.all[s] as Publisher;
            for (const e of events) void track(1, () => publisher.publish(publishEvent(e)));
          } else for (const request of chunks(events, a.batchSize)) void send(s, request);
        }
      }
      if (next < total) {
        const asleep = performance.now();
        await sleep(load.tickMs);
        tickLate.push(performance.now() - asleep - load.tickMs);
      }
    }
  }
  const sendEnd = performance.now();
  // Open load: acks still missing after the drain timeout are reported as not acked.
  await (load.kind === 'open'
    ? Promise.race([Promise.all(pending), sleep(load.drainTimeoutMs)])
    : Promise.all(pending));
  const cpu = process.cpuUsage(cpuBefore);
  if (publishers) requests = publishers.requests() - requestsBefore;
  await Promise.race([
    Promise.all([...streams.map((s) => s.end()), ...(publishers?.all ?? []).map((p) => p.close())]),
    sleep(END_TIMEOUT_MS),
  ]);
  for (const p of publishers?.all ?? []) p.abort();

  const measuredSent = sent - Math.max(0, sentBeforeWindow);
  return {
    sent,
    acked,
    requests,
    failedRequests,
    firstError,
    firstSendAtMs,
    lastSendAtMs,
    lastAckAtMs,
    sentPerS: (measuredSent / Math.max(1, sendEnd - measuredFrom)) * 1000,
    meanEventsPerRequest: sent / Math.max(1, requests),
    ackLatency: summarize(ackSamples),
    tickLateMs: summarize(tickLate),
    acks: acks.snapshot(),
    cpuMs: (cpu.user + cpu.system) / 1000,
  };
}

/** A token event as the client library's publisher takes it (same ids, content and metadata). */
function publishEvent(e: TokenEvent): PublishEvent {
  return {
    threadId: e.thread_id,
    runId: e.run_id,
    eventType: e.event_type,
    category: 'message',
    contentJson: e.content_json,
    metadataJson: e.metadata_json,
    eventId: e.event_id,
  };
}

/**
 * One streaming Publisher per stream (grpc-js shares their connection), and the number of
 * requests they have sent so far, counted by an interceptor as each leaves.
 */
function openPublishers(a: ProducerArgs, lingerMs: number): { all: Publisher[]; requests: () => number } {
  let requests = 0;
  const counting: grpc.Interceptor = (options, next) =>
    new grpc.InterceptingCall(next(options), {
      sendMessage: (message, nextSend) => {
        requests++;
        nextSend(message);
      },
    });
  const all = Array.from(
    { length: a.streams },
    () =>
      new Publisher({
        target: a.grpcTarget,
        ack: a.ack,
        lingerMs,
        maxBatchEvents: a.batchSize,
        mode: 'stream',
        // An open load never waits for room (it would stop offering its rate).
        maxQueuedEvents: Number.MAX_SAFE_INTEGER,
        channelOptions: { interceptors: [counting] },
      }),
  );
  return { all, requests: () => requests };
}

runLoadgen(main);
