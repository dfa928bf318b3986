/**
 * A second fan-out node for SSE tests: the fan-out role alone (roles/fanout.ts) with its
 * HTTP server, on the stack's own nats-server and Postgres, next to the stack's broker
 * (which ingests and persists). It is what a scaled-out deployment runs, and it lets a
 * test choose the SSE limits and the authenticator, and look at the node's streams.
 */
import type { Authenticator } from '../../src/auth/principal.js';
import { loadConfig } from '../../src/config.js';
import type { SseStreams } from '../../src/fanout/sse/routes.js';
import { HttpServer } from '../../src/http/server.js';
import { UnsentResponses } from '../../src/http/unsent.js';
import { RunControl } from '../../src/ingest/control.js';
import type { CommittedEvent } from '../../src/log/announcements.js';
import { LogPublisher } from '../../src/log/publisher.js';
import type { ThreadFeeds } from '../../src/log/thread-feed.js';
import { createLogger } from '../../src/logger.js';
import { type Closers, startBase } from '../../src/roles/base.js';
import { startFanoutRole } from '../../src/roles/fanout.js';
import type { Stack } from './stack.js';

export interface SseNode extends AsyncDisposable {
  readonly url: string;
  readonly sse: SseStreams;
  readonly feeds: ThreadFeeds<CommittedEvent[]>;
}

export interface SseNodeOptions {
  readonly auth?: Authenticator;
  readonly keepAliveMs?: number;
  readonly maxBufferedBytes?: number;
  readonly maxStreams?: number;
  readonly pageSize?: number;
}

export async function startSseNode(stack: Stack, o: SseNodeOptions = {}): Promise<SseNode> {
  const log = createLogger(process.env.LOG_LEVEL ?? 'warn', 'sse-node');
  const config = loadConfig(
    {},
    {
      ...stack.config,
      roles: new Set(['fanout']),
      grpcPort: 0,
      httpPort: 0,
      pgPoolSize: 4,
      catchupPageSize: o.pageSize ?? 50,
      wsMaxBufferedBytes: o.maxBufferedBytes ?? 16 * 1024 * 1024,
      sseKeepAliveMs: o.keepAliveMs ?? 15_000,
      sseMaxStreams: o.maxStreams ?? 1000,
    },
  );
  const closers: Closers = [];
  const started = await startBase(config, log, closers);
  const base = o.auth === undefined ? started : { ...started, auth: o.auth };
  const control = new RunControl({
    nc: base.nc,
    publisher: new LogPublisher(base.nc, base.subjects),
    subjects: base.subjects,
    pool: base.pool,
    log,
  });
  const fanout = startFanoutRole(base, control);
  const http = new HttpServer({
    host: '127.0.0.1',
    port: 0,
    router: base.router,
    upgrades: fanout.upgrades,
    ready: async () => true,
    allowedOrigins: undefined,
    unsent: new UnsentResponses(config.httpMaxUnsentBytes, config.httpWriteTimeoutMs),
    requestTimeoutMs: config.httpRequestTimeoutMs,
    log,
  });
  await http.start();
  closers.push(() => http.close());
  closers.push(() => fanout.closeSubscribers());
  return {
    url: `http://127.0.0.1:${http.port}`,
    sse: fanout.sse,
    feeds: fanout.feeds,
    async [Symbol.asyncDispose]() {
      for (const c of closers.splice(0).reverse()) await c().catch(() => undefined);
    },
  };
}
