// A gRPC Subscribe call whose peer never reads (its HTTP/2 stream window shut) is cut off as
// slow, but its status goes out only after the messages it was sent, which never leave: the
// call keeps its place under the node's call cap until its stream closes, and the stream is
// reset after a grace period, so such calls can neither pile up past the cap nor live forever.
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import type { Event } from '../src/client/ingest-client.js';
import { GRPC_END_GRACE_MS } from '../src/fanout/grpc/subscribe.js';
import type { ProtoGrpcType as SubscriberProto } from '../src/gen/subscriber.js';
import { loadProto } from '../src/proto.js';
import { tokenEvent } from './helpers/events.js';
import { randomName, startStack } from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

/** `n` token events of run r1, e1 … en, of about 4 KB each. */
function bigEvents(threadId: string, n: number): Event[] {
  const content_json = JSON.stringify({ big: 'x'.repeat(4000) });
  return Array.from({ length: n }, (_, i) => tokenEvent(threadId, i + 1, { run_id: 'r1', content_json }));
}

interface RawCall {
  closed: boolean;
  /** grpc-status of the trailers (or of a trailers-only response), if any came. */
  status: string | undefined;
}

/** A Subscribe call on a raw HTTP/2 session, so nothing reads what the server sends. */
function rawSubscribe(session: http2.ClientHttp2Session, threadId: string): RawCall {
  const method = loadProto().packageDefinition['runstream.v1.Subscriber'] as unknown as Record<
    string,
    { requestSerialize: (v: unknown) => Buffer }
  >;
  const msg = (method.Subscribe as { requestSerialize: (v: unknown) => Buffer }).requestSerialize({
    thread_id: threadId,
  });
  const frame = Buffer.alloc(5 + msg.length);
  frame.writeUInt32BE(msg.length, 1);
  msg.copy(frame, 5);
  const req = session.request({
    ':method': 'POST',
    ':path': '/runstream.v1.Subscriber/Subscribe',
    'content-type': 'application/grpc',
    te: 'trailers',
  });
  const call: RawCall = { closed: false, status: undefined };
  req.on('response', (h) => {
    if (h['grpc-status'] !== undefined) call.status = String(h['grpc-status']);
  });
  req.on('trailers', (t) => {
    call.status = String(t['grpc-status']);
  });
  req.on('close', () => {
    call.closed = true;
  });
  req.on('error', () => undefined);
  req.end(frame);
  return call;
}

test('Subscribe calls that never read hold their place under the cap until reset, and are reset after the grace period', async () => {
  await using stack = await startStack({ slowConsumerStallMs: 300, grpcSubscribeMaxCalls: 2 });
  const t = randomName('t-');
  const events = bigEvents(t, 400);
  for (let i = 0; i < events.length; i += 100)
    await stack.client.publish(events.slice(i, i + 100), 'PERSISTED');
  const svc = stack.broker.grpcSubscriber;
  assert.ok(svc);
  const cutoffs = async () => {
    const text = await (await fetch(`${stack.httpUrl}/metrics`)).text();
    const line = text
      .split('\n')
      .find((l) => l.startsWith('runstream_slow_consumer_cutoffs_total{transport="grpc"}'));
    return Number(line?.split(' ')[1] ?? 0);
  };

  // A client whose streams' windows are shut: the server can send it no data at all.
  const session = http2.connect(`http://${stack.grpcTarget}`, { settings: { initialWindowSize: 0 } });
  session.on('error', () => undefined);
  try {
    const first = [rawSubscribe(session, t), rawSubscribe(session, t)];
    await waitFor(async () => (await cutoffs()) === 2, {
      what: 'both calls cut off as slow',
      timeoutMs: 20_000,
    });
    // Cut off, but not closed: they still count, so a third call is refused by the cap.
    assert.equal(svc.size, 2, 'the cut-off calls still count until their streams close');
    assert.ok(first.every((c) => !c.closed));
    const third = rawSubscribe(session, t);
    await waitFor(() => third.status !== undefined, { what: 'the third call answered', timeoutMs: 10_000 });
    assert.equal(third.status, String(8), 'RESOURCE_EXHAUSTED: the cap holds');
    // The grace period over, their streams are reset and their places freed.
    await waitFor(() => first.every((c) => c.closed), {
      what: 'the cut-off calls reset',
      timeoutMs: GRPC_END_GRACE_MS + 10_000,
    });
    await waitFor(() => svc.size === 0, { what: 'no call left', timeoutMs: 10_000 });
    const fourth = rawSubscribe(session, t);
    await waitFor(() => svc.size === 1, { what: 'a new call admitted', timeoutMs: 10_000 });
    assert.equal(fourth.status, undefined);
  } finally {
    session.destroy();
  }
  await waitFor(() => svc.size === 0, { what: 'the last call gone with its session', timeoutMs: 10_000 });
});

test('a reader that reads its ended call slowly, but keeps reading, gets all of it and its status: it is never reset', async () => {
  await using stack = await startStack();
  const t = randomName('t-');
  // More than fit the call's stream buffer (16 messages) and its HTTP/2 window together, so the
  // end comes while most of them wait to be read.
  const events = bigEvents(t, 60);
  events.push({
    thread_id: t,
    run_id: 'r1',
    event_id: 'end',
    event_type: 'end',
    category: 'LIFECYCLE',
    content_json: '{}',
  });
  await stack.client.publish(events, 'PERSISTED');
  const proto = loadProto().proto as unknown as SubscriberProto;
  const client = new proto.runstream.v1.Subscriber(stack.grpcTarget, grpc.credentials.createInsecure());
  try {
    // The run has ended: the call ends as soon as it is queued, and the reader takes longer than
    // the grace to read it (HTTP/2's windows hold back the rest meanwhile).
    const call = client.Subscribe({ thread_id: t, run_id: 'r1' });
    const status = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
    call.on('error', () => undefined);
    let got = 0;
    const started = performance.now();
    try {
      for await (const m of call) {
        if ((m as { event?: unknown }).event) got++;
        await new Promise((r) => setTimeout(r, (GRPC_END_GRACE_MS * 2.4) / events.length));
      }
    } catch {
      // the status says
    }
    const s = await status;
    assert.equal(s.code, grpc.status.OK, `ended ${grpc.status[s.code]}: ${s.details}`);
    assert.equal(got, events.length);
    assert.equal(s.metadata.get('rs-cursor')[0], String(events.length));
    assert.ok(performance.now() - started > GRPC_END_GRACE_MS, 'read for longer than the grace');
  } finally {
    client.close();
  }
});
