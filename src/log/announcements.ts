/**
 * What the persister tells the rest of the cluster after each commit, on core NATS.
 *
 * - events subject: the newly stored events, one client-facing JSON text per line
 *   (JSON text never holds a raw newline), each starting with `{"seq":N,`;
 * - receipts subject: `[[event_id, seq, offset], ...]` for every message of the batch,
 *   duplicates included, for PERSISTED acks.
 */
import type { Msg } from '@nats-io/transport-node';
import { eventJson, type StoredEvent } from '../event.js';
import type { Receipt } from '../persist/seq-assigner.js';

/** A committed event as fan-out sees it: its seq and its JSON text, serialised once. */
export interface CommittedEvent {
  readonly seq: number;
  readonly json: string;
}

const SEQ_PREFIX = '{"seq":';

export function encodeEvents(events: readonly StoredEvent[]): string {
  return events.map(eventJson).join('\n');
}

export function decodeEvents(msg: Msg): CommittedEvent[] {
  const lines = msg.string().split('\n');
  return lines.map((json) => {
    if (!json.startsWith(SEQ_PREFIX)) throw new Error('committed event does not start with its seq');
    return { seq: Number(json.slice(SEQ_PREFIX.length, json.indexOf(',', SEQ_PREFIX.length))), json };
  });
}

export function encodeReceipts(receipts: readonly Receipt[]): string {
  return JSON.stringify(receipts.map((r) => [r.event_id, r.seq, r.offset]));
}

export function decodeReceipts(msg: Msg): Receipt[] {
  const raw = JSON.parse(msg.string()) as [string, number, number][];
  return raw.map(([event_id, seq, offset]) => ({ event_id, seq, offset }));
}
