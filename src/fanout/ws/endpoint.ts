/**
 * `/v1/ws`: authenticates an upgrade (401/403 before the handshake), admits the connection
 * (past RS_WS_MAX_CONNECTIONS: accepted, told why, closed with 1013, which a browser can
 * see), and holds the connections and their heartbeat.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer } from 'ws';
import { authenticateHttp, rejectUpgrade } from '../../auth/http.js';
import type { Authenticator, Principal } from '../../auth/principal.js';
import { toRunstreamError } from '../../errors.js';
import type { RunControl } from '../../ingest/control.js';
import type { Logger } from '../../logger.js';
import type { SubscriptionService } from '../core/service.js';
import { CLOSE_TRY_AGAIN_LATER, Connection } from './connection.js';
import { errorFrame } from './frames.js';

export const WS_PATH = '/v1/ws';

export interface WsEndpointOptions {
  readonly service: SubscriptionService;
  readonly auth: Authenticator;
  readonly maxSubscriptions: number;
  readonly maxBufferedBytes: number;
  /** The largest frame a client may send (bigger: close 1009). */
  readonly maxPayloadBytes: number;
  readonly pingIntervalMs: number;
  readonly control?: RunControl | undefined;
  readonly log: Logger;
}

export class WsEndpoint implements AsyncDisposable {
  readonly #o: WsEndpointOptions;
  readonly #wss: WebSocketServer;
  readonly #connections = new Set<Connection>();
  readonly #pinger: NodeJS.Timeout;
  #closed = false;

  constructor(o: WsEndpointOptions) {
    this.#o = o;
    this.#wss = new WebSocketServer({
      noServer: true,
      perMessageDeflate: false,
      maxPayload: o.maxPayloadBytes,
    });
    this.#pinger = setInterval(() => {
      for (const c of this.#connections) c.ping();
    }, o.pingIntervalMs);
    this.#pinger.unref();
  }

  get connectionCount(): number {
    return this.#connections.size;
  }

  /** The HTTP server's upgrade handler for {@link WS_PATH}. */
  readonly upgrade = (req: IncomingMessage, socket: Duplex, head: Buffer, url: URL): void => {
    // A peer that resets while its token is being verified must not crash the process.
    const onSocketError = (): void => {
      socket.destroy();
    };
    socket.on('error', onSocketError);
    authenticateHttp(this.#o.auth, req, url).then(
      (principal) => {
        socket.off('error', onSocketError);
        if (this.#closed || socket.destroyed) {
          socket.destroy();
          return;
        }
        this.#accept(req, socket, head, principal);
      },
      (err: unknown) => {
        socket.off('error', onSocketError);
        this.#o.log.debug({ err }, 'websocket upgrade refused');
        rejectUpgrade(socket, err);
      },
    );
  };

  #accept(req: IncomingMessage, socket: Duplex, head: Buffer, principal: Principal): void {
    const o = this.#o;
    this.#wss.handleUpgrade(req, socket, head, (ws) => {
      let release: () => void;
      try {
        release = o.service.admit('websocket');
      } catch (err) {
        const e = toRunstreamError(err);
        ws.send(errorFrame(null, e.wsCode, e.message));
        ws.close(CLOSE_TRY_AGAIN_LATER, 'too many connections');
        return;
      }
      const conn = new Connection(ws, {
        service: o.service,
        maxSubscriptions: o.maxSubscriptions,
        maxBufferedBytes: o.maxBufferedBytes,
        principal,
        control: o.control,
        log: o.log,
        onClose: () => {
          release();
          this.#connections.delete(conn);
        },
      });
      this.#connections.add(conn);
    });
  }

  /** Tells every WebSocket client (1001) and closes. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#pinger);
    for (const c of [...this.#connections]) c.close();
    this.#connections.clear();
    await new Promise<void>((resolve) => this.#wss.close(() => resolve()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
