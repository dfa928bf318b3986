/**
 * The gRPC port, shared by every stage that serves gRPC (Ingest, Subscriber, History):
 * each registers its service here; health checking and reflection cover them all.
 *
 * It is also the port's one guard. A request message that does not decode is refused with
 * INVALID_ARGUMENT (grpc-js would answer INTERNAL), and a handler that throws, or returns a
 * promise that rejects, ends its call with INTERNAL and a log line, never in the event loop.
 */
import * as grpc from '@grpc/grpc-js';
import { ReflectionService } from '@grpc/reflection';
import { HealthImplementation } from 'grpc-health-check';
import { ErrorCode, InvalidArgumentError, RunstreamError } from '../errors.js';
import type { Logger } from '../logger.js';
import { loadProto } from '../proto.js';
import { NotUtf8Error, notUtf8Field, StrictReader } from './strict-utf8.js';

/** A request message that could not be decoded, handed on (instead of a throw) to be refused. */
export class MalformedMessage {
  constructor(
    readonly reason: string,
    /** The string field whose bytes are not UTF-8, when that is what is wrong and it is known. */
    readonly notUtf8?: string,
  ) {}

  /**
   * The refusal: the field's, named as any refused field (`events[0].content_json: …`, after
   * `request N: ` on a stream), or the message's as a whole.
   */
  refusal(method: string): { error: RunstreamError; perRequest: boolean } {
    if (this.notUtf8 !== undefined) {
      return { error: new InvalidArgumentError(this.notUtf8, 'is not valid UTF-8'), perRequest: true };
    }
    const error = new RunstreamError(
      ErrorCode.InvalidArgument,
      `request message: not a valid ${method} request (${this.reason})`,
    );
    return { error, perRequest: false };
  }
}

/**
 * A deserializer that returns a {@link MalformedMessage} where the original throws, and
 * where a string field is not UTF-8 (naming it): proto-loader's deserializer decodes from a
 * protobufjs reader as well as from bytes, and {@link StrictReader} checks the strings.
 */
function tolerant(
  method: string,
  deserialize: grpc.deserialize<unknown>,
  fast: FastDecoder | undefined,
): grpc.deserialize<unknown> {
  return (bytes) => {
    const usual = fast?.(bytes);
    if (usual !== undefined) return usual;
    try {
      return deserialize(new StrictReader(bytes) as unknown as Buffer);
    } catch (err) {
      if (err instanceof NotUtf8Error) {
        return new MalformedMessage('a string field is not valid UTF-8', notUtf8Field(method, bytes));
      }
      return new MalformedMessage(err instanceof Error ? err.message : String(err));
    }
  };
}

/**
 * A method's own decoder of its usual request message, tried before the contract's: undefined
 * where the message is not of that kind, for the contract's decoder to take (and refuse, if
 * malformed). What it returns must equal what the contract's decoder would.
 */
export type FastDecoder = (bytes: Buffer) => unknown;

/** How a service's requests are taken, beyond its definition. */
export interface ServiceOptions {
  /**
   * Its request streams whose handlers take a {@link MalformedMessage} as a message and refuse
   * it after answering the requests before it.
   */
  readonly malformedInOrder?: readonly string[];
  /** {@link FastDecoder}s, by method name. */
  readonly decoders?: Readonly<Record<string, FastDecoder>>;
}

/**
 * Ends a call whose request message is a {@link MalformedMessage}, before any handler sees it,
 * unless its method is one of `inOrder`: streams whose handler refuses such a message itself,
 * after answering the requests before it.
 */
const refuseMalformed =
  (inOrder: ReadonlySet<string>): grpc.ServerInterceptor =>
  (method, call) => {
    /** Messages received on the call: a stream's refusal names its request as the handler does. */
    let received = 0;
    return new grpc.ServerInterceptingCall(call, {
      start: (next) =>
        next({
          onReceiveMessage: (message, pass) => {
            const n = received++;
            if (!(message instanceof MalformedMessage) || inOrder.has(method.path)) return pass(message);
            const { error, perRequest } = message.refusal(method.path);
            const metadata = new grpc.Metadata();
            metadata.set('rs-error-code', 'RS_ERR_INVALID_ARGUMENT');
            const request = perRequest && method.requestStream ? `request ${n}: ` : '';
            call.sendStatus({
              code: grpc.status.INVALID_ARGUMENT,
              details: `${request}${error.message}`,
              metadata,
            });
          },
        }),
    });
  };

/** A grpc-js server whose every service, ours or a library's, gets the guards above. */
class GuardedServer extends grpc.Server {
  /** Paths of the streams whose handlers refuse a malformed message in order (see refuseMalformed). */
  readonly inOrder: Set<string>;
  /** {@link FastDecoder}s by method path. */
  readonly decoders = new Map<string, FastDecoder>();

  constructor(
    options: grpc.ServerOptions,
    private readonly log: Logger | undefined,
  ) {
    const inOrder = new Set<string>();
    super({ ...options, interceptors: [refuseMalformed(inOrder), ...(options.interceptors ?? [])] });
    this.inOrder = inOrder;
  }

  override addService(
    service: grpc.ServiceDefinition,
    implementation: grpc.UntypedServiceImplementation,
  ): void {
    const guardedService: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
    const guardedHandlers: grpc.UntypedServiceImplementation = {};
    for (const [name, def] of Object.entries(service)) {
      guardedService[name] = {
        ...(def as grpc.MethodDefinition<unknown, unknown>),
        requestDeserialize: tolerant(def.path, def.requestDeserialize, this.decoders.get(def.path)),
      };
      const handler = implementation[name] ?? implementation[def.originalName ?? name];
      if (handler) guardedHandlers[name] = this.#guard(def.path, handler as CallableFunction);
    }
    super.addService(guardedService, guardedHandlers);
  }

  /** The handler, with whatever it throws (or rejects with) turned into an INTERNAL status. */
  #guard(path: string, handler: CallableFunction): grpc.UntypedHandleCall {
    const log = this.log;
    const fail = (err: unknown, call: Record<string, unknown>, callback: unknown): void => {
      log?.error({ err, method: path }, 'grpc handler threw');
      const status = { code: grpc.status.INTERNAL, details: 'internal error' };
      try {
        if (typeof callback === 'function') callback(status);
        else (call as unknown as grpc.ServerWritableStream<unknown, unknown>).emit('error', status);
      } catch (again) {
        log?.error({ err: again, method: path }, 'could not end a failed grpc call');
      }
    };
    return ((call: Record<string, unknown>, callback?: unknown) => {
      try {
        const result: unknown = handler(call, callback);
        if (result instanceof Promise) result.catch((err: unknown) => fail(err, call, callback));
      } catch (err) {
        fail(err, call, callback);
      }
    }) as unknown as grpc.UntypedHandleCall;
  }
}

export interface GrpcServerOptions {
  readonly host: string;
  readonly port: number;
  readonly maxMessageBytes: number;
  /** Where a handler that threw is reported. */
  readonly log?: Logger;
}

export class GrpcServer implements AsyncDisposable {
  readonly #o: GrpcServerOptions;
  readonly server: grpc.Server;
  readonly #guarded: GuardedServer;
  readonly #health: HealthImplementation;
  readonly #names: string[] = [];
  #port = 0;
  #closed = false;

  constructor(o: GrpcServerOptions) {
    this.#o = o;
    this.#guarded = new GuardedServer(
      {
        'grpc.max_receive_message_length': o.maxMessageBytes,
        'grpc.keepalive_time_ms': 30_000,
        'grpc.keepalive_timeout_ms': 10_000,
        'grpc.keepalive_permit_without_calls': 1,
        'grpc.http2.min_ping_interval_without_data_ms': 5_000,
      },
      o.log,
    );
    this.server = this.#guarded;
    this.#health = new HealthImplementation({ '': 'SERVING' });
    this.#health.addToServer(this.server);
    new ReflectionService(loadProto().packageDefinition).addToServer(this.server);
  }

  /** Registers a service; `name` is its full name for health checks (e.g. `runstream.v1.Ingest`). */
  addService(
    name: string,
    definition: grpc.ServiceDefinition,
    handlers: grpc.UntypedServiceImplementation,
    options: ServiceOptions = {},
  ): void {
    for (const method of options.malformedInOrder ?? []) {
      const path = definition[method]?.path;
      if (path !== undefined) this.#guarded.inOrder.add(path);
    }
    for (const [method, decode] of Object.entries(options.decoders ?? {})) {
      const path = definition[method]?.path;
      if (path !== undefined) this.#guarded.decoders.set(path, decode);
    }
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
