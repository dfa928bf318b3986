/**
 * The HTTP port: WebSocket upgrades on `/v1/ws`, the routes of other modules (History, SSE,
 * cancel), and health/readiness probes.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type pg from 'pg';
import { WebSocketServer } from 'ws';
import { authenticateHttp, rejectUpgrade } from '../auth/http.js';
import { OriginPolicy } from '../auth/origin.js';
import type { Authenticator, Principal } from '../auth/principal.js';
import { DEFAULT_WS_MAX_CONNECTIONS } from '../config.js';
import { ErrorCode, OriginNotAllowedError, RunstreamError, toRunstreamError } from '../errors.js';
import { type HttpRoute, requestUrl, sendError, sendJson } from '../http/util.js';
import type { RunControl } from '../ingest/control.js';
import type { CommittedEvent } from '../log/announcements.js';
import type { DeletionNotice } from '../log/deletion-notices.js';
import type { ThreadFeeds } from '../log/thread-feed.js';
import type { Logger } from '../logger.js';
import { CLOSE_TRY_AGAIN_LATER, Connection } from './connection.js';
import { errorFrame } from './frames.js';
import type { LiveSubscriptions } from './live-subscriptions.js';
import type { LogBounds } from './subscription.js';

export const WS_PATH = '/v1/ws';

export interface HttpServerOptions {
  readonly host: string;
  readonly port: number;
  readonly pool: pg.Pool;
  /** Absent on a node that does not run fan-out: no WebSocket endpoint then. */
  readonly feeds: ThreadFeeds<CommittedEvent[]> | undefined;
  /** Deletion notices for the WebSocket subscriptions (History). */
  readonly deletions?: ThreadFeeds<DeletionNotice> | undefined;
  readonly pageSize: number;
  readonly maxPageBytes: number;
  readonly live?: LiveSubscriptions | undefined;
  readonly maxSubscriptions: number;
  readonly maxBufferedBytes: number;
  readonly maxPayloadBytes: number;
  readonly pingIntervalMs: number;
  /**
   * WebSocket connections held at most (default {@link DEFAULT_WS_MAX_CONNECTIONS}); past it a
   * new one is closed with 1013 (try again later).
   */
  readonly maxConnections?: number;
  /** Cancel requests from WebSocket clients; absent: `cancel` frames are refused as unavailable. */
  readonly control?: RunControl | undefined;
  readonly logBounds: () => Promise<LogBounds>;
  /** Readiness: every dependency this node needs is reachable. */
  readonly ready: () => Promise<boolean>;
  /** Routes of other modules (history, SSE, ...), tried before the built-in ones. */
  readonly routes?: readonly HttpRoute[];
  /** Consulted at WebSocket upgrade and by the built-in routes (other routes call it themselves). */
  readonly auth: Authenticator;
  /** Browser origins allowed (RS_ALLOWED_ORIGINS); undefined = any. */
  readonly allowedOrigins: readonly string[] | undefined;
  readonly log: Logger;
}

export class HttpServer implements AsyncDisposable {
  readonly #o: HttpServerOptions;
  readonly #server: Server;
  readonly #wss: WebSocketServer;
  readonly #connections = new Set<Connection>();
  readonly #origins: OriginPolicy;
  #pinger: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(o: HttpServerOptions) {
    this.#o = o;
    this.#origins = new OriginPolicy(o.allowedOrigins);
    // The one guard of the HTTP port: whatever a route throws is answered (400 for bad
    // input, 500 otherwise) and logged, never thrown into the event loop.
    this.#server = createServer((req, res) => {
      this.#route(req, res).catch((err: unknown) => {
        const e = toRunstreamError(err);
        if (e.httpStatus >= 500) o.log.error({ err, url: req.url?.slice(0, 200) }, 'http handler failed');
        sendError(res, e);
      });
    });
    this.#wss = new WebSocketServer({
      noServer: true,
      perMessageDeflate: false,
      maxPayload: o.maxPayloadBytes,
    });
    // CONNECT asks for a tunnel: without a listener Node drops the connection unanswered.
    this.#server.on('connect', (_req, socket: Duplex) => {
      socket.on('error', () => socket.destroy());
      rejectUpgrade(socket, new RunstreamError(ErrorCode.MethodNotAllowed, 'CONNECT is not served here'));
    });
    this.#server.on('upgrade', (req, socket, head) => {
      // A peer that resets mid-upgrade must not crash the process; nor may anything below.
      const onSocketError = (): void => {
        socket.destroy();
      };
      socket.on('error', onSocketError);
      try {
        this.#onUpgrade(req, socket, head, onSocketError);
      } catch (err) {
        socket.off('error', onSocketError);
        const e = toRunstreamError(err);
        if (e.httpStatus >= 500) o.log.error({ err }, 'websocket upgrade failed');
        rejectUpgrade(socket, e);
      }
    });
  }

  #onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, onSocketError: () => void): void {
    const url = requestUrl(req);
    if (url.pathname !== WS_PATH || !this.#o.feeds || this.#closed) {
      socket.off('error', onSocketError);
      rejectUpgrade(
        socket,
        new RunstreamError(ErrorCode.NotFound, `no WebSocket endpoint at ${url.pathname}`),
      );
      return;
    }
    this.#admit(req, url).then(
      (principal) => {
        socket.off('error', onSocketError);
        if (this.#closed || socket.destroyed) {
          socket.destroy();
          return;
        }
        this.#upgrade(req, socket, head, principal);
      },
      (err: unknown) => {
        socket.off('error', onSocketError);
        this.#o.log.debug({ err }, 'websocket upgrade refused');
        rejectUpgrade(socket, err);
      },
    );
  }

  /** Origin, then token: refused before the handshake with 403 or 401. */
  async #admit(req: IncomingMessage, url: URL): Promise<Principal> {
    if (!this.#origins.allows(req.headers.origin)) throw new OriginNotAllowedError(req.headers.origin ?? '');
    return authenticateHttp(this.#o.auth, req, url);
  }

  #upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, principal: Principal): void {
    const o = this.#o;
    this.#wss.handleUpgrade(req, socket, head, (ws) => {
      const max = o.maxConnections ?? DEFAULT_WS_MAX_CONNECTIONS;
      if (this.#connections.size >= max) {
        // Accepted, told why, and closed: unlike a refused upgrade, a browser can see this code.
        ws.send(
          errorFrame(
            null,
            'resource_exhausted',
            `this node holds its maximum of ${max} connections; retry later`,
          ),
        );
        ws.close(CLOSE_TRY_AGAIN_LATER, 'too many connections');
        return;
      }
      const feeds = o.feeds as ThreadFeeds<CommittedEvent[]>;
      const conn = new Connection(ws, {
        pool: o.pool,
        feeds,
        deletions: o.deletions,
        pageSize: o.pageSize,
        maxPageBytes: o.maxPageBytes,
        live: o.live,
        maxSubscriptions: o.maxSubscriptions,
        maxBufferedBytes: o.maxBufferedBytes,
        logBounds: o.logBounds,
        principal,
        control: o.control,
        log: o.log,
      });
      this.#connections.add(conn);
      ws.on('close', () => this.#connections.delete(conn));
    });
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(this.#o.port, this.#o.host, () => {
        this.#server.off('error', reject);
        resolve();
      });
    });
    this.#pinger = setInterval(() => {
      for (const c of this.#connections) c.ping();
    }, this.#o.pingIntervalMs);
    this.#pinger.unref();
  }

  get port(): number {
    return (this.#server.address() as AddressInfo).port;
  }

  get connectionCount(): number {
    return this.#connections.size;
  }

  async #route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = requestUrl(req);
    if (url.pathname === '/healthz') return sendJson(res, 200, { status: 'ok' });
    if (url.pathname === '/readyz') {
      const ready = !this.#closed && (await this.#o.ready().catch(() => false));
      return sendJson(res, ready ? 200 : 503, { status: ready ? 'ready' : 'not ready' });
    }
    // Browsers only: refuse other origins, and let allowed ones read the answers (CORS).
    if (!this.#origins.allows(req.headers.origin)) {
      return sendError(res, new OriginNotAllowedError(req.headers.origin ?? ''));
    }
    if (this.#origins.applyCors(req, res)) return;
    for (const route of this.#o.routes ?? []) {
      const match = route.pattern.exec(url.pathname);
      if (match && route.method === req.method) return route.handle(req, res, match, url);
    }
    sendJson(res, 404, { error: { code: 'not_found', message: `no route for ${url.pathname}` } });
  }

  /** Stops accepting, tells every WebSocket client, and closes. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#pinger);
    for (const c of this.#connections) c.close();
    this.#connections.clear();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
    await new Promise<void>((resolve) => this.#wss.close(() => resolve()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
