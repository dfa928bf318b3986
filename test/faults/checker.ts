/**
 * The fault suite's checker: per thread, what producers were told (acked) against what
 * Postgres holds (stored) against what subscribers got (a live WebSocket subscriber that
 * reconnects from its cursor, and a catch-up from seq 0 at the end). Pure: it only counts.
 *
 * An event's identity is its event_id; an `event_rejected` notice stands for the event it
 * replaced (the poison-event policy), so a refused event is neither lost nor a gap.
 */

export const REJECTED_EVENT_TYPE = 'event_rejected';

/** One acknowledged event: its producer index (send order within the thread) and, for PERSISTED, its seq. */
export interface AckedEvent {
  readonly i: number;
  /** seq named by a PERSISTED ack (0 for ACCEPTED, or a refused event). */
  readonly seq: number;
}

/** One stored or delivered event, as far as the checker cares. */
export interface SeenEvent {
  readonly seq: number;
  readonly event_id: string;
  readonly event_type: string;
  readonly content: unknown;
}

export interface ThreadInput {
  readonly thread: string;
  readonly acked: ReadonlyMap<string, AckedEvent>;
  /** Postgres rows of the thread in seq order. */
  readonly stored: readonly SeenEvent[];
  /** Events the live subscriber received, in arrival order (across its reconnects). */
  readonly live: readonly SeenEvent[];
  /** Events a fresh subscriber got from seq 0 up to its `live` frame. */
  readonly catchUp: readonly SeenEvent[];
}

/** Counts for one comparison; all must be 0. */
export interface Faults {
  /** acked but not stored; or stored but not delivered. */
  lost: number;
  /** the same event stored twice, or delivered twice. */
  duplicated: number;
  /** seq numbers missing between 1 and the head (stored), or skipped (delivered). */
  gaps: number;
  /** stored out of send order; delivered out of seq order; a PERSISTED ack naming another seq. */
  outOfOrder: number;
}

export interface ThreadReport {
  readonly thread: string;
  readonly acked: number;
  readonly stored: number;
  readonly storedNotAcked: number;
  readonly rejected: number;
  readonly store: Faults;
  readonly live: Faults;
  readonly catchUp: Faults;
  /** A few examples of what went wrong, for the assertion message. */
  readonly examples: string[];
}

/** The identity of a stored or delivered event: the refused event's id for a notice. */
export function identity(e: SeenEvent): { id: string; rejected: boolean } {
  if (e.event_type === REJECTED_EVENT_TYPE) {
    const c = e.content as { event_id?: unknown } | null;
    if (c && typeof c.event_id === 'string') return { id: c.event_id, rejected: true };
  }
  return { id: e.event_id, rejected: false };
}

const zero = (): Faults => ({ lost: 0, duplicated: 0, gaps: 0, outOfOrder: 0 });

export function total(f: Faults): number {
  return f.lost + f.duplicated + f.gaps + f.outOfOrder;
}

export function sumFaults(...fs: readonly Faults[]): Faults {
  const s = zero();
  for (const f of fs) {
    s.lost += f.lost;
    s.duplicated += f.duplicated;
    s.gaps += f.gaps;
    s.outOfOrder += f.outOfOrder;
  }
  return s;
}

/** A delivered sequence against the stored one: every stored seq exactly once, ascending. */
export function compareDelivered(
  what: string,
  delivered: readonly SeenEvent[],
  storedBySeq: ReadonlyMap<number, string>,
  examples: string[],
): Faults {
  const f = zero();
  const seen = new Set<number>();
  let last = 0;
  for (const e of delivered) {
    if (seen.has(e.seq)) {
      f.duplicated++;
      if (examples.length < 8) examples.push(`${what}: seq ${e.seq} delivered twice`);
      continue;
    }
    seen.add(e.seq);
    if (e.seq < last) {
      f.outOfOrder++;
      if (examples.length < 8) examples.push(`${what}: seq ${e.seq} after ${last}`);
    } else if (e.seq > last + 1 && last > 0) {
      f.gaps++;
      if (examples.length < 8) examples.push(`${what}: jumped from ${last} to ${e.seq}`);
    }
    last = Math.max(last, e.seq);
    const want = storedBySeq.get(e.seq);
    if (want !== undefined && want !== e.event_id) {
      f.outOfOrder++;
      if (examples.length < 8) examples.push(`${what}: seq ${e.seq} is ${e.event_id}, stored ${want}`);
    }
  }
  for (const seq of storedBySeq.keys()) {
    if (!seen.has(seq)) {
      f.lost++;
      if (examples.length < 8) examples.push(`${what}: stored seq ${seq} never delivered`);
    }
  }
  return f;
}

/** Producer index of an event id of the form `<letters><digits>` (the suite's ids), else undefined. */
function indexOf(id: string): number | undefined {
  const m = /(\d+)$/.exec(id);
  return m ? Number(m[1]) : undefined;
}

export function checkThread(input: ThreadInput): ThreadReport {
  const examples: string[] = [];
  const store = zero();
  const ids = new Map<string, number>(); // identity → seq
  let rejected = 0;
  let lastIndex = -1;
  let expectSeq = 1;
  for (const row of input.stored) {
    const { id, rejected: isNotice } = identity(row);
    if (isNotice) rejected++;
    if (ids.has(id)) {
      store.duplicated++;
      if (examples.length < 8) examples.push(`stored twice: ${id} (seq ${ids.get(id)} and ${row.seq})`);
    } else {
      ids.set(id, row.seq);
    }
    if (row.seq !== expectSeq) {
      if (row.seq > expectSeq) {
        store.gaps += row.seq - expectSeq;
        if (examples.length < 8) examples.push(`stored seq jumps from ${expectSeq - 1} to ${row.seq}`);
      } else {
        store.duplicated++;
      }
    }
    expectSeq = row.seq + 1;
    const i = input.acked.get(id)?.i ?? indexOf(id);
    if (i !== undefined) {
      if (i < lastIndex) {
        store.outOfOrder++;
        if (examples.length < 8) examples.push(`stored ${id} (index ${i}) after index ${lastIndex}`);
      }
      lastIndex = Math.max(lastIndex, i);
    }
  }
  for (const [id, a] of input.acked) {
    const seq = ids.get(id);
    if (seq === undefined) {
      store.lost++;
      if (examples.length < 8) examples.push(`acked ${id} not stored`);
    } else if (a.seq !== 0 && a.seq !== seq) {
      store.outOfOrder++;
      if (examples.length < 8) examples.push(`acked ${id} with seq ${a.seq}, stored at ${seq}`);
    }
  }
  let storedNotAcked = 0;
  for (const id of ids.keys()) if (!input.acked.has(id)) storedNotAcked++;

  const storedBySeq = new Map(input.stored.map((r) => [r.seq, r.event_id]));
  return {
    thread: input.thread,
    acked: input.acked.size,
    stored: input.stored.length,
    storedNotAcked,
    rejected,
    store,
    live: compareDelivered('live', input.live, storedBySeq, examples),
    catchUp: compareDelivered('catch-up', input.catchUp, storedBySeq, examples),
    examples,
  };
}

/** A row's figures, as written to the results file and rendered by report.ts. */
export interface RowResult {
  readonly row: string;
  readonly injects: string;
  readonly ack: string;
  readonly threads: number;
  readonly acked: number;
  readonly stored: number;
  readonly delivered: number;
  readonly rejected: number;
  readonly faults: Faults;
  /** ms from the fault being cleared to the first ack; one per injection. */
  readonly ackRecoveryMs: readonly number[];
  /** ms from the fault being cleared to the live subscriber receiving an event sent after it. */
  readonly deliveryRecoveryMs: readonly number[];
  readonly rssBeforeMiB?: number;
  readonly rssAfterMiB?: number;
  readonly rssPeakMiB?: number;
  /** [seconds since the row started, MiB], for a long row. */
  readonly rssSeriesMiB?: readonly (readonly [number, number])[];
  /** The V8 heap in use plus external memory after a full collection, where a row reads it. */
  readonly heldBeforeMiB?: number;
  readonly heldAfterMiB?: number;
  readonly notes?: string;
  readonly seconds: number;
}
