/**
 * The gRPC port: `runstream.v1.Ingest`, plus gRPC health checking and reflection.
 */
import * as grpc from '@grpc/grpc-js';
import { ReflectionService } from '@grpc/reflection';
import { HealthImplementation } from 'grpc-health-check';
import { InvalidArgumentError, toRunstreamError } from '../errors.js';
import type { EventAck } from '../gen/runstream/v1/EventAck.js';
import type { IngestHandlers } from '../gen/runstream/v1/Ingest.js';
import type { PublishRequest__Output } from '../gen/runstream/v1/PublishRequest.js';
import type { PublishResponse } from '../gen/runstream/v1/PublishResponse.js';
import type { LogPublisher } from '../log/publisher.js';
import type { Logger } from '../logger.js';
import { loadProto } from '../proto.js';
import type { PersistWaiter } from './persist-waiter.js';
import { type ValidationLimits, validateEvents } from './validate.js';

export const INGEST_SERVICE = 'runstream.v1.Ingest';
/** Requests of one PublishStream in flight before the broker stops reading it (HTTP/2 backpressure). */
export const STREAM_MAX_IN_FLIGHT = 64;

export interface IngestServerOptions {
  readonly host: string;
  readonly port: number;
  readonly publisher: LogPublisher;
  readonly waiter: PersistWaiter;
  readonly limits: ValidationLimits;
  readonly maxMessageBytes: number;
  readonly log: Logger;
}

/** A request whose events have been handed to the log; `result` settles with its response. */
interface Issued {
  readonly result: Promise<PublishResponse>;
}

export class IngestServer implements AsyncDisposable {
  readonly #o: IngestServerOptions;
  readonly #server: grpc.Server;
  readonly #health: HealthImplementation;
  #port = 0;
  #closed = false;

  constructor(o: IngestServerOptions) {
    this.#o = o;
    this.#server = new grpc.Server({
      'grpc.max_receive_message_length': o.maxMessageBytes,
      'grpc.keepalive_time_ms': 30_000,
      'grpc.keepalive_timeout_ms': 10_000,
      'grpc.keepalive_permit_without_calls': 1,
      'grpc.http2.min_ping_interval_without_data_ms': 5_000,
    });
    const { packageDefinition, proto } = loadProto();
    const handlers: IngestHandlers = {
      Publish: (call, callback) => {
        this.#issue(call.request)
          .then((issued) => issued.result)
          .then(
            (response) => callback(null, response),
            (err: unknown) => callback(this.#toStatus(err, 'Publish')),
          );
      },
      PublishStream: (call) => this.#publishStream(call),
    };
    this.#server.addService(proto.runstream.v1.Ingest.service, handlers);
    this.#health = new HealthImplementation({ '': 'SERVING', [INGEST_SERVICE]: 'SERVING' });
    this.#health.addToServer(this.#server);
    new ReflectionService(packageDefinition).addToServer(this.#server);
  }

  async start(): Promise<void> {
    this.#port = await new Promise<number>((resolve, reject) => {
      this.#server.bindAsync(
        `${this.#o.host}:${this.#o.port}`,
        grpc.ServerCredentials.createInsecure(),
        (err, port) => (err ? reject(err) : resolve(port)),
      );
    });
  }

  get port(): number {
    return this.#port;
  }

  /**
   * Validates and hands a request's events to the log. Resolves once every publish has
   * been *issued* (so the next request's events land after these), with the promise of
   * the response.
   */
  async #issue(req: PublishRequest__Output): Promise<Issued> {
    const ack = req.ack as string | number;
    if (ack !== 'ACK_LEVEL_UNSPECIFIED' && ack !== 'ACCEPTED' && ack !== 'PERSISTED') {
      throw new InvalidArgumentError('ack', `unknown ack level ${String(ack)}`);
    }
    const records = validateEvents(req.events, this.#o.limits);
    const pending = ack === 'PERSISTED' ? await this.#o.waiter.prepare(records) : undefined;
    const published = this.#o.publisher.publish(records);
    const result = (async (): Promise<PublishResponse> => {
      try {
        const pubAcks = await published;
        if (pending) return { acks: await pending.wait(pubAcks) };
        const acks: EventAck[] = pubAcks.map((a, i) => ({
          event_id: records[i]?.event_id,
          duplicate: a.duplicate,
          seq: 0,
          offset: a.seq,
        }));
        return { acks };
      } finally {
        pending?.dispose();
      }
    })();
    result.catch(() => undefined); // observed by the caller; never an unhandled rejection
    return { result };
  }

  #publishStream(call: grpc.ServerDuplexStream<PublishRequest__Output, PublishResponse>): void {
    let issueChain: Promise<unknown> = Promise.resolve();
    let respondChain: Promise<void> = Promise.resolve();
    let inFlight = 0;
    let failed = false;
    let index = 0;

    call.on('data', (req: PublishRequest__Output) => {
      if (failed) return;
      const n = index++;
      if (++inFlight >= STREAM_MAX_IN_FLIGHT) call.pause();
      const issued = issueChain.then(() => this.#issue(req));
      issueChain = issued.catch(() => undefined);
      respondChain = respondChain.then(async () => {
        try {
          const response = await (await issued).result;
          if (!failed) call.write(response);
        } catch (err) {
          if (!failed) {
            failed = true;
            const status = this.#toStatus(err, 'PublishStream');
            call.emit('error', { ...status, details: `request ${n}: ${status.details}` });
          }
        } finally {
          if (--inFlight < STREAM_MAX_IN_FLIGHT) call.resume();
        }
      });
    });
    call.on('end', () => {
      void respondChain.then(() => {
        if (!failed) call.end();
      });
    });
    call.on('error', () => {
      failed = true;
    });
  }

  #toStatus(err: unknown, method: string): Partial<grpc.StatusObject> {
    const e = toRunstreamError(err);
    if (e.grpcStatus === grpc.status.INTERNAL || e.grpcStatus === grpc.status.UNAVAILABLE) {
      this.#o.log.warn({ err, method }, 'publish failed');
    }
    return { code: e.grpcStatus, details: e.message };
  }

  /** Stops taking calls; in-flight calls get the grace period to finish. */
  async close(graceMs = 5_000): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#health.setStatus('', 'NOT_SERVING');
    this.#health.setStatus(INGEST_SERVICE, 'NOT_SERVING');
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.#server.forceShutdown();
        resolve();
      }, graceMs);
      this.#server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
