/**
 * How many subscriber connections of each kind a node holds, and their caps: past a cap a
 * new one is refused (RESOURCE_EXHAUSTED / 429 / WebSocket close 1013) naming the setting,
 * before any work is done for it.
 */
import { ErrorCode, RunstreamError } from '../../errors.js';

export type AdmissionKind = 'websocket' | 'sse' | 'grpc' | 'long-poll';

export type AdmissionLimits = Readonly<Record<AdmissionKind, number>>;

const SETTING: Readonly<Record<AdmissionKind, string>> = {
  websocket: 'RS_WS_MAX_CONNECTIONS',
  sse: 'RS_SSE_MAX_STREAMS',
  grpc: 'RS_GRPC_SUBSCRIBE_MAX_CALLS',
  'long-poll': 'RS_LONG_POLL_MAX_WAITS',
};

const WHAT: Readonly<Record<AdmissionKind, string>> = {
  websocket: 'WebSocket connections',
  sse: 'SSE streams',
  grpc: 'Subscribe calls',
  'long-poll': 'long-poll waits',
};

export class Admission {
  readonly #held: Record<AdmissionKind, number> = { websocket: 0, sse: 0, grpc: 0, 'long-poll': 0 };

  constructor(readonly limits: AdmissionLimits) {}

  /** Takes a place of `kind`; returns the function that frees it (idempotent). */
  admit(kind: AdmissionKind): () => void {
    const max = this.limits[kind];
    if (this.#held[kind] >= max) {
      throw new RunstreamError(
        ErrorCode.ResourceExhausted,
        `this node holds its maximum of ${max} ${WHAT[kind]} (${SETTING[kind]}); retry later or on another node`,
      );
    }
    this.#held[kind]++;
    let freed = false;
    return () => {
      if (freed) return;
      freed = true;
      this.#held[kind]--;
    };
  }

  held(kind: AdmissionKind): number {
    return this.#held[kind];
  }
}
