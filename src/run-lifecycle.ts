/**
 * Which lifecycle events end a run. A subscription scoped to a run ends after the run's
 * terminal event (which is an ordinary stored event, so a late joiner gets it too).
 * Both the LangGraph/DeerFlow names (`end`, `error`) and `run_*` names are recognised.
 */
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

export function isTerminal(category: string, eventType: string): boolean {
  return category === 'lifecycle' && TERMINAL_EVENT_TYPES.has(eventType);
}
