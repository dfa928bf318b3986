/**
 * Load generator side of B-grpc-acks: a bare grpc-js server serving the broker's own
 * `runstream.v1.Ingest` (the same proto-loader serializers), in its own process as the
 * broker is. Each request of a PublishStream is answered at once with one ack per event, as
 * the broker answers an ACCEPTED request, and nothing else is done: no validation, no log.
 * The producer load generator drives it exactly as it drives the broker in scenario 3, so its
 * CPU per event is what gRPC alone costs ingest at that load. It serves until it is killed.
 *
 * With `publish` (B-ingest), each request's events first go to JetStream as one message, with
 * bare nats.js (a core publish with a reply inbox, as the broker's publisher does): the
 * request's events as JSON, to their thread's log subject in a stream with the
 * broker's log settings, `Nats-Msg-Id` the first event's as the broker names it; the request is
 * answered when JetStream has acked it, with its stream sequence. Nothing else: no validation,
 * no per-thread order across requests, no merging. Its CPU per event is then what gRPC and the
 * JetStream publish together cost, ingest's floor.
 */
import * as grpc from '@grpc/grpc-js';
import { connect, createInbox, headers, type MsgHdrs } from '@nats-io/transport-node';
import type { PublishRequest__Output } from '../../src/gen/runstream/v1/PublishRequest.js';
import type { PublishResponse } from '../../src/gen/runstream/v1/PublishResponse.js';
import { msgId, Subjects } from '../../src/log/subjects.js';
import { loadProto } from '../../src/proto.js';
import { type LoadgenIo, runLoadgen } from '../lib/loadgen.js';

export interface GrpcAcksServerArgs {
  /** Publish each request to JetStream before answering it (B-ingest); the stream must exist. */
  readonly publish?: {
    readonly natsUrl: string;
    readonly subjectPrefix: string;
    readonly partitions: number;
  };
}

export interface GrpcAcksServerInfo {
  readonly port: number;
}

let offset = 0;

/** The broker's ACCEPTED answer: an ack per event, its log offset filled (`at`: all at one offset). */
function answer(req: PublishRequest__Output, at?: number): PublishResponse {
  return {
    acks: req.events.map((e) => ({
      event_id: e.event_id,
      duplicate: false,
      seq: 0,
      offset: at ?? ++offset,
    })),
  };
}

async function main(a: GrpcAcksServerArgs, io: LoadgenIo): Promise<never> {
  const respond = a.publish
    ? await publisher(a.publish)
    : (req: PublishRequest__Output) => Promise.resolve(answer(req));
  const server = new grpc.Server();
  server.addService(loadProto().proto.runstream.v1.Ingest.service, {
    Publish: (
      call: grpc.ServerUnaryCall<PublishRequest__Output, PublishResponse>,
      callback: grpc.sendUnaryData<PublishResponse>,
    ) => {
      respond(call.request).then(
        (r) => callback(null, r),
        (err: Error) => callback({ code: grpc.status.UNAVAILABLE, details: err.message }),
      );
    },
    PublishStream: (call: grpc.ServerDuplexStream<PublishRequest__Output, PublishResponse>) => {
      if (!a.publish) {
        call.on('data', (req: PublishRequest__Output) => call.write(answer(req)));
      } else {
        // Answered in request order: each answer waits for the ones before it.
        let last: Promise<unknown> = Promise.resolve();
        call.on('data', (req: PublishRequest__Output) => {
          const response = respond(req);
          last = Promise.all([response, last]).then(
            ([r]) => call.write(r),
            (err: Error) => call.destroy(err),
          );
        });
      }
      call.on('end', () => call.end());
      call.on('error', () => undefined);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  io.ready({ port } satisfies GrpcAcksServerInfo);
  return new Promise<never>(() => undefined);
}

/**
 * Answers a request once its events are in JetStream, as one message. The publish is the
 * cheapest nats.js offers, a core publish whose reply goes to one wildcard inbox subscription,
 * matched by a counter (nats.js's `js.publish` adds a request object, a timer and errors per
 * publish: ~3× this server's CPU at this load), the publishes of an event-loop turn written
 * together; no timeouts, no retries, no per-thread order.
 */
async function publisher(
  o: NonNullable<GrpcAcksServerArgs['publish']>,
): Promise<(req: PublishRequest__Output) => Promise<PublishResponse>> {
  const nc = await connect({ servers: o.natsUrl });
  const subjects = new Subjects(o.subjectPrefix, o.partitions);
  const inbox = createInbox();
  const waiting = new Map<number, (ack: { seq?: number; error?: { description?: string } }) => void>();
  nc.subscribe(`${inbox}.*`, {
    callback: (err, msg) => {
      if (err) return;
      const id = Number(msg.subject.slice(inbox.length + 1));
      const settle = waiting.get(id);
      waiting.delete(id);
      settle?.(msg.json());
    },
  });
  let next = 0;
  // The publishes of one event-loop turn go out in one socket write (nats.js writes once per
  // microtask checkpoint, so otherwise about once per request).
  let queued: [string, string, string, MsgHdrs][] = [];
  const flush = (): void => {
    const batch = queued;
    queued = [];
    for (const [subject, body, reply, h] of batch) nc.publish(subject, body, { reply, headers: h });
  };
  return (req) => {
    const first = req.events[0];
    if (!first) return Promise.resolve({ acks: [] });
    const id = ++next;
    const h = headers();
    h.set('Nats-Msg-Id', msgId(first.thread_id, first.run_id, first.event_id));
    return new Promise<PublishResponse>((resolve, reject) => {
      waiting.set(id, (ack) =>
        ack.seq === undefined
          ? reject(new Error(ack.error?.description ?? 'no stream sequence in the ack'))
          : resolve(answer(req, ack.seq)),
      );
      queued.push([
        subjects.log(first.thread_id, first.run_id),
        JSON.stringify(req.events),
        `${inbox}.${id}`,
        h,
      ]);
      if (queued.length === 1) setImmediate(flush);
    });
  };
}

runLoadgen(main);
