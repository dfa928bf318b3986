/**
 * WebSocket frames, server → client. Event frames embed the event's JSON text as
 * serialised once by the persister (or the catch-up query); a live event's whole frame is
 * built once and shared by the subscribers it goes to ({@link sharedEventFrame}).
 */
import { headerLength, writeHeader } from './frame-runs.js';

export function eventFrame(subId: string, eventJson: string): string {
  return `{"type":"event","id":${JSON.stringify(subId)},"event":${eventJson}}`;
}

/**
 * The event frame as it goes on the wire, built once per event and subscription id: a whole
 * WebSocket text frame (frame-runs.ts), its JSON copied from the event's bytes where it has them
 * (a live event's, as the persister wrote them). Every subscriber of that event whose
 * subscription has the same id (as clients that name their one subscription alike do) gets the
 * very same Buffer, which every socket writes without copying. `e` must be one object per event,
 * shared by its subscribers; the frame last built is kept in its `frame`.
 */
export function sharedEventFrame(
  subId: string,
  e: {
    json(): string;
    readonly bytes?: Buffer | undefined;
    frame?: { readonly subId: string; readonly bytes: Buffer } | undefined;
  },
): Buffer {
  const last = e.frame;
  if (last !== undefined && last.subId === subId) return last.bytes;
  const head = eventFrameHead(subId);
  const body = e.bytes ?? Buffer.from(e.json(), 'utf8');
  const length = head.length + body.length + 1;
  const bytes = Buffer.allocUnsafe(headerLength(length) + length);
  let at = writeHeader(bytes, 0, length);
  at += head.copy(bytes, at);
  at += body.copy(bytes, at);
  bytes[at] = CLOSE_BRACE;
  e.frame = { subId, bytes };
  return bytes;
}

const CLOSE_BRACE = 0x7d;

/** The last subscription id's frame head, `{"type":"event","id":…,"event":`, as UTF-8. */
let head: { subId: string; bytes: Buffer } = { subId: '', bytes: Buffer.alloc(0) };

function eventFrameHead(subId: string): Buffer {
  if (head.subId !== subId || head.bytes.length === 0) {
    head = { subId, bytes: Buffer.from(`{"type":"event","id":${JSON.stringify(subId)},"event":`, 'utf8') };
  }
  return head.bytes;
}

export function liveFrame(subId: string, seq: number): string {
  return `{"type":"live","id":${JSON.stringify(subId)},"seq":${seq}}`;
}

export function errorFrame(subId: string | null, code: string, message: string, extra?: object): string {
  return JSON.stringify({ type: 'error', id: subId, code, message, ...extra });
}

export function unsubscribedFrame(subId: string, seq: number): string {
  return `{"type":"unsubscribed","id":${JSON.stringify(subId)},"seq":${seq}}`;
}

/** A run subscription is over: the run ended at its terminal event `seq`, with `status`. */
export function endFrame(subId: string, runId: string, seq: number, status: string): string {
  return `{"type":"end","id":${JSON.stringify(subId)},"run_id":"${runId}","seq":${seq},"status":"${status}"}`;
}

/** A chat view frame: the change one chat event made (fanout/core/chat-view.ts), `{"seq",…}` inlined. */
export function chatFrame(subId: string, json: string): string {
  return `{"type":"chat","id":${JSON.stringify(subId)},${json.slice(1)}`;
}

/** The thread, or the run, was deleted; the subscription is over. */
export function deletedFrame(subId: string, threadId: string, runId: string | undefined): string {
  return JSON.stringify({
    type: 'deleted',
    id: subId,
    thread_id: threadId,
    ...(runId === undefined ? {} : { run_id: runId }),
  });
}

/** A cancel request was stored as the run's `cancel_requested` event and sent to its producer. */
export function cancelRequestedFrame(
  requestId: string,
  r: { thread_id: string; run_id: string; event_id: string; offset: number },
): string {
  return JSON.stringify({ type: 'cancel_requested', id: requestId, ...r });
}
