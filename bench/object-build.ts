/**
 * What building a per-event object costs in V8, the ways the broker's hot paths have done it:
 * `node dist/bench/object-build.js [--events=1000] [--rounds=1000]`.
 *
 * - a stored event as `{ ...record, seq, offset }` against `storedEvent` (src/domain/event.ts),
 *   key by key in one literal, on the log records `readLogMessage` decodes;
 * - a record literal holding a conditional spread (`...(t === undefined ? {} : { t })`) against
 *   one literal and the key added after it;
 * - a value kept per event in a WeakMap against a slot on the event.
 *
 * Each way is timed in one process, alternated, after a warm-up; the median of 5 turns is
 * reported in ns per event. Nothing here is the broker's speed: only the gap between the ways.
 */
import { parseArgs } from 'node:util';
import { type LogRecord, storedEvent } from '../src/domain/event.js';
import { encodeLogMessages, readLogMessage } from '../src/log/log-batch.js';
import { median } from './lib/stats.js';

const { values: args } = parseArgs({
  options: {
    events: { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '1000' },
  },
});
const EVENTS = Number(args.events);
const ROUNDS = Number(args.rounds);

/** Records as the persister has them: decoded from log messages of 100 events, every third with a time text. */
function decodedRecords(): LogRecord[] {
  const records: LogRecord[] = [];
  for (let i = 0; i < EVENTS; i++) {
    records.push({
      thread_id: `t${Math.floor(i / 100)}`,
      run_id: 'r1',
      event_id: `e${i}`,
      event_type: 'ai_chunk',
      category: 'message',
      user_id: '',
      created_at: '2026-12-03T10:00:00.000Z',
      ...(i % 3 === 0 ? { created_at_text: '2026-12-03T10:00:00.000000Z' } : {}),
      content_json: `{"delta":"token ${i}"}`,
      metadata_json: '{}',
    });
  }
  const out: LogRecord[] = [];
  for (let i = 0; i < records.length; i += 100) {
    for (const m of encodeLogMessages(records.slice(i, i + 100), 1024 * 1024)) {
      out.push(...readLogMessage(m.body).records);
    }
  }
  return out;
}

const records = decodedRecords();
const texts = records.map((r) => r.created_at_text);
let sink: unknown;

const ways: Record<string, () => void> = {
  'stored event, spread then keys': () => {
    sink = records.map((r, i) => ({ ...r, seq: i + 1, offset: 7 }));
  },
  'stored event, storedEvent': () => {
    sink = records.map((r, i) => storedEvent(r, i + 1, 7));
  },
  'record, conditional spread inside': () => {
    sink = texts.map((t, i) => ({
      thread_id: 't',
      event_id: `e${i}`,
      created_at: 'x',
      ...(t === undefined ? {} : { created_at_text: t }),
      content_json: '{}',
    }));
  },
  'record, key added after': () => {
    sink = texts.map((t, i) => {
      const o: Record<string, string> = {
        thread_id: 't',
        event_id: `e${i}`,
        created_at: 'x',
        content_json: '{}',
      };
      if (t !== undefined) o.created_at_text = t;
      return o;
    });
  },
  'per-event value, WeakMap': () => {
    const m = new WeakMap<object, object>();
    const events = records.map((r) => ({ r }));
    for (const e of events) if (m.get(e) === undefined) m.set(e, { seq: 1 });
    for (const e of events) sink = m.get(e);
  },
  'per-event value, slot': () => {
    const events = records.map((r) => ({ r, slot: undefined as object | undefined }));
    for (const e of events) e.slot ??= { seq: 1 };
    for (const e of events) sink = e.slot;
  },
};

function turn(fn: () => void): number {
  const start = process.hrtime.bigint();
  for (let i = 0; i < ROUNDS; i++) fn();
  return Number(process.hrtime.bigint() - start) / ROUNDS / records.length;
}

for (const fn of Object.values(ways)) for (let i = 0; i < 200; i++) fn();
const ns = new Map<string, number[]>(Object.keys(ways).map((k) => [k, []]));
for (let t = 0; t < 5; t++) {
  for (const [name, fn] of Object.entries(ways)) ns.get(name)?.push(turn(fn));
}
console.log(`${records.length} events, ${ROUNDS} rounds, median of 5 turns (ns per event):`);
for (const [name, xs] of ns) console.log(`  ${name.padEnd(36)} ${median(xs).toFixed(0).padStart(6)}`);
void sink;
