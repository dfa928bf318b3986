/**
 * How much publish work a node holds at once: the bytes of the requests it has received
 * and not yet answered, across every call. A unary request past the budget is refused
 * (RESOURCE_EXHAUSTED, retry later); a PublishStream past it stops being read until the
 * budget frees, which HTTP/2 flow control turns into backpressure on its producer.
 */
import type { PublishRequest__Output } from '../gen/runstream/v1/PublishRequest.js';

/** What an event costs beyond its content and metadata: ids, type, timestamps, decoding. */
const EVENT_OVERHEAD_BYTES = 512;

/** What a request holds in memory, roughly: its payloads' characters plus a fixed cost per event. */
export function requestBytes(req: PublishRequest__Output): number {
  let bytes = 0;
  for (const e of req.events) bytes += e.content_json.length + e.metadata_json.length + EVENT_OVERHEAD_BYTES;
  return bytes;
}

export class InflightBudget {
  #held = 0;
  readonly #waiters = new Set<() => void>();

  constructor(readonly maxBytes: number) {}

  /** Bytes held now. */
  get held(): number {
    return this.#held;
  }

  get full(): boolean {
    return this.#held >= this.maxBytes;
  }

  /** Takes `bytes` if they fit (a request always fits an empty budget); false if not. */
  tryTake(bytes: number): boolean {
    if (this.#held > 0 && this.#held + bytes > this.maxBytes) return false;
    this.#held += bytes;
    return true;
  }

  /** Takes `bytes` whether they fit or not (already received; the caller stops reading). */
  take(bytes: number): void {
    this.#held += bytes;
  }

  release(bytes: number): void {
    this.#held -= bytes;
    if (this.#held < this.maxBytes && this.#waiters.size > 0) {
      const waiters = [...this.#waiters];
      this.#waiters.clear();
      for (const w of waiters) w();
    }
  }

  /** Calls `wake` once, when the budget next has room. Returns the function that cancels it. */
  whenFree(wake: () => void): () => void {
    this.#waiters.add(wake);
    return () => this.#waiters.delete(wake);
  }
}
