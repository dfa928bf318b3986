/**
 * Load generator side of B-js: raw nats.js JetStream publishes of the benchmark's token
 * events, as the broker's log records (same JSON, same subjects, same Nats-Msg-Id), one
 * ack per message and a bounded window of publishes in flight, into a fresh stream with
 * the broker's log-stream settings. The stream is deleted at the end.
 */
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { DEFAULT_DUPLICATE_WINDOW_MS, DEFAULT_STREAM_MAX_AGE_MS } from '../../src/config.js';
import type { LogRecord } from '../../src/domain/event.js';
import { ensureLogStream } from '../../src/log/streams.js';
import { msgId, Subjects } from '../../src/log/subjects.js';
import { type LoadgenIo, runLoadgen } from '../lib/loadgen.js';
import { makeThreads, nextTokenEvent } from '../lib/payload.js';

export interface JsPublisherArgs {
  readonly natsUrl: string;
  readonly events: number;
  /** Threads the events go round-robin to (one subject each, as in the broker's log). */
  readonly threads: number;
  /** Publishes sent and not yet acked. */
  readonly window: number;
}

export interface JsPublisherResult {
  readonly acked: number;
  readonly ms: number;
}

async function main(a: JsPublisherArgs, io: LoadgenIo): Promise<JsPublisherResult> {
  const tag = Math.random().toString(36).slice(2, 10);
  const subjects = new Subjects(`bjs${tag}`);
  const streamName = `BJS_${tag}`;
  const threads = makeThreads(a.threads);
  const createdAt = new Date().toISOString();
  const messages = Array.from({ length: a.events }, (_, i) => {
    const t = threads[i % threads.length] as (typeof threads)[number];
    const e = nextTokenEvent(t);
    const record: LogRecord = { ...e, category: 'message', user_id: '', created_at: createdAt };
    return {
      subject: subjects.log(e.thread_id, e.run_id),
      data: JSON.stringify(record),
      id: msgId(e.thread_id, e.run_id, e.event_id),
    };
  });

  const nc = await connect({ servers: a.natsUrl });
  const jsm = await jetstreamManager(nc);
  try {
    await ensureLogStream(jsm, {
      streamName,
      subjects,
      maxAgeMs: DEFAULT_STREAM_MAX_AGE_MS,
      duplicateWindowMs: DEFAULT_DUPLICATE_WINDOW_MS,
      replicas: 1,
    });
    const js = jetstream(nc);
    io.ready();
    await io.go;

    let acked = 0;
    const inFlight = new Set<Promise<void>>();
    const t0 = performance.now();
    for (const m of messages) {
      while (inFlight.size >= a.window) await Promise.race(inFlight);
      const p: Promise<void> = js.publish(m.subject, m.data, { msgID: m.id }).then(() => {
        acked++;
        inFlight.delete(p);
      });
      inFlight.add(p);
    }
    await Promise.all(inFlight);
    return { acked, ms: performance.now() - t0 };
  } finally {
    await jsm.streams.delete(streamName).catch(() => undefined);
    await nc.close();
  }
}

runLoadgen(main);
