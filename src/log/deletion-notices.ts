/**
 * Deletion notices, on core NATS (`<prefix>.del.<thread>`): published after a thread or
 * a run has been deleted from Postgres, so that every fan-out node ends the
 * subscriptions it holds on it (a `deleted` frame). A notice can be lost like any core
 * NATS message; a subscription that misses it still never sees a deleted event again,
 * because it reads Postgres, where the rows are gone.
 */
import type { Msg } from '@nats-io/transport-node';

export interface DeletionNotice {
  readonly thread_id: string;
  /** The deleted run; absent when the whole thread was deleted. */
  readonly run_id?: string;
  /** Rows removed. */
  readonly deleted_events: number;
  /** The thread's head seq, which later events continue above. */
  readonly head_seq: number;
}

export function encodeDeletion(n: DeletionNotice): string {
  return JSON.stringify(n);
}

export function decodeDeletion(msg: Msg): DeletionNotice {
  const n = JSON.parse(msg.string()) as DeletionNotice;
  if (typeof n?.thread_id !== 'string') throw new Error('deletion notice without thread_id');
  return n;
}
