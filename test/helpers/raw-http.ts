/**
 * A raw HTTP/1.1 client for fuzz tests: writes arbitrary bytes on a fresh TCP connection and
 * reads back the first response exactly as it came (status, headers, de-chunked body), or
 * reports that the connection was dropped without one. `fetch` and `http.request` refuse to
 * send most of what a fuzzer wants to send, and hide what came back.
 */
import net from 'node:net';

export interface RawResponse {
  readonly status: number;
  readonly reason: string;
  /** Header names lower-cased; repeated headers joined with ", ". */
  readonly headers: Readonly<Record<string, string>>;
  /** The body, de-chunked. For a stream still open (`streaming`), what had arrived. */
  readonly body: Buffer;
  /** Interim 1xx statuses seen before this one (e.g. 100 Continue). */
  readonly interim: readonly number[];
  /** The response had not ended when `enough` said so (an SSE stream). */
  readonly streaming: boolean;
}

export type RawOutcome =
  | { readonly kind: 'response'; readonly res: RawResponse }
  /** The peer closed (or reset) before a whole response head arrived. */
  | { readonly kind: 'dropped'; readonly received: Buffer; readonly error?: string }
  /** Nothing conclusive within the deadline (a safety net, never asserted as a duration). */
  | { readonly kind: 'timeout'; readonly received: Buffer }
  /** Bytes that are not an HTTP response. */
  | { readonly kind: 'garbage'; readonly received: Buffer; readonly why: string };

export interface RawRequestOptions {
  /** The request was HEAD: a response body is never sent. */
  readonly head?: boolean;
  /**
   * For a response whose body does not end (SSE): return once this says the body so far is
   * enough. Without it such a response is read until the deadline.
   */
  readonly enough?: (res: Omit<RawResponse, 'streaming'>) => boolean;
  /** Give up after this long (default 20 000 ms). */
  readonly deadlineMs?: number;
  readonly host?: string;
}

const HEAD_END = Buffer.from('\r\n\r\n');

/** Sends `data` on a new connection to `port` and reads the first (final) response. */
export function rawRequest(
  port: number,
  data: string | Buffer,
  opts: RawRequestOptions = {},
): Promise<RawOutcome> {
  return new Promise((resolve) => {
    const sock = net.connect({ port, host: opts.host ?? '127.0.0.1' });
    let buf = Buffer.alloc(0);
    let settled = false;
    const finish = (o: RawOutcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(o);
    };
    const timer = setTimeout(() => finish({ kind: 'timeout', received: buf }), opts.deadlineMs ?? 20_000);
    const tryParse = (ended: boolean): void => {
      const r = parseResponse(buf, opts, ended);
      if (r === undefined) {
        if (ended) finish({ kind: 'dropped', received: buf });
        return;
      }
      if ('why' in r) finish({ kind: 'garbage', received: buf, why: r.why });
      else finish({ kind: 'response', res: r });
    };
    sock.on('connect', () => {
      // A server that refuses mid-write resets the connection: still read what it answered.
      sock.write(data, () => undefined);
    });
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      tryParse(false);
    });
    sock.on('end', () => tryParse(true));
    sock.on('close', () => tryParse(true));
    sock.on('error', (err) => {
      // ECONNRESET after a complete response is still that response.
      const r = parseResponse(buf, opts, true);
      if (r !== undefined && !('why' in r)) finish({ kind: 'response', res: r });
      else finish({ kind: 'dropped', received: buf, error: err.message });
    });
  });
}

/**
 * The first final response in `buf`; undefined while incomplete; `{why}` when the bytes are
 * not HTTP. `ended`: no more bytes will come (a body without length ends here).
 */
function parseResponse(
  buf: Buffer,
  opts: RawRequestOptions,
  ended: boolean,
): RawResponse | { why: string } | undefined {
  const interim: number[] = [];
  let at = 0;
  for (;;) {
    const end = buf.indexOf(HEAD_END, at);
    if (end < 0) {
      if (buf.length - at >= 5 && !buf.subarray(at, at + 5).equals(Buffer.from('HTTP/'))) {
        return { why: `does not start with HTTP/: ${JSON.stringify(buf.subarray(at, at + 80).toString())}` };
      }
      return undefined;
    }
    const lines = buf.subarray(at, end).toString('latin1').split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3})(?: (.*))?$/.exec(lines[0] ?? '');
    if (!m) return { why: `bad status line ${JSON.stringify(lines[0])}` };
    const status = Number(m[1]);
    const headers: Record<string, string> = {};
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(':');
      if (colon <= 0) return { why: `bad header line ${JSON.stringify(line)}` };
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
    }
    at = end + 4;
    if (status >= 100 && status < 200 && status !== 101) {
      interim.push(status);
      continue;
    }
    const base = { status, reason: m[2] ?? '', headers, interim };
    const rest = buf.subarray(at);
    if (status === 101 || opts.head || status === 204 || status === 304) {
      return { ...base, body: Buffer.alloc(0), streaming: false };
    }
    if (/\bchunked\b/i.test(headers['transfer-encoding'] ?? '')) {
      const c = dechunk(rest);
      if ('why' in c) return c;
      if (c.done) return { ...base, body: c.body, streaming: false };
      if (ended) return undefined;
      if (opts.enough?.({ ...base, body: c.body })) return { ...base, body: c.body, streaming: true };
      return undefined;
    }
    const cl = headers['content-length'];
    if (cl !== undefined) {
      if (!/^\d+$/.test(cl)) return { why: `bad content-length ${JSON.stringify(cl)}` };
      const n = Number(cl);
      if (rest.length >= n) return { ...base, body: rest.subarray(0, n), streaming: false };
      if (ended) return undefined;
      return undefined;
    }
    // No length: the body runs until the connection closes.
    if (ended) return { ...base, body: rest, streaming: false };
    if (opts.enough?.({ ...base, body: rest })) return { ...base, body: rest, streaming: true };
    return undefined;
  }
}

function dechunk(b: Buffer): { body: Buffer; done: boolean } | { why: string } {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = b.indexOf('\r\n', at);
    if (eol < 0) return { body: Buffer.concat(parts), done: false };
    const sizeText = b.subarray(at, eol).toString('latin1').split(';')[0]?.trim() ?? '';
    if (!/^[0-9a-fA-F]+$/.test(sizeText)) return { why: `bad chunk size ${JSON.stringify(sizeText)}` };
    const size = Number.parseInt(sizeText, 16);
    if (size === 0) return { body: Buffer.concat(parts), done: true };
    if (b.length < eol + 2 + size + 2) {
      parts.push(b.subarray(eol + 2, Math.min(b.length, eol + 2 + size)));
      return { body: Buffer.concat(parts), done: false };
    }
    parts.push(b.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
}

/** One line describing an outcome, for assertion messages. */
export function describeOutcome(o: RawOutcome, maxBody = 300): string {
  switch (o.kind) {
    case 'response': {
      const body = o.res.body.toString('utf8');
      return `${o.res.status} ${o.res.reason} ${JSON.stringify(o.res.headers)} body=${JSON.stringify(
        body.length > maxBody ? `${body.slice(0, maxBody)}…` : body,
      )}`;
    }
    case 'dropped':
      return `connection dropped without a response (${o.received.length} bytes received${o.error ? `, ${o.error}` : ''})`;
    case 'timeout':
      return `no complete response before the deadline (${o.received.length} bytes received: ${JSON.stringify(
        o.received.subarray(0, 200).toString('latin1'),
      )})`;
    case 'garbage':
      return `not an HTTP response: ${o.why}`;
  }
}

/** A raw connection kept open: what it received, and whether the peer has ended it. */
export interface RawConn {
  readonly sock: net.Socket;
  received(): string;
  readonly closed: Promise<void>;
  isClosed(): boolean;
}

/** Opens a TCP connection to `port` on loopback and records what comes back (as latin1). */
export async function openRaw(port: number): Promise<RawConn> {
  const sock = net.connect(port, '127.0.0.1');
  let data = '';
  let closed = false;
  sock.on('data', (d: Buffer) => {
    data += d.toString('latin1');
  });
  sock.on('error', () => undefined);
  const done = new Promise<void>((r) =>
    sock.once('close', () => {
      closed = true;
      r();
    }),
  );
  await new Promise((r) => sock.once('connect', r));
  return { sock, received: () => data, closed: done, isClosed: () => closed };
}
