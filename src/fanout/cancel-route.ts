/**
 * `POST /v1/threads/{thread_id}/runs/{run_id}/cancel`: a subscriber asks the run's
 * producer to stop. Body (optional): `{"reason": "..."}`. Answers 202 with the stored
 * `cancel_requested` event's id and offset; the producer learns of it on its
 * PublishStream (see {@link RunControl}).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type Authenticator, bearerFromHttp } from '../auth/principal.js';
import { pathId } from '../domain/ids.js';
import { InvalidArgumentError } from '../errors.js';
import type { Route } from '../http/router.js';
import { sendError, sendJson, strictQuery } from '../http/util.js';
import type { RunControl } from '../ingest/control.js';

const CANCEL_PARAMS: ReadonlySet<string> = new Set(['access_token']);

/** A cancel body holds a reason of at most 1024 characters; anything much bigger is not one. */
export const MAX_CANCEL_BODY_BYTES = 16 * 1024;

export interface CancelRouteOptions {
  readonly control: RunControl;
  readonly auth: Authenticator;
}

export function cancelRoute(o: CancelRouteOptions): Route {
  return {
    method: 'POST',
    path: '/v1/threads/{thread_id}/runs/{run_id}/cancel',
    owner: 'cancel',
    async handle(req, res, params, url) {
      try {
        const threadId = pathId(params.thread_id, 'thread_id');
        const runId = pathId(params.run_id, 'run_id');
        strictQuery(url, CANCEL_PARAMS, "the cancel route's query");
        const principal = await o.auth.authenticate(bearerFromHttp(req, url));
        const body = await readJsonBody(req);
        const receipt = await o.control.requestCancel({
          threadId,
          runId,
          reason: body.reason === undefined ? '' : (body.reason as string),
          source: 'http',
          principal,
        });
        sendJson(res, 202, receipt);
      } catch (err) {
        sendError(res as ServerResponse, err);
      }
    },
  };
}

const bodyTooLarge = (): InvalidArgumentError =>
  new InvalidArgumentError('body', `is larger than ${MAX_CANCEL_BODY_BYTES} bytes`);

/** The body as a JSON object; an empty body is `{}`. */
async function readJsonBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  // A declared length over the limit is refused before a byte of the body is read.
  if (Number(req.headers['content-length'] ?? 0) > MAX_CANCEL_BODY_BYTES) throw bodyTooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_CANCEL_BODY_BYTES) throw bodyTooLarge();
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8').trim();
  if (text === '') return {};
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new InvalidArgumentError('body', 'is not valid JSON');
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new InvalidArgumentError('body', 'must be a JSON object');
  }
  return body as Record<string, unknown>;
}
