/**
 * What ingest's own codec (src/ingest/wire.ts) saves against the contract's (proto-loader):
 * a `Publish` request decoded from its bytes (both through the server's strict reader where
 * they use one), and its answer of acks encoded; and the persister's reading of a log message
 * (`readLogMessage`). And the log message built and made bytes for nats.js, as its `publish`
 * makes a text (a TextEncoder) and as the publisher hands it over (`Buffer.from`).
 * `node dist/bench/ingest-codec.js [--rounds=7]`.
 *
 * Token-like events of one thread and run, 1 and 100 a request, each way timed in one process,
 * alternated, after a warm-up; the median of the rounds in ns per event.
 */
import { parseArgs } from 'node:util';
import { StrictReader } from '../src/grpc/strict-utf8.js';
import { decodePublishRequest, encodePublishResponse } from '../src/ingest/wire.js';
import { encodeLogMessages, type LogMessage, readLogMessage } from '../src/log/log-batch.js';
import { loadProto } from '../src/proto.js';
import { timeAlternated } from './lib/alternated.js';

const { values: args } = parseArgs({ options: { rounds: { type: 'string', default: '7' } } });
const ROUNDS = Number(args.rounds);
const textEncoder = new TextEncoder();

interface Method {
  requestSerialize(o: unknown): Buffer;
  requestDeserialize(b: Buffer): unknown;
  responseSerialize(o: unknown): Buffer;
}
const publish = (loadProto().packageDefinition['runstream.v1.Ingest'] as unknown as Record<string, Method>)
  .Publish as Method;

const event = (i: number) => ({
  thread_id: 't-3f9a1c',
  run_id: 'run-1',
  event_type: 'ai_chunk',
  category: 'MESSAGE',
  content_json: `{"content":" token ${i}","t":1796528360781.123}`,
  metadata_json: `{"id":"msg-1-${Math.floor(i / 20)}"}`,
  event_id: `ev-${String(i).padStart(6, '0')}`,
});

const logBody = (records: Parameters<typeof encodeLogMessages>[0]) =>
  (encodeLogMessages(records, 1 << 20)[0] as LogMessage).body;

for (const n of [1, 100]) {
  const events = Array.from({ length: n }, (_, i) => event(i));
  const request = publish.requestSerialize({ events, ack: 'ACCEPTED' });
  const answer = {
    acks: events.map((e, i) => ({ event_id: e.event_id, duplicate: false, seq: 0, offset: 1_234_567 + i })),
  };
  const records = events.map((e) => ({
    ...e,
    category: 'message',
    user_id: '',
    created_at: '2026-12-06T05:00:00.123Z',
  }));
  const log = logBody(records);
  const iterations = Math.ceil(300_000 / n);
  const ways: [string, () => unknown][] = [
    ['decode, contract', () => publish.requestDeserialize(new StrictReader(request) as unknown as Buffer)],
    ['decode, wire.ts', () => decodePublishRequest(request)],
    ['encode acks, contract', () => publish.responseSerialize(answer)],
    ['encode acks, wire.ts', () => encodePublishResponse(answer)],
    ['read log message', () => readLogMessage(log)],
    // Built anew each time, as each request's is: a fresh text, not one made flat by a first encode.
    ['log message to bytes, TextEncoder', () => textEncoder.encode(logBody(records))],
    ['log message to bytes, Buffer.from', () => Buffer.from(logBody(records), 'utf8')],
  ];
  const ns = timeAlternated(ways, { rounds: ROUNDS, iterations, items: n });
  const line = [...ns].map(([name, v]) => `${name} ${v.toFixed(0)}`).join(', ');
  console.log(`${n} event(s) a request, ns an event: ${line}`);
}
