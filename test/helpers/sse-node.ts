/**
 * A second fan-out node for SSE tests: a real HTTP server with the SSE routes, on the
 * stack's own nats-server and Postgres, next to the stack's broker (which ingests and
 * persists). It is what a scaled-out deployment runs, and it lets a test choose the SSE
 * limits and the authenticator, and look at the node's streams.
 */
import { connect, type NatsConnection } from '@nats-io/transport-node';
import pg from 'pg';
import type { Authenticator } from '../../src/auth/principal.js';
import { OPEN_AUTHENTICATOR } from '../../src/auth/principal.js';
import { DEFAULT_MAX_PAGE_BYTES } from '../../src/config.js';
import { HttpServer } from '../../src/fanout/http-server.js';
import { SseService, type SseServiceOptions } from '../../src/fanout/sse.js';
import { type CommittedEvent, decodeEvents } from '../../src/log/announcements.js';
import { Subjects } from '../../src/log/subjects.js';
import { ThreadFeeds } from '../../src/log/thread-feed.js';
import { createLogger } from '../../src/logger.js';
import type { Stack } from './stack.js';

export interface SseNode extends AsyncDisposable {
  readonly url: string;
  readonly sse: SseService;
  readonly feeds: ThreadFeeds<CommittedEvent[]>;
}

export interface SseNodeOptions {
  readonly auth?: Authenticator;
  readonly keepAliveMs?: number;
  readonly maxBufferedBytes?: number;
  readonly maxStreams?: number;
  readonly pageSize?: number;
  readonly cancelRun?: SseServiceOptions['cancelRun'];
}

export async function startSseNode(stack: Stack, o: SseNodeOptions = {}): Promise<SseNode> {
  const log = createLogger(process.env.LOG_LEVEL ?? 'warn', 'sse-node');
  const nc: NatsConnection = await connect({ servers: stack.servers.nats.url });
  const pool = new pg.Pool({ connectionString: stack.servers.pg.url, max: 4 });
  pool.on('error', () => undefined);
  const subjects = new Subjects(stack.config.subjectPrefix);
  const feeds = new ThreadFeeds<CommittedEvent[]>(nc, (t) => subjects.events(t), decodeEvents, log);
  const auth = o.auth ?? OPEN_AUTHENTICATOR;
  const sse = new SseService({
    pool,
    feeds,
    logBounds: async () => ({ first: 1, last: Number.MAX_SAFE_INTEGER }),
    pageSize: o.pageSize ?? 50,
    maxPageBytes: DEFAULT_MAX_PAGE_BYTES,
    maxBufferedBytes: o.maxBufferedBytes ?? 16 * 1024 * 1024,
    keepAliveMs: o.keepAliveMs ?? 15_000,
    maxStreams: o.maxStreams ?? 1000,
    auth,
    cancelRun: o.cancelRun,
    log,
  });
  const http = new HttpServer({
    host: '127.0.0.1',
    port: 0,
    pool,
    feeds,
    pageSize: 50,
    maxPageBytes: DEFAULT_MAX_PAGE_BYTES,
    maxSubscriptions: 16,
    maxBufferedBytes: 16 * 1024 * 1024,
    maxPayloadBytes: 64 * 1024,
    pingIntervalMs: 60_000,
    logBounds: async () => ({ first: 1, last: Number.MAX_SAFE_INTEGER }),
    routes: sse.routes,
    ready: async () => true,
    auth,
    allowedOrigins: undefined,
    log,
  });
  await http.start();
  return {
    url: `http://127.0.0.1:${http.port}`,
    sse,
    feeds,
    async [Symbol.asyncDispose]() {
      sse.close();
      await http.close();
      await nc.close();
      await pool.end();
    },
  };
}
