/**
 * A small typed client for `runstream.v1.Ingest`, used by the demo agent, the tests and
 * the benchmarks. Other languages generate theirs from proto/ (see clients/python).
 */
import * as grpc from '@grpc/grpc-js';
import type { Control__Output } from '../gen/runstream/v1/Control.js';
import type { Event } from '../gen/runstream/v1/Event.js';
import type { EventAck__Output } from '../gen/runstream/v1/EventAck.js';
import type { IngestClient as RawIngestClient } from '../gen/runstream/v1/Ingest.js';
import type { PublishRequest } from '../gen/runstream/v1/PublishRequest.js';
import type { PublishResponse__Output } from '../gen/runstream/v1/PublishResponse.js';
import { loadProto } from '../proto.js';

export type AckLevel = 'ACCEPTED' | 'PERSISTED';
export type { Control__Output as Control, Event, EventAck__Output as EventAck };

export class IngestClient implements Disposable {
  readonly raw: RawIngestClient;
  readonly #token: string | undefined;

  /**
   * `token`: a JWT sent as `authorization: Bearer …` metadata on every call.
   * `ownConnection`: a TCP connection of this client's own; by default grpc-js shares one
   * among the clients of a target, so a host of broker workers would see one connection.
   */
  constructor(target: string, opts: { token?: string; ownConnection?: boolean } = {}) {
    this.#token = opts.token;
    const { proto } = loadProto();
    this.raw = new proto.runstream.v1.Ingest(target, grpc.credentials.createInsecure(), {
      'grpc.max_send_message_length': 64 * 1024 * 1024,
      ...(opts.ownConnection ? { 'grpc.use_local_subchannel_pool': 1 } : {}),
    });
  }

  publish(events: Event[], ack: AckLevel = 'ACCEPTED', deadlineMs = 60_000): Promise<EventAck__Output[]> {
    return new Promise((resolve, reject) => {
      this.raw.Publish({ events, ack }, this.metadata(), { deadline: Date.now() + deadlineMs }, (err, res) =>
        err ? reject(err) : resolve((res as PublishResponse__Output).acks),
      );
    });
  }

  /** Opens a PublishStream; responses come back in request order. */
  openStream(): PublishStream {
    return new PublishStream(this.raw.PublishStream(this.metadata()));
  }

  /** Call metadata carrying the token, if any. */
  metadata(): grpc.Metadata {
    const md = new grpc.Metadata();
    if (this.#token !== undefined) md.set('authorization', `Bearer ${this.#token}`);
    return md;
  }

  close(): void {
    this.raw.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/**
 * A PublishStream call with a promise per request. Control messages the broker sends for
 * this stream's runs (e.g. a subscriber's cancel request) answer no request: they go to the
 * {@link onControl} listeners, never to a request's promise.
 */
export class PublishStream {
  readonly #waiting: { resolve: (a: EventAck__Output[]) => void; reject: (e: Error) => void }[] = [];
  readonly #controlListeners = new Set<(c: Control__Output) => void>();
  /** Every control message received, in arrival order. */
  readonly controls: Control__Output[] = [];
  #error: Error | undefined;
  readonly #ended: Promise<void>;

  constructor(readonly call: grpc.ClientDuplexStream<PublishRequest, PublishResponse__Output>) {
    call.on('data', (res: PublishResponse__Output) => {
      if (res.control) {
        this.controls.push(res.control);
        for (const l of this.#controlListeners) l(res.control);
        return;
      }
      this.#waiting.shift()?.resolve(res.acks);
    });
    this.#ended = new Promise((resolve) => {
      call.on('error', (err: Error) => {
        this.#error = err;
        for (const w of this.#waiting.splice(0)) w.reject(err);
        resolve();
      });
      call.on('end', () => resolve());
    });
  }

  send(events: Event[], ack: AckLevel = 'ACCEPTED'): Promise<EventAck__Output[]> {
    if (this.#error) return Promise.reject(this.#error);
    return new Promise((resolve, reject) => {
      this.#waiting.push({ resolve, reject });
      this.call.write({ events, ack });
    });
  }

  /** Calls `listener` with each control message (e.g. `{ cancel: {...} }`); returns the function that removes it. */
  onControl(listener: (c: Control__Output) => void): () => void {
    this.#controlListeners.add(listener);
    return () => this.#controlListeners.delete(listener);
  }

  /** Half-closes and waits for the server to finish. */
  async end(): Promise<void> {
    this.call.end();
    await this.#ended;
  }
}
