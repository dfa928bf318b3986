/**
 * The gRPC port, shared by every stage that serves gRPC (Ingest, Subscriber, History):
 * each registers its service here; health checking and reflection cover them all.
 */
import * as grpc from '@grpc/grpc-js';
import { ReflectionService } from '@grpc/reflection';
import { HealthImplementation } from 'grpc-health-check';
import { loadProto } from '../proto.js';

export interface GrpcServerOptions {
  readonly host: string;
  readonly port: number;
  readonly maxMessageBytes: number;
}

export class GrpcServer implements AsyncDisposable {
  readonly #o: GrpcServerOptions;
  readonly server: grpc.Server;
  readonly #health: HealthImplementation;
  readonly #names: string[] = [];
  #port = 0;
  #closed = false;

  constructor(o: GrpcServerOptions) {
    this.#o = o;
    this.server = new grpc.Server({
      'grpc.max_receive_message_length': o.maxMessageBytes,
      'grpc.keepalive_time_ms': 30_000,
      'grpc.keepalive_timeout_ms': 10_000,
      'grpc.keepalive_permit_without_calls': 1,
      'grpc.http2.min_ping_interval_without_data_ms': 5_000,
    });
    this.#health = new HealthImplementation({ '': 'SERVING' });
    this.#health.addToServer(this.server);
    new ReflectionService(loadProto().packageDefinition).addToServer(this.server);
  }

  /** Registers a service; `name` is its full name for health checks (e.g. `runstream.v1.Ingest`). */
  addService(
    name: string,
    definition: grpc.ServiceDefinition,
    handlers: grpc.UntypedServiceImplementation,
  ): void {
    this.server.addService(definition, handlers);
    this.#names.push(name);
    this.#health.setStatus(name, 'SERVING');
  }

  async start(): Promise<void> {
    this.#port = await new Promise<number>((resolve, reject) => {
      this.server.bindAsync(
        `${this.#o.host}:${this.#o.port}`,
        grpc.ServerCredentials.createInsecure(),
        (err, port) => (err ? reject(err) : resolve(port)),
      );
    });
  }

  get port(): number {
    return this.#port;
  }

  /** Stops taking calls; in-flight calls get the grace period to finish. */
  async close(graceMs = 5_000): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const name of ['', ...this.#names]) this.#health.setStatus(name, 'NOT_SERVING');
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, graceMs);
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
