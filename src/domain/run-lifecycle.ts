/**
 * A run's lifecycle: the one rule that turns a run's lifecycle events into its status.
 * The persister applies it in the seq transaction (persist/runs.ts `runDeltas`) and keeps
 * the answer in the `runs` table; every reader (History GetRun / ListRuns, the LangGraph
 * run routes and join, cancel, a run subscription's `end`) reads that one answer.
 *
 * Only `lifecycle` events count:
 *
 * | event_type                                              | says                                     |
 * |---------------------------------------------------------|------------------------------------------|
 * | `run_pending`, `run_created`, `pending`                 | `pending` (only for a run not yet seen)  |
 * | `metadata`, `run_start`, `run_started`, `start`         | `running`: also **re-opens** an ended run |
 * | `end`, `run_end`                                        | `content.status` ({@link statusWord}), default `success` |
 * | `error`, `run_error`                                    | `error`                                  |
 * | `cancelled`, `run_cancelled`                            | `cancelled`                              |
 * | `interrupted`, `run_interrupted`                        | `interrupted`                            |
 *
 * `cancel_requested` (what the broker stores when someone asks to cancel) says nothing: a
 * request is not an outcome. Any other event of a run makes a `pending` run `running` (a
 * new run starts `running`).
 * **The latest start or terminal event wins**: `run_start, chunk, interrupted, run_start,
 * chunk` is `running`; its `end_seq` is the seq of the terminal event that set a terminal
 * status, and goes back to none when a start re-opens the run. A run has ended when its
 * status is terminal, at its `end_seq`.
 */

export const RUN_STATUSES = ['pending', 'running', 'success', 'error', 'interrupted', 'cancelled'] as const;
export type RunStatusName = (typeof RUN_STATUSES)[number];

/** Statuses of a run that has ended (until a start re-opens it). */
export const ENDED_STATUSES: ReadonlySet<RunStatusName> = new Set([
  'success',
  'error',
  'interrupted',
  'cancelled',
]);

export function hasEnded(status: RunStatusName): boolean {
  return ENDED_STATUSES.has(status);
}

/** The lifecycle event types that can end a run (whether they do depends on what follows). */
export const TERMINAL_EVENT_TYPES: ReadonlySet<string> = new Set([
  'end',
  'error',
  'cancelled',
  'interrupted',
  'run_end',
  'run_error',
  'run_cancelled',
  'run_interrupted',
]);
export const PENDING_EVENT_TYPES: ReadonlySet<string> = new Set(['run_pending', 'run_created', 'pending']);
export const START_EVENT_TYPES: ReadonlySet<string> = new Set([
  'metadata',
  'run_start',
  'run_started',
  'start',
]);

/** An event that can end its run: a lifecycle event of a terminal type. */
export function isTerminal(category: string, eventType: string): boolean {
  return category === 'lifecycle' && TERMINAL_EVENT_TYPES.has(eventType);
}

/** The event the broker stores when a cancel is requested (ingest/control.ts). */
export const CANCEL_REQUESTED_EVENT_TYPE = 'cancel_requested';

/** What a lifecycle event says about its run's status. */
export type LifecycleSignal =
  | { readonly kind: 'neutral' }
  | { readonly kind: 'pending' }
  | { readonly kind: 'start' }
  | { readonly kind: 'terminal'; readonly status: RunStatusName }
  | { readonly kind: 'other' };

/** The status an `end` event's `content.status` names; anything unknown counts as `success`. */
export function statusWord(word: unknown): RunStatusName {
  switch (typeof word === 'string' ? word.toLowerCase() : '') {
    case 'error':
    case 'failed':
    case 'failure':
    case 'timeout':
      return 'error';
    case 'cancelled':
    case 'canceled':
    case 'aborted':
      return 'cancelled';
    case 'interrupted':
    case 'interrupt':
      return 'interrupted';
    default:
      return 'success';
  }
}

export function classify(category: string, eventType: string, contentJson: string): LifecycleSignal {
  if (category !== 'lifecycle') return { kind: 'other' };
  if (eventType === CANCEL_REQUESTED_EVENT_TYPE) return { kind: 'neutral' };
  if (START_EVENT_TYPES.has(eventType)) return { kind: 'start' };
  if (PENDING_EVENT_TYPES.has(eventType)) return { kind: 'pending' };
  if (!TERMINAL_EVENT_TYPES.has(eventType)) return { kind: 'other' };
  switch (eventType) {
    case 'error':
    case 'run_error':
      return { kind: 'terminal', status: 'error' };
    case 'cancelled':
    case 'run_cancelled':
      return { kind: 'terminal', status: 'cancelled' };
    case 'interrupted':
    case 'run_interrupted':
      return { kind: 'terminal', status: 'interrupted' };
    default:
      return { kind: 'terminal', status: statusWord(jsonObject(contentJson)?.status) };
  }
}

/** A run status in the LangGraph Platform's words (`GET /threads/{t}/runs/{r}`, the join's `end`). */
export type LangGraphRunStatus = 'pending' | 'running' | 'success' | 'error' | 'interrupted';

/** LangGraph has no `cancelled`: a cancelled run is `interrupted` there, as on its own platform. */
export function langGraphStatus(status: RunStatusName): LangGraphRunStatus {
  return status === 'cancelled' ? 'interrupted' : status;
}

/** The object a JSON text holds, or undefined (not an object, or not JSON). */
export function jsonObject(json: string): Record<string, unknown> | undefined {
  if (!json.startsWith('{')) return undefined;
  try {
    const v = JSON.parse(json) as unknown;
    return v !== null && typeof v === 'object' && !Array.isArray(v)
      ? (v as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}
