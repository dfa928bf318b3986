/**
 * Load generator side of B-path: the broker's path at a fixed rate, built from the bare
 * clients alone (nats.js, pg, ws), none of the broker's code. It measures what the parts
 * cost on this machine, so that scenario 3's latency can be read against a floor:
 *
 *  - `producer`: scenario 3's open load (the same ticks, due rule, threads and events, each
 *    stamped at send) as one JetStream publish per event (timing each event's commit receipt), the broker's log record as JSON with
 *    its `Nats-Msg-Id` and `Nats-Expected-Stream`, into the broker's partition streams;
 *  - `relay`, the broker's stand-in: an ordered pull consumer per partition, as the persister
 *    reads; one queue, drained one statement at a time (everything queued while the previous one
 *    ran, up to the persister's default batch of 2,000 events, in one `unnest` insert into a table `LIKE run_events INCLUDING ALL`, seq counted per
 *    thread in memory: no locks, heads, runs or fence); after each commit one core NATS message
 *    per thread on the thread's subject, read back by a subscription per thread on the same
 *    connection, and each event sent as a WebSocket text frame to the connection that asked
 *    for its thread;
 *    (and, per thread, the committed event_ids on a receipts subject the producer reads, as a
 *    PERSISTED ack waits for them);
 *  - `subscribers`: WebSocket clients, each asking for its share of the threads; every event's
 *    send → receipt latency is recorded.
 *
 * With `closed`, the producer sends scenario 1's load instead (full speed): every message built
 * before the clock starts, `batchSize` events of one thread each (a JSON array of log records),
 * request r carrying the next events of thread r mod T, `window` publishes in flight, as the
 * broker's producer does at full speed; the relay then writes each NATS message's frames to its
 * socket in one write (corked), as the broker's fan-out writes a turn's frames.
 *
 * So each event crosses the processes and servers the broker's does (producer → nats-server →
 * relay → Postgres → relay → nats-server → relay → subscriber), with the least work at each.
 * The gRPC hop into the broker has no stand-in (the producer publishes to JetStream itself),
 * which makes the floor lower still.
 */
import type { Socket } from 'node:net';
import {
  type ConsumerMessages,
  DeliverPolicy,
  type JetStreamClient,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import { connect, headers } from '@nats-io/transport-node';
import pg from 'pg';
import { type WebSocket, WebSocketServer, WebSocket as WsClient } from 'ws';
import {
  DEFAULT_DUPLICATE_WINDOW_MS,
  DEFAULT_PERSIST_BATCH_MAX,
  DEFAULT_STREAM_MAX_AGE_MS,
} from '../../src/config.js';
import type { LogRecord } from '../../src/domain/event.js';
import { partitionOf } from '../../src/domain/partition.js';
import { ensureLogStream, partitionStream } from '../../src/log/streams.js';
import { msgId, Subjects } from '../../src/log/subjects.js';
import { type LoadgenIo, runLoadgen } from '../lib/loadgen.js';
import { type BenchThread, epochMs, nextTokenEvent } from '../lib/payload.js';

export const FLOOR_TABLE = 'bench_floor_events';

interface Common {
  readonly natsUrl: string;
  /** Subject prefix and stream name of this measurement (fresh each time). */
  readonly prefix: string;
  readonly streamName: string;
  readonly partitions: number;
  readonly threads: readonly BenchThread[];
}

export interface ProducerArgs extends Common {
  readonly role: 'producer';
  readonly rate: number;
  readonly tickMs: number;
  /** Sends for warmupMs + durationMs; what is sent in the first warmupMs is not measured. */
  readonly warmupMs: number;
  readonly durationMs: number;
  /** Time each event's commit receipt (the relay sends them only when asked: RelayArgs.receipts). */
  readonly receipts: boolean;
  /** Scenario 1's closed load instead of the fixed rate (see the file comment). */
  readonly closed?: ClosedLoad;
}

export interface ClosedLoad {
  readonly events: number;
  /** Events per message. */
  readonly batchSize: number;
  /** Publishes in flight. */
  readonly window: number;
}

export interface RelayArgs extends Common {
  readonly role: 'relay';
  readonly databaseUrl: string;
  /** Publish each thread's committed event_ids after each commit (as for PERSISTED acks only). */
  readonly receipts: boolean;
}

export interface SubscribersArgs {
  readonly role: 'subscribers';
  readonly wsUrl: string;
  readonly connections: number;
  readonly threads: readonly BenchThread[];
  /** Stop once this many events have arrived, or after `timeoutMs`. */
  readonly expected: number;
  readonly timeoutMs: number;
}

export type PathFloorArgs = ProducerArgs | RelayArgs | SubscribersArgs;

export interface ProducerResult {
  /** Epoch ms of the first publish. */
  readonly firstSendAtMs: number;
  readonly sent: number;
  readonly acked: number;
  readonly failed: number;
  /** The measured window's start, epoch ms: events sent before it are the warm-up. */
  readonly measuredFromMs: number;
  /** Events/s sent in the measured window. */
  readonly sentPerS: number;
  /** Each event's send stamp (epoch ms) and send → commit receipt (ms), in arrival order. */
  readonly receiptSentAtMs: number[];
  readonly receiptLatenciesMs: number[];
}

export interface RelayResult {
  readonly stored: number;
  readonly transactions: number;
  /** The first error storing a batch, if any (the relay then stops storing). */
  readonly error: string | undefined;
  /** Per event read: its send stamp (epoch ms) and send → read from JetStream (ms). */
  readonly readSentAtMs: number[];
  readonly readMs: number[];
  /** Per event stored: its send stamp (epoch ms) and send → committed (ms). */
  readonly committedSentAtMs: number[];
  readonly committedMs: number[];
}

export interface SubscribersResult {
  readonly received: number;
  /** Epoch ms of the last event received. */
  readonly lastReceivedAtMs: number;
  /** Each event's send stamp (epoch ms) and its send → receipt latency (ms), in arrival order. */
  readonly sentAtMs: number[];
  readonly latenciesMs: number[];
}

async function main(
  a: PathFloorArgs,
  io: LoadgenIo,
): Promise<ProducerResult | RelayResult | SubscribersResult> {
  if (a.role === 'producer') return produce(a, io);
  if (a.role === 'relay') return relay(a, io);
  return subscribe(a, io);
}

async function produce(a: ProducerArgs, io: LoadgenIo): Promise<ProducerResult> {
  const subjects = new Subjects(a.prefix, a.partitions);
  const threads = a.threads.map((t) => ({ ...t }));
  const nc = await connect({ servers: a.natsUrl, noAsyncTraces: true });
  const js = jetstream(nc);
  const createdAt = new Date().toISOString();
  let sent = 0;
  let acked = 0;
  let failed = 0;
  const pending = new Set<Promise<unknown>>();
  // The relay's commit receipts, as a PERSISTED ack waits for them: each event's publish → its receipt.
  const stamps = new Map<string, number>();
  const receiptSentAtMs: number[] = [];
  const receiptLatenciesMs: number[] = [];
  if (a.receipts) {
    nc.subscribe(`${a.prefix}.receipts.>`, {
      callback: (_err, msg) => {
        const now = epochMs();
        const thread = msg.subject.slice(`${a.prefix}.receipts.`.length);
        for (const id of msg.string().split(',')) {
          const key = `${thread}/${id}`;
          const at = stamps.get(key);
          if (at === undefined) continue;
          stamps.delete(key);
          receiptSentAtMs.push(at);
          receiptLatenciesMs.push(now - at);
        }
      },
    });
    await nc.flush();
  }
  if (a.closed) {
    const result = await produceClosed(a, a.closed, js, subjects, createdAt, io);
    await nc.close();
    return result;
  }
  io.ready();
  await io.go;
  const firstSendAtMs = epochMs();
  const start = performance.now();
  const measuredFromMs = performance.timeOrigin + start + a.warmupMs;
  const total = Math.floor((a.rate * (a.warmupMs + a.durationMs)) / 1000);
  let sentBeforeWindow = -1;
  let next = 0;
  while (next < total) {
    const now = performance.now();
    if (sentBeforeWindow < 0 && now - start >= a.warmupMs) sentBeforeWindow = sent;
    const due = Math.min(total, Math.floor(((now - start) * a.rate) / 1000));
    if (due > next) {
      // One stamp per tick in the content, as the broker's producer sends its requests.
      const stamp = epochMs();
      for (; next < due; next++) {
        const t = threads[next % threads.length] as BenchThread;
        const e = nextTokenEvent(t, stamp);
        const record: LogRecord = { ...e, category: 'message', user_id: '', created_at: createdAt };
        const h = headers();
        h.set('Nats-Msg-Id', msgId(e.thread_id, e.run_id, e.event_id));
        h.set('Nats-Expected-Stream', partitionStream(a.streamName, partitionOf(e.thread_id, a.partitions)));
        if (a.receipts) stamps.set(`${e.thread_id}/${e.event_id}`, epochMs());
        const p = js
          .publish(subjects.log(e.thread_id, e.run_id), JSON.stringify(record), { headers: h })
          .then(
            () => acked++,
            () => failed++,
          );
        sent++;
        pending.add(p);
        void p.finally(() => pending.delete(p));
      }
    }
    if (next < total) await new Promise((r) => setTimeout(r, a.tickMs));
  }
  const sentPerS = ((sent - Math.max(0, sentBeforeWindow)) / (performance.now() - start - a.warmupMs)) * 1000;
  await Promise.race([Promise.all(pending), new Promise((r) => setTimeout(r, 10_000))]);
  for (let waited = 0; stamps.size > 0 && waited < 10_000; waited += 100)
    await new Promise((r) => setTimeout(r, 100));
  await nc.close();
  return {
    firstSendAtMs,
    sent,
    acked,
    failed,
    measuredFromMs,
    sentPerS,
    receiptSentAtMs,
    receiptLatenciesMs,
  };
}

/** Scenario 1's closed load (see the file comment); times nothing but the first send. */
async function produceClosed(
  a: ProducerArgs,
  c: ClosedLoad,
  js: JetStreamClient,
  subjects: Subjects,
  createdAt: string,
  io: LoadgenIo,
): Promise<ProducerResult> {
  const threads = a.threads.map((t) => ({ ...t }));
  const messages: { subject: string; body: string; id: string; stream: string; events: number }[] = [];
  for (let r = 0, left = c.events; left > 0; r++) {
    const t = threads[r % threads.length] as BenchThread;
    const n = Math.min(c.batchSize, left);
    const records: LogRecord[] = Array.from({ length: n }, () => ({
      ...nextTokenEvent(t),
      category: 'message',
      user_id: '',
      created_at: createdAt,
    }));
    messages.push({
      subject: subjects.log(t.threadId, t.runId),
      body: JSON.stringify(records),
      id: `${msgId(t.threadId, (records[0] as LogRecord).run_id, (records[0] as LogRecord).event_id)}+${n}`,
      stream: partitionStream(a.streamName, partitionOf(t.threadId, a.partitions)),
      events: n,
    });
    left -= n;
  }
  io.ready();
  await io.go;
  const firstSendAtMs = epochMs();
  const start = performance.now();
  let sent = 0;
  let acked = 0;
  let failed = 0;
  let next = 0;
  await Promise.all(
    Array.from({ length: c.window }, async () => {
      while (next < messages.length) {
        const m = messages[next++] as (typeof messages)[number];
        const h = headers();
        h.set('Nats-Msg-Id', m.id);
        h.set('Nats-Expected-Stream', m.stream);
        sent += m.events;
        await js.publish(m.subject, m.body, { headers: h }).then(
          () => {
            acked += m.events;
          },
          () => {
            failed += m.events;
          },
        );
      }
    }),
  );
  const sentPerS = (sent / (performance.now() - start)) * 1000;
  return {
    firstSendAtMs,
    sent,
    acked,
    failed,
    measuredFromMs: firstSendAtMs,
    sentPerS,
    receiptSentAtMs: [],
    receiptLatenciesMs: [],
  };
}

/** The send stamp in an event's content (`,"t":<epoch ms>}` at its end), if it has one. */
function sentStamp(content: string): number | undefined {
  const at = content.lastIndexOf(',"t":');
  return at < 0 ? undefined : Number(content.slice(at + 5, -1));
}

interface Queued {
  readonly thread: string;
  readonly offset: number;
  readonly record: LogRecord;
  /** The producer's send stamp (epoch ms), from the content; none in the closed load. */
  readonly sentAt: number | undefined;
}

async function relay(a: RelayArgs, io: LoadgenIo): Promise<RelayResult> {
  const subjects = new Subjects(a.prefix, a.partitions);
  const nc = await connect({ servers: a.natsUrl, noAsyncTraces: true });
  const jsm = await jetstreamManager(nc);
  await ensureLogStream(jsm, {
    streamName: a.streamName,
    subjects,
    maxAgeMs: DEFAULT_STREAM_MAX_AGE_MS,
    duplicateWindowMs: DEFAULT_DUPLICATE_WINDOW_MS,
    replicas: 1,
  });
  const client = new pg.Client({ connectionString: a.databaseUrl });
  await client.connect();

  // Subscribers ask for their threads; each thread's events go to the socket that asked.
  const sockets = new Map<string, WebSocket>();
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  wss.on('connection', (ws) => {
    ws.on('message', (data) => {
      for (const t of JSON.parse(String(data)) as string[]) sockets.set(t, ws);
      ws.send('ok');
    });
  });
  await new Promise<void>((resolve) => wss.once('listening', () => resolve()));
  const port = (wss.address() as { port: number }).port;
  for (const t of a.threads) {
    nc.subscribe(`${a.prefix}.floor.${t.threadId}`, {
      callback: (_err, msg) => {
        const ws = sockets.get(t.threadId);
        if (!ws) return;
        const lines = msg.string().split('\x1e');
        if (lines.length === 1) {
          ws.send(lines[0] as string);
          return;
        }
        // ws has no cork of its own: its socket's, so the message's frames leave in one write.
        const socket = (ws as unknown as { _socket: Socket })._socket;
        socket.cork();
        for (const line of lines) ws.send(line);
        process.nextTick(() => socket.uncork());
      },
    });
  }
  await nc.flush();

  const queue: Queued[] = [];
  const stamps = {
    readSentAtMs: [] as number[],
    readMs: [] as number[],
    committedSentAtMs: [] as number[],
    committedMs: [] as number[],
  };
  const seqs = new Map<string, number>();
  let stored = 0;
  let transactions = 0;
  let draining: Promise<void> | undefined;
  let closed = false;
  let error: string | undefined;
  const drain = async (): Promise<void> => {
    while (queue.length > 0 && !closed && error === undefined) {
      // At most the broker's batch (RS_PERSIST_BATCH_MAX's default), as the persister takes them.
      const batch = queue.splice(0, Math.min(queue.length, DEFAULT_PERSIST_BATCH_MAX));
      const cols = {
        thread: [] as string[],
        seq: [] as number[],
        eventId: [] as string[],
        runId: [] as string[],
        eventType: [] as string[],
        content: [] as string[],
        metadata: [] as string[],
        offset: [] as number[],
        createdAt: [] as string[],
      };
      const lines = new Map<string, string[]>();
      const receipts = new Map<string, string[]>();
      for (const q of batch) {
        const seq = (seqs.get(q.thread) ?? 0) + 1;
        seqs.set(q.thread, seq);
        const r = q.record;
        cols.thread.push(q.thread);
        cols.seq.push(seq);
        cols.eventId.push(r.event_id);
        cols.runId.push(r.run_id);
        cols.eventType.push(r.event_type);
        cols.content.push(r.content_json);
        cols.metadata.push(r.metadata_json);
        cols.offset.push(q.offset);
        cols.createdAt.push(r.created_at);
        const json = `{"seq":${seq},"thread_id":"${q.thread}","content":${r.content_json}}`;
        const list = lines.get(q.thread);
        if (list) list.push(json);
        else lines.set(q.thread, [json]);
        const ids = receipts.get(q.thread);
        if (ids) ids.push(r.event_id);
        else receipts.set(q.thread, [r.event_id]);
      }
      await client.query({
        name: 'floor_insert',
        text: `INSERT INTO ${FLOOR_TABLE}
                 (thread_id, seq, event_id, run_id, event_type, category, user_id, created_at, content, metadata,
                  stream_offset)
               SELECT x.thread_id, x.seq, x.event_id, x.run_id, x.event_type, 1, '', x.created_at, x.content::json,
                      x.metadata::json, x.stream_offset
                 FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
                             $7::text[], $8::text[], $9::int8[])
                      AS x(thread_id, seq, event_id, run_id, event_type, created_at, content, metadata, stream_offset)`,
        values: [
          cols.thread,
          cols.seq,
          cols.eventId,
          cols.runId,
          cols.eventType,
          cols.createdAt,
          cols.content,
          cols.metadata,
          cols.offset,
        ],
      });
      stored += batch.length;
      transactions++;
      const committedAt = epochMs();
      for (const q of batch) {
        if (q.sentAt === undefined) continue;
        stamps.committedSentAtMs.push(q.sentAt);
        stamps.committedMs.push(committedAt - q.sentAt);
      }
      for (const [thread, list] of lines) nc.publish(`${a.prefix}.floor.${thread}`, list.join('\x1e'));
      if (a.receipts) {
        for (const [thread, ids] of receipts) nc.publish(`${a.prefix}.receipts.${thread}`, ids.join(','));
      }
    }
  };
  const startDrain = (): void => {
    draining ??= drain()
      .catch((err: unknown) => {
        error ??= (err as Error).message;
      })
      .finally(() => {
        draining = undefined;
        // Read while the last statement's promise settled: not left for the next message.
        if (queue.length > 0 && !closed) setImmediate(startDrain);
      });
  };

  const js = jetstream(nc);
  const readers: Promise<void>[] = [];
  const consumers: ConsumerMessages[] = [];
  for (let p = 0; p < a.partitions; p++) {
    const consumer = await js.consumers.get(partitionStream(a.streamName, p), {
      name_prefix: `floor-${p}`,
      deliver_policy: DeliverPolicy.All,
    });
    const messages = await consumer.consume({ max_messages: 63, expires: 30_000, idle_heartbeat: 500 });
    consumers.push(messages);
    readers.push(
      (async () => {
        for await (const m of messages) {
          const parsed = JSON.parse(m.string()) as LogRecord | LogRecord[];
          const readAt = epochMs();
          for (const record of Array.isArray(parsed) ? parsed : [parsed]) {
            const sentAt = sentStamp(record.content_json);
            queue.push({ thread: record.thread_id, offset: m.seq, record, sentAt });
            if (sentAt === undefined) continue;
            stamps.readSentAtMs.push(sentAt);
            stamps.readMs.push(readAt - sentAt);
          }
          // As the persister: the next turn's drain takes everything queued by then.
          if (!draining) setImmediate(startDrain);
        }
      })(),
    );
  }
  io.ready({ wsUrl: `ws://127.0.0.1:${port}` });
  await io.go; // the parent's second word: stop
  closed = true;
  for (const c of consumers) await c.close().catch(() => undefined);
  await Promise.allSettled(readers);
  await draining;
  wss.close();
  await client.end().catch(() => undefined);
  await nc.close();
  return { stored, transactions, error, ...stamps };
}

async function subscribe(a: SubscribersArgs, io: LoadgenIo): Promise<SubscribersResult> {
  const sentAtMs: number[] = [];
  const latenciesMs: number[] = [];
  let received = 0;
  let lastReceivedAtMs = Number.NaN;
  let done: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => {
    done = resolve;
  });
  const sockets = await Promise.all(
    Array.from({ length: a.connections }, async (_, c) => {
      const ws = new WsClient(a.wsUrl);
      await new Promise<void>((resolve, reject) => {
        ws.once('open', () => resolve());
        ws.once('error', reject);
      });
      const mine = a.threads.filter((t) => t.index % a.connections === c).map((t) => t.threadId);
      const acked = new Promise<void>((resolve) => ws.once('message', () => resolve()));
      ws.send(JSON.stringify(mine));
      await acked;
      ws.on('message', (data) => {
        const now = epochMs();
        const t = (JSON.parse(String(data)) as { content: { t?: number } }).content.t;
        received++;
        lastReceivedAtMs = now;
        if (t !== undefined) {
          sentAtMs.push(t);
          latenciesMs.push(now - t);
        }
        if (received >= a.expected) done();
      });
      return ws;
    }),
  );
  io.ready();
  await Promise.race([finished, new Promise((r) => setTimeout(r, a.timeoutMs))]);
  for (const ws of sockets) ws.close();
  return { received, lastReceivedAtMs, sentAtMs, latenciesMs };
}

runLoadgen(main);
