/**
 * The HTTP port, shared by every stage that serves HTTP: routes from a {@link Router}
 * (History, SSE, the LangGraph routes, cancel, long-poll), WebSocket upgrades handed to
 * their endpoint by path, and the health and readiness probes.
 *
 * It is also the port's one guard: the request target is read by one function (a bad one
 * is a 400), and whatever a route or an upgrade throws is answered by the error table (400
 * for bad input, 500 otherwise, logged), never thrown into the event loop.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { rejectUpgrade } from '../auth/http.js';
import { OriginPolicy } from '../auth/origin.js';
import { ErrorCode, OriginNotAllowedError, RunstreamError, toRunstreamError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { MetricsSource } from '../metrics.js';
import type { Router } from './router.js';
import type { UnsentResponses } from './unsent.js';
import { requestUrl, sendError, sendJson } from './util.js';

/** Takes over a WebSocket upgrade request: answer it on the socket, or hand it to `ws`. */
export type UpgradeHandler = (req: IncomingMessage, socket: Duplex, head: Buffer, url: URL) => void;

export interface HttpServerOptions {
  readonly host: string;
  readonly port: number;
  readonly router: Router;
  /** Upgrade endpoints by exact path (`/v1/ws`); any other upgrade answers 404. */
  readonly upgrades?: ReadonlyMap<string, UpgradeHandler>;
  /** Readiness: every dependency this node needs is reachable. */
  readonly ready: () => Promise<boolean>;
  /** Browser origins allowed (RS_ALLOWED_ORIGINS); undefined = any. */
  readonly allowedOrigins: readonly string[] | undefined;
  /** Answers written and not yet taken by clients (see unsent.ts). */
  readonly unsent: UnsentResponses;
  /**
   * How long a request's head and body may take to arrive (RS_HTTP_REQUEST_TIMEOUT_MS): then
   * Node answers 408 and closes the connection. Only receiving the request counts: an SSE
   * stream or a long poll, whose request arrived whole, lasts as long as it needs.
   */
  readonly requestTimeoutMs: number;
  /** Served at `GET /metrics`, like the probes outside the unsent-answers bound. */
  readonly metrics?: MetricsSource | undefined;
  readonly log: Logger;
}

/**
 * How long a connection ended after an answer to a request whose body was not read stays
 * open for the client to take the answer and close its side. Destroyed at once, a socket
 * still receiving makes the kernel reset the connection, which can lose the answer.
 */
const UNREAD_BODY_LINGER_MS = 2_000;

/**
 * An answer given before the request's body was read whole (a 404, a route that takes no
 * body, a cancel body refused for its size) ends the connection once written. Kept alive,
 * Node would go on reading and dropping whatever the client sends for as long as the request
 * timeout (RS_HTTP_REQUEST_TIMEOUT_MS): a socket held per request, by a client that never
 * stops sending.
 */
function endIfBodyUnread(req: IncomingMessage, res: ServerResponse): void {
  // Taken now: Node detaches the socket from the request and the answer once it is written.
  const socket = req.socket;
  res.once('finish', () =>
    // An answer given inside the parser's callback finishes before the parser reads the rest of
    // the bytes that came with the headers: a body sent whole is complete once it has.
    setImmediate(() => {
      if (req.complete || socket.destroyed) return;
      socket.end();
      const linger = setTimeout(() => socket.destroy(), UNREAD_BODY_LINGER_MS);
      linger.unref();
      socket.once('close', () => clearTimeout(linger));
    }),
  );
}

export class HttpServer implements AsyncDisposable {
  readonly #o: HttpServerOptions;
  readonly #server: Server;
  readonly #origins: OriginPolicy;
  #closed = false;

  constructor(o: HttpServerOptions) {
    this.#o = o;
    this.#origins = new OriginPolicy(o.allowedOrigins);
    this.#server = createServer(
      {
        requestTimeout: o.requestTimeoutMs,
        headersTimeout: o.requestTimeoutMs,
        // Node looks for requests past their time on this interval (30 s by default), so a
        // request could outlive its limit by as much: checked at a tenth of it, up to 1 s.
        connectionsCheckingInterval: Math.min(1_000, Math.max(50, Math.floor(o.requestTimeoutMs / 10))),
      },
      (req, res) => {
        o.unsent.track(res);
        endIfBodyUnread(req, res);
        this.#route(req, res).catch((err: unknown) => {
          const e = toRunstreamError(err);
          if (e.httpStatus >= 500) o.log.error({ err, url: req.url?.slice(0, 200) }, 'http handler failed');
          sendError(res, e);
        });
      },
    );
    // CONNECT asks for a tunnel: without a listener Node drops the connection unanswered.
    this.#server.on('connect', (_req, socket: Duplex) => {
      socket.on('error', () => socket.destroy());
      rejectUpgrade(socket, new RunstreamError(ErrorCode.MethodNotAllowed, 'CONNECT is not served here'));
    });
    this.#server.on('upgrade', (req, socket: Duplex, head: Buffer) => {
      // A peer that resets mid-upgrade must not crash the process; nor may anything below.
      const onSocketError = (): void => {
        socket.destroy();
      };
      socket.on('error', onSocketError);
      try {
        const url = requestUrl(req);
        const handler = this.#closed ? undefined : o.upgrades?.get(url.pathname);
        if (!handler) {
          throw new RunstreamError(ErrorCode.NotFound, `no WebSocket endpoint at ${url.pathname}`);
        }
        if (!this.#origins.allows(req.headers.origin))
          throw new OriginNotAllowedError(req.headers.origin ?? '');
        socket.off('error', onSocketError);
        handler(req, socket, head, url);
      } catch (err) {
        socket.off('error', onSocketError);
        const e = toRunstreamError(err);
        if (e.httpStatus >= 500) o.log.error({ err }, 'websocket upgrade failed');
        rejectUpgrade(socket, e);
      }
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
  }

  get port(): number {
    return (this.#server.address() as AddressInfo).port;
  }

  async #route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = requestUrl(req);
    const probe = url.pathname === '/healthz' || url.pathname === '/readyz';
    if (
      (probe || (url.pathname === '/metrics' && this.#o.metrics)) &&
      req.method !== 'GET' &&
      req.method !== 'HEAD'
    ) {
      return sendMethodNotAllowed(res, req.method, PROBE_METHODS);
    }
    if (url.pathname === '/healthz') return sendJson(res, 200, { status: 'ok' });
    if (url.pathname === '/readyz') {
      const ready = !this.#closed && (await this.#o.ready().catch(() => false));
      return sendJson(res, ready ? 200 : 503, { status: ready ? 'ready' : 'not ready' });
    }
    if (url.pathname === '/metrics' && this.#o.metrics) {
      const { contentType, body } = await this.#o.metrics.scrape();
      res.writeHead(200, { 'content-type': contentType }).end(req.method === 'HEAD' ? undefined : body);
      return;
    }
    // Browsers only: refuse other origins, and let allowed ones read the answers (CORS).
    if (!this.#origins.allows(req.headers.origin)) {
      return sendError(res, new OriginNotAllowedError(req.headers.origin ?? ''));
    }
    if (this.#origins.applyCors(req, res)) return;
    // After CORS, so that a browser on another origin reads the 429 rather than a network error.
    if (this.#o.unsent.full) {
      throw new RunstreamError(
        ErrorCode.ResourceExhausted,
        `answers not yet read by their clients hold ${this.#o.unsent.bytes} bytes on this node; retry later`,
      );
    }
    const m = this.#o.router.match(req.method ?? 'GET', url.pathname);
    if (m.kind === 'route') return m.route.handle(req, res, m.params, url);
    if (m.kind === 'method') return sendMethodNotAllowed(res, req.method, m.allowed);
    sendError(res, new RunstreamError(ErrorCode.NotFound, `no route for ${url.pathname}`));
  }

  /** Stops accepting, and closes every connection. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** The probes and /metrics: read-only, outside the router (no auth, no CORS, no unsent bound). */
const PROBE_METHODS: readonly string[] = ['GET', 'HEAD'];

/** 405 with `Allow`, naming the method refused and the ones the path takes. */
function sendMethodNotAllowed(
  res: ServerResponse,
  method: string | undefined,
  allowed: readonly string[],
): void {
  res.setHeader('allow', allowed.join(', '));
  sendError(
    res,
    new RunstreamError(ErrorCode.MethodNotAllowed, `${method} not allowed; use ${allowed.join(' or ')}`),
  );
}
