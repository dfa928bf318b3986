/**
 * Building and judging raw HTTP requests for the fuzz tests: a request is a request line,
 * header lines and a body, assembled with correct framing (so the broker never waits for
 * bytes that will not come), then judged by the rules every HTTP answer of the broker must
 * follow (docs/protocol.md §14, docs/api.md "Errors").
 */
import { type RawOutcome, type RawRequestOptions, type RawResponse, rawRequest } from './raw-http.js';

export interface HttpCase {
  readonly method: string;
  readonly target: string;
  /** [name, value] pairs, in order; raw (may be invalid on purpose). */
  readonly headers: readonly (readonly [string, string])[];
  readonly body?: string | Buffer | undefined;
  /** Send the body chunked instead of with Content-Length. */
  readonly chunked?: boolean | undefined;
  readonly version?: string | undefined;
  /** Extra raw header lines, e.g. an obs-fold continuation or a line without a colon. */
  readonly rawLines?: readonly string[] | undefined;
}

/** The bytes of a request; Content-Length (or chunking) always matches the body. */
export function requestBytes(c: HttpCase): Buffer {
  const body = c.body === undefined ? undefined : Buffer.from(c.body);
  const lines = [`${c.method} ${c.target} ${c.version ?? 'HTTP/1.1'}`];
  for (const [n, v] of c.headers) lines.push(`${n}: ${v}`);
  for (const l of c.rawLines ?? []) lines.push(l);
  if (body !== undefined) {
    lines.push(c.chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${body.length}`);
  }
  const head = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
  if (body === undefined) return head;
  if (!c.chunked) return Buffer.concat([head, body]);
  const parts: Buffer[] = [head];
  for (let at = 0; at < body.length; at += 4096) {
    const chunk = body.subarray(at, at + 4096);
    parts.push(Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n'));
  }
  parts.push(Buffer.from('0\r\n\r\n'));
  return Buffer.concat(parts);
}

/** What a request is expected to get, beyond the rules every answer follows. */
export interface Expectation {
  /** Allowed statuses. */
  readonly status?: readonly number[];
  /** For a 400: the message must start with one of these fields (`<field>: …`). */
  readonly fields?: readonly string[];
  /** A short reason for the expectation, shown on failure. */
  readonly why: string;
  /** False when Node's own parser may refuse the request (default true: it must reach the broker). */
  readonly wellFormed?: boolean;
}

/** Node's own HTTP parser refusing the request (400/413/414/431/505, no body, connection closed). */
export function isParserRefusal(res: RawResponse): boolean {
  return (
    [400, 413, 414, 431, 505].includes(res.status) &&
    res.body.length === 0 &&
    res.headers['content-type'] === undefined &&
    res.headers.connection === 'close'
  );
}

/** A field-naming message: `<field>: <problem>`. */
const FIELD_MESSAGE = /^([A-Za-z_][A-Za-z0-9_.[\]-]*): \S/;

export interface Verdict {
  /** Problems found; empty when the answer is right. */
  readonly problems: string[];
  /** Set when the answer came from Node's HTTP parser, not the broker. */
  readonly parser: boolean;
}

/**
 * Judges an answer by the rules every request follows: there is an answer; it is not a
 * 5xx; a broker error has the body `{"error":{"code","message"}}`, and a 400 says
 * `invalid_argument` with a message naming the field; JSON answers parse.
 */
export function judge(
  c: HttpCase,
  o: RawOutcome,
  opts: { upgrade: boolean; expect?: Expectation | undefined },
): Verdict {
  const problems: string[] = [];
  if (o.kind !== 'response') {
    problems.push(
      o.kind === 'dropped'
        ? `the connection was closed without a response${o.error ? ` (${o.error})` : ''}`
        : o.kind === 'timeout'
          ? 'no response'
          : `the answer is not HTTP: ${o.why}`,
    );
    return { problems, parser: false };
  }
  const res = o.res;
  const parser = isParserRefusal(res);
  const ctype = res.headers['content-type'] ?? '';
  const text = res.body.toString('utf8');
  if (res.status >= 500) problems.push(`a ${res.status} answer (a server error) to client input`);
  if (!parser && c.method !== 'HEAD') {
    if (ctype.startsWith('application/json')) {
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        problems.push('the body is labelled JSON but does not parse');
      }
      if (body !== undefined && res.status >= 400) {
        const err = (body as { error?: { code?: unknown; message?: unknown } }).error;
        if (typeof err?.code !== 'string' || typeof err.message !== 'string') {
          problems.push('an error body without {"error":{"code","message"}}');
        } else if (res.status === 400) {
          if (err.code !== 'invalid_argument') problems.push(`a 400 with code ${err.code}`);
          if (!FIELD_MESSAGE.test(err.message)) problems.push('a 400 whose message names no field');
        }
      }
    } else if (res.status >= 400) {
      // Bodiless refusals the protocol documents: an upgrade to another path (404), and
      // the ws library's handshake refusals on /v1/ws (400 / 405 / 426, plain text).
      const documented = opts.upgrade && [400, 404, 405, 426].includes(res.status);
      if (!documented) problems.push(`a ${res.status} without a JSON error body (${JSON.stringify(ctype)})`);
    }
  }
  const e = opts.expect;
  if (e) {
    if (parser) {
      if (e.wellFormed !== false)
        problems.push(`Node's HTTP parser refused a well-formed request (${e.why})`);
    } else {
      if (e.status && !e.status.includes(res.status)) {
        problems.push(`status ${res.status}, expected ${e.status.join(' or ')} (${e.why})`);
      }
      if (e.fields && res.status === 400 && ctype.startsWith('application/json') && c.method !== 'HEAD') {
        const msg = (JSON.parse(text) as { error?: { message?: string } }).error?.message ?? '';
        const field = FIELD_MESSAGE.exec(msg)?.[1];
        if (field === undefined || !e.fields.includes(field)) {
          problems.push(
            `the 400 names ${JSON.stringify(field)}, expected one of ${e.fields.join(', ')} (${e.why})`,
          );
        }
      }
    }
  }
  return { problems, parser };
}

/** Sends a request on a fresh connection and reads the first final answer. */
export function send(port: number, c: HttpCase, opts: RawRequestOptions = {}): Promise<RawOutcome> {
  return rawRequest(port, requestBytes(c), { head: c.method === 'HEAD', ...opts });
}
