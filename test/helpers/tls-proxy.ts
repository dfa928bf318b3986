/**
 * A TLS-terminating HTTP/2 proxy in front of the broker's gRPC port, as docs/protocol.md tells
 * operators to deploy one: TLS with a throwaway self-signed certificate for `localhost` (made by
 * openssl), every stream passed to the broker over plaintext HTTP/2 with its headers, data and
 * trailers. For testing the clients' TLS channels against the real broker.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TlsProxy extends AsyncDisposable {
  /** `localhost:<port>`: the name the certificate is for. */
  readonly target: string;
  /** The certificate (PEM), to trust as the root. */
  readonly cert: Buffer;
  /** Its file, for clients that read one. */
  readonly certPath: string;
}

export async function startTlsGrpcProxy(upstreamPort: number): Promise<TlsProxy> {
  const dir = mkdtempSync(join(tmpdir(), 'rs-tls-'));
  const certPath = join(dir, 'cert.pem');
  const keyPath = join(dir, 'key.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      keyPath,
      '-out',
      certPath,
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=DNS:localhost,IP:127.0.0.1',
    ],
    { stdio: 'ignore' },
  );
  const cert = readFileSync(certPath);
  // One session to the broker, opened again once it is gone (a test may restart the broker).
  let upstream: http2.ClientHttp2Session | undefined;
  const session = (): http2.ClientHttp2Session => {
    if (upstream === undefined || upstream.closed || upstream.destroyed) {
      upstream = http2.connect(`http://127.0.0.1:${upstreamPort}`);
      upstream.on('error', () => undefined);
    }
    return upstream;
  };
  const server = http2.createSecureServer({ cert, key: readFileSync(keyPath) });
  server.on('stream', (down, headers) => {
    const request: http2.OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(headers)) {
      if (name !== ':scheme' && name !== ':authority') request[name] = value;
    }
    const up = session().request(request);
    let trailers: http2.IncomingHttpHeaders = {};
    up.on('response', (h) => {
      const response: http2.OutgoingHttpHeaders = {};
      for (const [name, value] of Object.entries(h)) response[name] = value;
      down.respond(response, { waitForTrailers: true });
      up.pipe(down);
    });
    up.on('trailers', (t) => {
      trailers = t;
    });
    down.on('wantTrailers', () => {
      const out: http2.OutgoingHttpHeaders = {};
      for (const [name, value] of Object.entries(trailers)) if (!name.startsWith(':')) out[name] = value;
      down.sendTrailers(out);
    });
    down.pipe(up);
    up.on('error', () => down.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
    down.on('error', () => up.close(http2.constants.NGHTTP2_CANCEL));
    down.on('close', () => {
      if (!up.closed) up.close(http2.constants.NGHTTP2_CANCEL);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    target: `localhost:${(server.address() as AddressInfo).port}`,
    cert,
    certPath,
    async [Symbol.asyncDispose]() {
      upstream?.close();
      await new Promise((r) => server.close(r));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
