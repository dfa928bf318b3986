/** What became of a published event once the persister reached it: the answer to PERSISTED. */

/** Why Postgres refused an event (the poison-event policy, persist/poison.ts). */
export interface Rejection {
  readonly reason: string;
  readonly sqlstate: string;
}

/** What became of one pending event. */
export interface Receipt {
  readonly event_id: string;
  /** 0 when rejected, or dropped because its thread (run) was deleted. */
  readonly seq: number;
  /** Offset of the stored row: differs from the message's own when it was a duplicate. */
  readonly offset: number;
  /** Why the store refused the event; absent when it was stored (or was a duplicate). */
  readonly rejected?: string;
}
