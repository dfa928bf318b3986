/**
 * WebSocket frames, server → client. Event frames embed the event's JSON text as
 * serialised once by the persister (or the catch-up query); only the envelope is built
 * per subscriber.
 */

export function eventFrame(subId: string, eventJson: string): string {
  return `{"type":"event","id":${JSON.stringify(subId)},"event":${eventJson}}`;
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

/** A run subscription is over: the run's terminal event (seq) has been passed. */
export function endFrame(subId: string, runId: string, seq: number): string {
  return `{"type":"end","id":${JSON.stringify(subId)},"run_id":"${runId}","seq":${seq}}`;
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
