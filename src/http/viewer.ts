/**
 * The viewer page (docs/operations.md, the viewer): `GET /` is viewer/index.html, `GET
 * /viewer/{file}` its module and stylesheet, `GET /viewer/client/{file}` the browser build of
 * @runstream/client (clients/typescript/dist: index.js and the modules it imports, nothing
 * Node-only). Every file is read once at start into memory, so a request can only name one of
 * a fixed set (no path ever reaches the file system: no traversal), with its content type, an
 * ETag (`no-cache`: the browser revalidates, and gets a 304 while nothing changed), and the
 * headers a page showing untrusted event text should have: a CSP that allows only this origin's
 * scripts, styles and connections, and no framing, sniffing or referrer.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { fileURLToPath } from 'node:url';
import { ErrorCode, RunstreamError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Route, RouteParams } from './router.js';

/** From dist/src/http/ (and src/http/ under a TS runner): the repository root, as in the image. */
const ROOT = new URL('../../../', import.meta.url);
const PAGE_DIR = new URL('viewer/', ROOT);
const CLIENT_DIR = new URL('clients/typescript/dist/', ROOT);
const PAGE_FILES = ['index.html', 'app.js', 'viewer.css'] as const;

const TYPES: Readonly<Record<string, string>> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};

/** 'self' covers ws:/wss: to this host and port in browsers that implement CSP 3. */
export const VIEWER_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': VIEWER_CSP,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'permissions-policy': 'camera=(), microphone=(), geolocation=()',
};

interface StaticFile {
  readonly body: Buffer;
  readonly type: string;
  readonly etag: string;
}

function load(url: URL): StaticFile {
  const body = readFileSync(url);
  const ext = url.pathname.slice(url.pathname.lastIndexOf('.'));
  const type = TYPES[ext];
  if (type === undefined) throw new Error(`viewer: no content type for ${url.pathname}`);
  const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`;
  return { body, type, etag };
}

/** index.js and every module it imports, transitively (relative `./x.js` specifiers only). */
function clientModules(): Map<string, StaticFile> {
  const out = new Map<string, StaticFile>();
  const pending = ['index.js'];
  while (pending.length > 0) {
    const name = pending.pop() as string;
    if (out.has(name)) continue;
    const file = load(new URL(name, CLIENT_DIR));
    out.set(name, file);
    for (const m of file.body.toString('utf8').matchAll(/\bfrom\s+'\.\/([a-z0-9-]+\.js)'/g)) {
      pending.push(m[1] as string);
    }
  }
  return out;
}

/** The files, or undefined (logged) when the page or the client build is not there. */
export function loadViewerFiles(log: Logger): Map<string, StaticFile> | undefined {
  if (!existsSync(new URL('index.html', PAGE_DIR)) || !existsSync(new URL('index.js', CLIENT_DIR))) {
    log.warn(
      { page: fileURLToPath(PAGE_DIR), client: fileURLToPath(CLIENT_DIR) },
      'viewer page not served: its files are missing (npm run build builds the client)',
    );
    return undefined;
  }
  const files = new Map<string, StaticFile>();
  for (const f of PAGE_FILES) files.set(`/viewer/${f}`, load(new URL(f, PAGE_DIR)));
  files.set('/', files.get('/viewer/index.html') as StaticFile);
  files.delete('/viewer/index.html');
  for (const [name, file] of clientModules()) files.set(`/viewer/client/${name}`, file);
  return files;
}

function send(req: IncomingMessage, res: ServerResponse, file: StaticFile | undefined, what: string): void {
  if (file === undefined) throw new RunstreamError(ErrorCode.NotFound, `no viewer file ${what}`);
  const headers: Record<string, string> = {
    ...SECURITY_HEADERS,
    'content-type': file.type,
    'cache-control': 'no-cache',
    etag: file.etag,
  };
  if (req.headers['if-none-match'] === file.etag) {
    res.writeHead(304, headers).end();
    return;
  }
  headers['content-length'] = String(file.body.length);
  res.writeHead(200, headers).end(req.method === 'HEAD' ? undefined : file.body);
}

/** GET and HEAD of `/`, `/viewer/{file}` and `/viewer/client/{file}`; none when the files are missing. */
export function viewerRoutes(log: Logger): Route[] {
  const files = loadViewerFiles(log);
  if (files === undefined) return [];
  const serve =
    (prefix: string) =>
    async (req: IncomingMessage, res: ServerResponse, params: RouteParams): Promise<void> => {
      const key = params.file === undefined ? prefix : `${prefix}${params.file}`;
      send(req, res, files.get(key), key.slice(0, 200));
    };
  const routes: Route[] = [];
  for (const method of ['GET', 'HEAD']) {
    routes.push(
      { method, path: '/', owner: 'viewer', handle: serve('/') },
      { method, path: '/viewer/{file}', owner: 'viewer', handle: serve('/viewer/') },
      { method, path: '/viewer/client/{file}', owner: 'viewer', handle: serve('/viewer/client/') },
    );
  }
  return routes;
}
