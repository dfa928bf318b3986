/**
 * A small typed client for `runstream.v1.Subscriber`, used by the tests and backend
 * consumers written in TypeScript. It collects the responses of a Subscribe call and its
 * final status, with the trailers (`rs-cursor`, `rs-error-code`) read out.
 */
import * as grpc from '@grpc/grpc-js';
import type { Event__Output } from '../gen/runstream/v1/Event.js';
import type { SubscribeRequest } from '../gen/runstream/v1/SubscribeRequest.js';
import type { SubscribeResponse__Output } from '../gen/runstream/v1/SubscribeResponse.js';
import type { SubscriberClient as RawSubscriberClient } from '../gen/runstream/v1/Subscriber.js';
import type { ProtoGrpcType as SubscriberProto } from '../gen/subscriber.js';
import { loadProto } from '../proto.js';

export type { Event__Output as GrpcEvent, SubscribeRequest, SubscribeResponse__Output as SubscribeResponse };

/** How a Subscribe call ended. */
export interface SubscribeEnd {
  readonly code: grpc.status;
  readonly details: string;
  /** `rs-cursor` trailer: resubscribe with `after_seq` = this to lose nothing. */
  readonly cursor: number | undefined;
  /** `rs-error-code` trailer, e.g. `RS_ERR_CURSOR_AHEAD`. */
  readonly errorCode: string | undefined;
}

export class SubscriberClient implements Disposable {
  readonly raw: RawSubscriberClient;
  readonly #token: string | undefined;

  /** `token`: a JWT sent as `authorization: Bearer …` metadata on every call. */
  constructor(target: string, opts: { token?: string } = {}) {
    const proto = loadProto().proto as unknown as SubscriberProto;
    this.raw = new proto.runstream.v1.Subscriber(target, grpc.credentials.createInsecure());
    this.#token = opts.token;
  }

  subscribe(req: SubscribeRequest): GrpcSubscription {
    const md = new grpc.Metadata();
    if (this.#token !== undefined) md.set('authorization', `Bearer ${this.#token}`);
    return new GrpcSubscription(this.raw.Subscribe(req, md));
  }

  close(): void {
    this.raw.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/** One Subscribe call: its responses as they arrive and how it ended. */
export class GrpcSubscription {
  readonly responses: SubscribeResponse__Output[] = [];
  /** Settles when the call ends, whatever the status (never rejects). */
  readonly ended: Promise<SubscribeEnd>;
  readonly #listeners = new Set<() => void>();

  constructor(readonly call: grpc.ClientReadableStream<SubscribeResponse__Output>) {
    call.on('data', (r: SubscribeResponse__Output) => {
      this.responses.push(r);
      for (const l of this.#listeners) l();
    });
    // A non-OK status also arrives as 'error'; 'status' carries it either way.
    call.on('error', () => undefined);
    // The status can arrive while received messages still wait in the stream's buffer; the
    // call has ended for the reader only once they have all been read.
    const drained = new Promise<void>((resolve) => {
      call.once('end', resolve);
      call.once('close', resolve);
    });
    const status = new Promise<SubscribeEnd>((resolve) => {
      call.on('status', (s: grpc.StatusObject) => {
        const cursor = s.metadata.get('rs-cursor')[0];
        const errorCode = s.metadata.get('rs-error-code')[0];
        resolve({
          code: s.code,
          details: s.details,
          cursor: cursor === undefined ? undefined : Number(cursor.toString()),
          errorCode: errorCode?.toString(),
        });
      });
    });
    this.ended = Promise.all([status, drained]).then(([s]) => s);
  }

  /** Events received, in arrival order. */
  get events(): Event__Output[] {
    return this.responses.flatMap((r) => (r.event ? [r.event] : []));
  }

  /** Resolves with the first response (already received or to come) that matches. */
  waitFor(
    pred: (r: SubscribeResponse__Output) => boolean,
    timeoutMs = 30_000,
  ): Promise<SubscribeResponse__Output> {
    return new Promise((resolve, reject) => {
      let next = 0;
      const check = (): boolean => {
        for (; next < this.responses.length; next++) {
          const r = this.responses[next] as SubscribeResponse__Output;
          if (!pred(r)) continue;
          clearTimeout(timer);
          this.#listeners.delete(listener);
          resolve(r);
          return true;
        }
        return false;
      };
      const listener = (): void => void check();
      const timer = setTimeout(() => {
        this.#listeners.delete(listener);
        reject(
          new Error(
            `no matching response within ${timeoutMs} ms; last: ${JSON.stringify(this.responses.at(-1))}`,
          ),
        );
      }, timeoutMs);
      if (!check()) this.#listeners.add(listener);
    });
  }

  /** Cancels the call (the server ends the subscription). */
  cancel(): void {
    this.call.cancel();
  }
}
