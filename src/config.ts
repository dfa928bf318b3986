/**
 * The broker's configuration: the only module that reads `process.env`.
 *
 * {@link loadConfig} builds a typed, validated, frozen {@link Config} once and fails
 * fast with every bad field named, so a misconfigured deployment never half-starts.
 */
import { type AuthConfig, DEFAULT_JWKS_CACHE_MS, DEFAULT_JWKS_COOLDOWN_MS } from './auth/jwt.js';
import { checkHmacSecret, parsePublicKey, readJwksFile, readPublicKeyPem } from './auth/keys.js';
import { parseOriginEntry } from './auth/origin.js';
import { DEFAULT_PARTITIONS, MAX_PARTITIONS } from './domain/partition.js';
import type { LogFormat } from './logger.js';

export const DEFAULT_GRPC_PORT = 50051;
export const DEFAULT_HTTP_PORT = 8080;
export const DEFAULT_NATS_URL = 'nats://127.0.0.1:4222';
export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/runstream';
export const DEFAULT_STREAM_NAME = 'RUNSTREAM';
export const DEFAULT_SUBJECT_PREFIX = 'runstream';
export const DEFAULT_STREAM_MAX_AGE_MS = 7 * 24 * 3600 * 1000;
export const DEFAULT_DUPLICATE_WINDOW_MS = 2 * 60 * 1000;
export const DEFAULT_MAX_CONTENT_BYTES = 256 * 1024;
export const DEFAULT_MAX_EVENTS_PER_REQUEST = 5000;
/** Deepest nesting of an event's content_json / metadata_json (Postgres refuses ~20,000). */
export const DEFAULT_MAX_JSON_DEPTH = 512;
/** Largest gRPC request accepted (a Publish of many events); larger ones are RESOURCE_EXHAUSTED. */
export const DEFAULT_MAX_GRPC_MESSAGE_BYTES = 16 * 1024 * 1024;
/** Bytes of publish requests a node holds unanswered, across calls; past it Publish is refused, streams wait. */
export const DEFAULT_INGEST_MAX_INFLIGHT_BYTES = 256 * 1024 * 1024;
/** Requests one PublishStream holds unanswered before the broker stops reading it. */
export const DEFAULT_PUBLISH_STREAM_MAX_INFLIGHT = 64;
/** Bytes of them, likewise (one request is always taken). */
export const DEFAULT_PUBLISH_STREAM_MAX_INFLIGHT_BYTES = 16 * 1024 * 1024;
/** Concurrent gRPC Subscribe calls per node; past it a call is refused with RESOURCE_EXHAUSTED. */
export const DEFAULT_GRPC_SUBSCRIBE_MAX_CALLS = 10_000;
/** Long-poll requests waiting at once per node; past it a new one is refused with 429. */
export const DEFAULT_LONG_POLL_MAX_WAITS = 10_000;
/**
 * Bytes queued to subscribers on one node, all connections and transports together; past
 * it, a backlogged subscriber whose next frame does not fit is cut off as too slow.
 */
export const DEFAULT_FANOUT_MAX_QUEUED_BYTES = 1024 * 1024 * 1024;
/**
 * Bytes of live events one subscription holds while it catches up; past them it drops
 * them and reads them from Postgres instead.
 */
export const DEFAULT_FANOUT_MAX_HELD_BYTES = 8 * 1024 * 1024;
/**
 * A subscriber with frames queued of which none has been written out for this long is
 * cut off as too slow, however little it has queued: one that never reads is let go.
 */
export const DEFAULT_SLOW_CONSUMER_STALL_MS = 60_000;
/**
 * Bytes of whole HTTP answers (History pages, long-poll answers) written and not yet taken
 * by their clients, on one node; past it new requests are refused with 429.
 */
export const DEFAULT_HTTP_MAX_UNSENT_BYTES = 256 * 1024 * 1024;
/** An HTTP answer its client has not taken after this long has its socket destroyed. */
export const DEFAULT_HTTP_WRITE_TIMEOUT_MS = 30_000;
/**
 * An HTTP request whose head and body have not all arrived this long after it began is
 * answered 408 and its connection closed (Node's own default is 300 s: a socket held that
 * long by a client that trickles a body, or never finishes its headers).
 */
export const DEFAULT_HTTP_REQUEST_TIMEOUT_MS = 30_000;
export const DEFAULT_PERSIST_BATCH_MAX = 2000;
/**
 * A persister's hold on its partitions: renewed every fifth of it; a partition whose lease
 * ran out (its persister died) is taken over by another within about this long.
 */
export const DEFAULT_PERSISTER_LEASE_MS = 5_000;
export const DEFAULT_PG_POOL_SIZE = 8;
export const DEFAULT_PERSISTED_ACK_TIMEOUT_MS = 30_000;
export const DEFAULT_CATCHUP_PAGE_SIZE = 500;
/**
 * Bytes of event content and metadata in one page, at most: a History page, a chat view
 * page, a catch-up read. Under gRPC's default 4 MiB message limit of clients.
 */
export const DEFAULT_MAX_PAGE_BYTES = 2 * 1024 * 1024;
export const DEFAULT_WS_MAX_BUFFERED_BYTES = 16 * 1024 * 1024;
export const DEFAULT_WS_MAX_PAYLOAD_BYTES = 64 * 1024;
export const DEFAULT_WS_MAX_SUBSCRIPTIONS = 256;
export const DEFAULT_WS_PING_INTERVAL_MS = 25_000;
/** SSE keep-alive comment interval: well under the idle timeouts of proxies and the LangGraph SDK. */
export const DEFAULT_SSE_KEEPALIVE_MS = 15_000;
/** SSE streams (v1 and LangGraph join) per process; past it a new one is refused with 429. */
export const DEFAULT_SSE_MAX_STREAMS = 10_000;
/** WebSocket connections per process; past it a new one is closed with 1013 (try again later). */
export const DEFAULT_WS_MAX_CONNECTIONS = 10_000;
/** Bytes queued on one gRPC Subscribe call past which the subscriber is cut off as too slow. */
export const DEFAULT_GRPC_SUBSCRIBE_MAX_BUFFERED_BYTES = 16 * 1024 * 1024;
export const DEFAULT_SHUTDOWN_GRACE_MS = 10_000;
/** Processes that serve ingest and fan-out on the shared ports; 1 = the broker is this one process. */
export const DEFAULT_WORKERS = 1;
/** The most RS_WORKERS may be: far above any core count a host has today. */
export const MAX_WORKERS = 256;
/** Clock skew allowed on a token's `exp`/`nbf`; the broker honours a token this long past its `exp`. */
export const DEFAULT_JWT_CLOCK_TOLERANCE_MS = 5_000;

export type Role = 'ingest' | 'persister' | 'fanout';
export const ALL_ROLES: readonly Role[] = ['ingest', 'persister', 'fanout'];

/** Every setting. The JWT settings (`jwt*`) are authentication's own ({@link AuthConfig}). */
export interface Config extends AuthConfig {
  /** Which pipeline stages this process runs. */
  readonly roles: ReadonlySet<Role>;
  /**
   * Worker processes (node:cluster) that run ingest and fan-out on the shared ports; the
   * persister, when in {@link roles}, runs in one more worker of its own. 1 = no workers:
   * the broker is this process, as it always was.
   */
  readonly workers: number;
  readonly host: string;
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly natsUrl: string;
  readonly databaseUrl: string;
  /** JetStream stream holding the ingest log. */
  readonly streamName: string;
  /** First token of every NATS subject the broker uses. */
  readonly subjectPrefix: string;
  readonly streamMaxAgeMs: number;
  /** JetStream replicas of the log stream: 1 on a single server, 3 on a production cluster. */
  readonly streamReplicas: number;
  readonly duplicateWindowMs: number;
  readonly maxContentBytes: number;
  readonly maxEventsPerRequest: number;
  readonly maxJsonDepth: number;
  readonly maxGrpcMessageBytes: number;
  readonly ingestMaxInflightBytes: number;
  readonly publishStreamMaxInflight: number;
  readonly publishStreamMaxInflightBytes: number;
  readonly grpcSubscribeMaxCalls: number;
  readonly longPollMaxWaits: number;
  readonly fanoutMaxQueuedBytes: number;
  readonly fanoutMaxHeldBytes: number;
  readonly httpMaxUnsentBytes: number;
  readonly httpWriteTimeoutMs: number;
  readonly httpRequestTimeoutMs: number;
  readonly slowConsumerStallMs: number;
  readonly persistBatchMax: number;
  /** Partitions of the log (fixed when it is created; domain/partition.ts). */
  readonly partitions: number;
  readonly persisterLeaseMs: number;
  readonly pgPoolSize: number;
  readonly persistedAckTimeoutMs: number;
  readonly catchupPageSize: number;
  readonly maxPageBytes: number;
  readonly wsMaxBufferedBytes: number;
  readonly wsMaxPayloadBytes: number;
  readonly wsMaxSubscriptions: number;
  readonly wsPingIntervalMs: number;
  /** Interval of the `: keep-alive` comment on every SSE response. */
  readonly sseKeepAliveMs: number;
  readonly sseMaxStreams: number;
  readonly wsMaxConnections: number;
  readonly grpcSubscribeMaxBufferedBytes: number;
  readonly shutdownGraceMs: number;
  readonly logLevel: string;
  /** `json` (default) or `pretty` (readable lines, for `make run`). */
  readonly logFormat: LogFormat;
  /** Browser origins allowed (exact or `https://*.example.com`); undefined = any origin. */
  readonly allowedOrigins: readonly string[] | undefined;
  /**
   * Test hooks that loosen ingest's checks, to produce events Postgres refuses
   * (RS_TEST_LOOSEN_VALIDATION; never in production). `json-depth`: no nesting limit.
   */
  readonly testLoosenValidation: ReadonlySet<TestLoosening>;
}

export type TestLoosening = 'json-depth';
const TEST_LOOSENINGS: readonly TestLoosening[] = ['json-depth'];

export class ConfigError extends Error {
  override name = 'ConfigError';
  constructor(readonly problems: readonly string[]) {
    super(`invalid configuration:\n  ${problems.join('\n  ')}`);
  }
}

type Env = Readonly<Record<string, string | undefined>>;

/** Builds the config from an environment (default `process.env`), with overrides winning. */
export function loadConfig(env: Env = process.env, overrides: Partial<Config> = {}): Config {
  const problems: string[] = [];

  const int = (name: string, fallback: number, min: number, max: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min || value > max) {
      problems.push(`${name}=${JSON.stringify(raw)}: must be an integer in [${min}, ${max}]`);
      return fallback;
    }
    return value;
  };
  const str = (name: string, fallback: string, pattern?: RegExp): string => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    if (pattern && !pattern.test(raw)) {
      problems.push(`${name}=${JSON.stringify(raw)}: must match ${pattern}`);
      return fallback;
    }
    return raw;
  };

  const roles = new Set<Role>();
  for (const part of str('RS_ROLES', ALL_ROLES.join(',')).split(',')) {
    const role = part.trim();
    if (role === '') continue;
    if ((ALL_ROLES as readonly string[]).includes(role)) roles.add(role as Role);
    else problems.push(`RS_ROLES: unknown role ${JSON.stringify(role)} (known: ${ALL_ROLES.join(', ')})`);
  }
  if (roles.size === 0 && !problems.some((p) => p.startsWith('RS_ROLES'))) {
    problems.push('RS_ROLES: at least one role is required');
  }

  const config: Config = {
    roles,
    workers: int('RS_WORKERS', DEFAULT_WORKERS, 1, MAX_WORKERS),
    host: str('RS_HOST', '0.0.0.0'),
    grpcPort: int('GRPC_PORT', DEFAULT_GRPC_PORT, 0, 65535),
    httpPort: int('HTTP_PORT', DEFAULT_HTTP_PORT, 0, 65535),
    natsUrl: str('NATS_URL', DEFAULT_NATS_URL),
    databaseUrl: str('DATABASE_URL', DEFAULT_DATABASE_URL, /^postgres(ql)?:\/\//),
    streamName: str('RS_STREAM', DEFAULT_STREAM_NAME, /^[A-Za-z0-9_-]{1,64}$/),
    subjectPrefix: str('RS_SUBJECT_PREFIX', DEFAULT_SUBJECT_PREFIX, /^[A-Za-z0-9_-]{1,64}$/),
    streamMaxAgeMs: int('RS_STREAM_MAX_AGE_MS', DEFAULT_STREAM_MAX_AGE_MS, 60_000, 2 ** 40),
    streamReplicas: int('RS_STREAM_REPLICAS', 1, 1, 5),
    duplicateWindowMs: int('RS_DUPLICATE_WINDOW_MS', DEFAULT_DUPLICATE_WINDOW_MS, 1000, 2 ** 40),
    maxContentBytes: int('RS_MAX_CONTENT_BYTES', DEFAULT_MAX_CONTENT_BYTES, 1024, 64 * 1024 * 1024),
    maxEventsPerRequest: int('RS_MAX_EVENTS_PER_REQUEST', DEFAULT_MAX_EVENTS_PER_REQUEST, 1, 1_000_000),
    maxJsonDepth: int('RS_MAX_JSON_DEPTH', DEFAULT_MAX_JSON_DEPTH, 16, 4096),
    maxGrpcMessageBytes: int('RS_MAX_GRPC_MESSAGE_BYTES', DEFAULT_MAX_GRPC_MESSAGE_BYTES, 1024, 2 ** 31 - 1),
    ingestMaxInflightBytes: int(
      'RS_INGEST_MAX_INFLIGHT_BYTES',
      DEFAULT_INGEST_MAX_INFLIGHT_BYTES,
      64 * 1024,
      2 ** 40,
    ),
    publishStreamMaxInflight: int(
      'RS_PUBLISH_STREAM_MAX_INFLIGHT',
      DEFAULT_PUBLISH_STREAM_MAX_INFLIGHT,
      1,
      100_000,
    ),
    publishStreamMaxInflightBytes: int(
      'RS_PUBLISH_STREAM_MAX_INFLIGHT_BYTES',
      DEFAULT_PUBLISH_STREAM_MAX_INFLIGHT_BYTES,
      64 * 1024,
      2 ** 40,
    ),
    grpcSubscribeMaxCalls: int(
      'RS_GRPC_SUBSCRIBE_MAX_CALLS',
      DEFAULT_GRPC_SUBSCRIBE_MAX_CALLS,
      1,
      10_000_000,
    ),
    longPollMaxWaits: int('RS_LONG_POLL_MAX_WAITS', DEFAULT_LONG_POLL_MAX_WAITS, 1, 10_000_000),
    fanoutMaxQueuedBytes: int(
      'RS_FANOUT_MAX_QUEUED_BYTES',
      DEFAULT_FANOUT_MAX_QUEUED_BYTES,
      1024 * 1024,
      2 ** 42,
    ),
    fanoutMaxHeldBytes: int('RS_FANOUT_MAX_HELD_BYTES', DEFAULT_FANOUT_MAX_HELD_BYTES, 64 * 1024, 2 ** 40),
    slowConsumerStallMs: int('RS_SLOW_CONSUMER_STALL_MS', DEFAULT_SLOW_CONSUMER_STALL_MS, 100, 86_400_000),
    httpMaxUnsentBytes: int('RS_HTTP_MAX_UNSENT_BYTES', DEFAULT_HTTP_MAX_UNSENT_BYTES, 1024 * 1024, 2 ** 42),
    httpWriteTimeoutMs: int('RS_HTTP_WRITE_TIMEOUT_MS', DEFAULT_HTTP_WRITE_TIMEOUT_MS, 100, 3_600_000),
    httpRequestTimeoutMs: int('RS_HTTP_REQUEST_TIMEOUT_MS', DEFAULT_HTTP_REQUEST_TIMEOUT_MS, 100, 3_600_000),
    persistBatchMax: int('RS_PERSIST_BATCH_MAX', DEFAULT_PERSIST_BATCH_MAX, 1, 100_000),
    partitions: int('RS_PARTITIONS', DEFAULT_PARTITIONS, 1, MAX_PARTITIONS),
    persisterLeaseMs: int('RS_PERSISTER_LEASE_MS', DEFAULT_PERSISTER_LEASE_MS, 500, 600_000),
    pgPoolSize: int('RS_PG_POOL_SIZE', DEFAULT_PG_POOL_SIZE, 1, 1000),
    persistedAckTimeoutMs: int(
      'RS_PERSISTED_ACK_TIMEOUT_MS',
      DEFAULT_PERSISTED_ACK_TIMEOUT_MS,
      100,
      3_600_000,
    ),
    catchupPageSize: int('RS_CATCHUP_PAGE_SIZE', DEFAULT_CATCHUP_PAGE_SIZE, 1, 100_000),
    maxPageBytes: int('RS_MAX_PAGE_BYTES', DEFAULT_MAX_PAGE_BYTES, 1024, 1024 * 1024 * 1024),
    wsMaxBufferedBytes: int('RS_WS_MAX_BUFFERED_BYTES', DEFAULT_WS_MAX_BUFFERED_BYTES, 64 * 1024, 2 ** 31),
    wsMaxPayloadBytes: int('RS_WS_MAX_PAYLOAD_BYTES', DEFAULT_WS_MAX_PAYLOAD_BYTES, 1024, 64 * 1024 * 1024),
    wsMaxSubscriptions: int('RS_WS_MAX_SUBSCRIPTIONS', DEFAULT_WS_MAX_SUBSCRIPTIONS, 1, 1_000_000),
    wsPingIntervalMs: int('RS_WS_PING_INTERVAL_MS', DEFAULT_WS_PING_INTERVAL_MS, 100, 3_600_000),
    sseKeepAliveMs: int('RS_SSE_KEEPALIVE_MS', DEFAULT_SSE_KEEPALIVE_MS, 10, 3_600_000),
    sseMaxStreams: int('RS_SSE_MAX_STREAMS', DEFAULT_SSE_MAX_STREAMS, 1, 10_000_000),
    wsMaxConnections: int('RS_WS_MAX_CONNECTIONS', DEFAULT_WS_MAX_CONNECTIONS, 1, 10_000_000),
    grpcSubscribeMaxBufferedBytes: int(
      'RS_GRPC_SUBSCRIBE_MAX_BUFFERED_BYTES',
      DEFAULT_GRPC_SUBSCRIBE_MAX_BUFFERED_BYTES,
      64 * 1024,
      2 ** 31,
    ),
    shutdownGraceMs: int('RS_SHUTDOWN_GRACE_MS', DEFAULT_SHUTDOWN_GRACE_MS, 0, 600_000),
    logLevel: str('LOG_LEVEL', 'info', /^(fatal|error|warn|info|debug|trace|silent)$/),
    logFormat: str('RS_LOG_FORMAT', 'json', /^(json|pretty)$/) as LogFormat,
    testLoosenValidation: testLoosenings(str('RS_TEST_LOOSEN_VALIDATION', ''), problems),
    ...authConfig(env, problems, int),
    ...overrides,
  };
  if (config.duplicateWindowMs > config.streamMaxAgeMs) {
    problems.push('RS_DUPLICATE_WINDOW_MS: must not exceed RS_STREAM_MAX_AGE_MS (JetStream refuses it)');
  }
  if (config.workers > 1 && !config.roles.has('ingest') && !config.roles.has('fanout')) {
    problems.push(
      `RS_WORKERS=${config.workers}: workers serve ingest and fan-out, but RS_ROLES has neither ` +
        '(the persister runs in one process whatever RS_WORKERS is): set RS_WORKERS=1',
    );
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return Object.freeze(config);
}

function testLoosenings(raw: string, problems: string[]): ReadonlySet<TestLoosening> {
  const set = new Set<TestLoosening>();
  for (const part of raw.split(',').map((p) => p.trim())) {
    if (part === '') continue;
    if ((TEST_LOOSENINGS as readonly string[]).includes(part)) set.add(part as TestLoosening);
    else problems.push(`RS_TEST_LOOSEN_VALIDATION: unknown hook ${JSON.stringify(part)} (known: json-depth)`);
  }
  return set;
}

type AuthFields =
  | 'jwtSecret'
  | 'jwtPublicKey'
  | 'jwtJwksFile'
  | 'jwtJwksUrl'
  | 'jwtJwksCacheMs'
  | 'jwtJwksCooldownMs'
  | 'jwtIssuer'
  | 'jwtAudience'
  | 'jwtClockToleranceMs'
  | 'allowedOrigins';

/** The authentication fields, with the keys checked now so a bad one stops start-up. */
function authConfig(
  env: Env,
  problems: string[],
  int: (name: string, fallback: number, min: number, max: number) => number,
): Pick<Config, AuthFields> {
  const opt = (name: string): string | undefined => {
    const raw = env[name];
    return raw === undefined || raw.trim() === '' ? undefined : raw;
  };
  const list = (name: string): string[] =>
    (opt(name) ?? '')
      .split(',')
      .map((v) => v.trim())
      .filter((v) => v !== '');
  const check = (name: string, fn: () => void): void => {
    try {
      fn();
    } catch (err) {
      problems.push(`${name}: ${(err as Error).message}`);
    }
  };

  const jwtSecret = opt('RS_JWT_SECRET');
  const jwtPublicKey = opt('RS_JWT_PUBLIC_KEY');
  const jwtJwksFile = opt('RS_JWT_JWKS_FILE');
  const jwtJwksUrl = opt('RS_JWT_JWKS_URL');
  const keys = [
    ['RS_JWT_SECRET', jwtSecret],
    ['RS_JWT_PUBLIC_KEY', jwtPublicKey],
    ['RS_JWT_JWKS_FILE', jwtJwksFile],
    ['RS_JWT_JWKS_URL', jwtJwksUrl],
  ].filter(([, v]) => v !== undefined);
  if (keys.length > 1) {
    problems.push(`${keys.map(([n]) => n).join(', ')}: set only one JWT key source`);
  }
  if (jwtSecret !== undefined) check('RS_JWT_SECRET', () => checkHmacSecret(jwtSecret));
  if (jwtPublicKey !== undefined) {
    check('RS_JWT_PUBLIC_KEY', () => parsePublicKey(readPublicKeyPem(jwtPublicKey)));
  }
  if (jwtJwksFile !== undefined) check('RS_JWT_JWKS_FILE', () => readJwksFile(jwtJwksFile));
  if (jwtJwksUrl !== undefined) {
    check('RS_JWT_JWKS_URL', () => {
      let url: URL;
      try {
        url = new URL(jwtJwksUrl);
      } catch {
        throw new Error(`${JSON.stringify(jwtJwksUrl)} is not a URL`);
      }
      if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new Error('must be an https:// URL');
    });
  }

  const jwtIssuer = list('RS_JWT_ISSUER');
  const jwtAudience = list('RS_JWT_AUDIENCE');
  if (keys.length === 0) {
    // Claims checks without a key would look like protection while the broker runs open.
    for (const [name, v] of [
      ['RS_JWT_ISSUER', jwtIssuer],
      ['RS_JWT_AUDIENCE', jwtAudience],
    ] as const) {
      if (v.length > 0)
        problems.push(
          `${name}: set, but no JWT key is (RS_JWT_SECRET, RS_JWT_PUBLIC_KEY, RS_JWT_JWKS_FILE or RS_JWT_JWKS_URL)`,
        );
    }
  }

  let allowedOrigins: string[] | undefined;
  const origins = list('RS_ALLOWED_ORIGINS');
  if (origins.length > 0 && !origins.includes('*')) {
    allowedOrigins = [];
    for (const o of origins) {
      try {
        allowedOrigins.push(parseOriginEntry(o));
      } catch (err) {
        problems.push(`RS_ALLOWED_ORIGINS: ${JSON.stringify(o)} ${(err as Error).message}`);
      }
    }
  }

  return {
    jwtSecret,
    jwtPublicKey,
    jwtJwksFile,
    jwtJwksUrl,
    jwtJwksCacheMs: int('RS_JWT_JWKS_CACHE_MS', DEFAULT_JWKS_CACHE_MS, 1000, 86_400_000),
    jwtJwksCooldownMs: int('RS_JWT_JWKS_COOLDOWN_MS', DEFAULT_JWKS_COOLDOWN_MS, 0, 3_600_000),
    jwtIssuer,
    jwtAudience,
    jwtClockToleranceMs: int('RS_JWT_CLOCK_TOLERANCE_MS', DEFAULT_JWT_CLOCK_TOLERANCE_MS, 0, 300_000),
    allowedOrigins,
  };
}

export const DEFAULT_CLI_HTTP_URL = 'http://127.0.0.1:8080';
export const DEFAULT_CLI_GRPC_TARGET = '127.0.0.1:50051';

/** What the `runstream` command's client subcommands read from the environment (flags win). */
export interface CliEnv {
  /** The broker's HTTP base (RS_URL); the WebSocket endpoint is derived from it. */
  readonly httpUrl: string;
  /** The broker's gRPC `host:port` (RS_GRPC_TARGET). */
  readonly grpcTarget: string;
  /** A bearer token for every call (RS_TOKEN). */
  readonly token: string | undefined;
  /** `tail`'s WebSocket endpoint (RS_WS_URL, older than RS_URL; wins over it). */
  readonly wsUrl: string | undefined;
  /** The signing secret `token` mints with (RS_JWT_SECRET). */
  readonly jwtSecret: string | undefined;
  readonly jwtIssuer: string | undefined;
  readonly jwtAudience: string | undefined;
}

export function loadCliEnv(env: Env = process.env): CliEnv {
  const opt = (name: string): string | undefined => {
    const raw = env[name]?.trim();
    return raw === undefined || raw === '' ? undefined : raw;
  };
  return Object.freeze({
    httpUrl: opt('RS_URL') ?? DEFAULT_CLI_HTTP_URL,
    grpcTarget: opt('RS_GRPC_TARGET') ?? DEFAULT_CLI_GRPC_TARGET,
    token: opt('RS_TOKEN'),
    wsUrl: opt('RS_WS_URL'),
    jwtSecret: opt('RS_JWT_SECRET'),
    jwtIssuer: opt('RS_JWT_ISSUER')?.split(',')[0]?.trim(),
    jwtAudience: opt('RS_JWT_AUDIENCE')?.split(',')[0]?.trim(),
  });
}
