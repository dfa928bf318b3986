/**
 * HTTP answers written and not yet taken by their clients: a bound on what clients that
 * do not read (or read slowly) can make the node hold.
 *
 * A whole answer (History pages, long-poll answers, errors) counts from the moment it is
 * written until the socket has handed its last byte to the kernel (or is gone). While the
 * node holds {@link UnsentResponses.maxBytes} or more, new requests are refused with 429
 * (the probes still answer). An answer still not taken after the write timeout has its
 * socket destroyed. SSE streams are counted by their send queues (fanout/core/send-queue.ts).
 */
import type { ServerResponse } from 'node:http';

export class UnsentResponses {
  #bytes = 0;

  constructor(
    readonly maxBytes: number,
    readonly writeTimeoutMs: number,
  ) {}

  /** Bytes written and not yet taken. */
  get bytes(): number {
    return this.#bytes;
  }

  get full(): boolean {
    return this.#bytes >= this.maxBytes;
  }

  /** Answers written on `res` are counted here. */
  track(res: ServerResponse): void {
    tracked.set(res, this);
  }

  hold(res: ServerResponse, bytes: number): void {
    if (res.writableFinished || res.destroyed) return;
    this.#bytes += bytes;
    const timer = setTimeout(() => res.destroy(), this.writeTimeoutMs);
    timer.unref();
    let held = true;
    const release = (): void => {
      if (!held) return;
      held = false;
      clearTimeout(timer);
      this.#bytes -= bytes;
    };
    res.once('finish', release);
    res.once('close', release);
  }
}

const tracked = new WeakMap<ServerResponse, UnsentResponses>();

/** Writes a whole JSON answer, counted against its server's {@link UnsentResponses}. */
export function endJson(res: ServerResponse, status: number, json: string): void {
  const body = Buffer.from(json);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' }).end(body);
  tracked.get(res)?.hold(res, body.length);
}
