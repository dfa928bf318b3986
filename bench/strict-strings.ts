/**
 * What checking request strings for UTF-8 costs ingest: a `Publish` request decoded by the
 * server's deserializer from its bytes (protobufjs, lenient: bytes that are not UTF-8 become
 * U+FFFD) against from a {@link StrictReader} (src/grpc/strict-utf8.ts), the broker's way.
 * `node dist/bench/strict-strings.js [--rounds=7]`.
 *
 * Token-like events, 1 and 100 a request, each way timed in one process, alternated, after a
 * warm-up; the median of the rounds in ns per event. Only the gap between the two is the
 * figure to read.
 */
import { parseArgs } from 'node:util';
import { StrictReader } from '../src/grpc/strict-utf8.js';
import { loadProto } from '../src/proto.js';
import { timeAlternated } from './lib/alternated.js';

const { values: args } = parseArgs({ options: { rounds: { type: 'string', default: '7' } } });
const ROUNDS = Number(args.rounds);

interface Method {
  requestSerialize(o: unknown): Buffer;
  requestDeserialize(b: Buffer): unknown;
}
const publish = (loadProto().packageDefinition['runstream.v1.Ingest'] as unknown as Record<string, Method>)
  .Publish as Method;

const event = (i: number): Record<string, unknown> => ({
  thread_id: 't-3f9a1c',
  run_id: 'run-1',
  event_type: 'ai_chunk',
  category: 'MESSAGE',
  content_json: JSON.stringify({ text: ` token ${i}`, index: i }),
  metadata_json: '{"model":"m-1"}',
  event_id: `evt-${i}`,
  user_id: 'u-1',
});

for (const n of [1, 100]) {
  const bytes = publish.requestSerialize({
    events: Array.from({ length: n }, (_, i) => event(i)),
    ack: 'ACCEPTED',
  });
  const iterations = Math.ceil(400_000 / n);
  const ways: [string, () => unknown][] = [
    ['lenient (protobufjs)', () => publish.requestDeserialize(bytes)],
    ['strict (StrictReader)', () => publish.requestDeserialize(new StrictReader(bytes) as unknown as Buffer)],
  ];
  const ns = timeAlternated(ways, { rounds: ROUNDS, iterations, items: n });
  const line = [...ns].map(([name, v]) => `${name} ${v.toFixed(0)} ns`).join(', ');
  console.log(`${n} event(s) a request, per event: ${line}`);
}
