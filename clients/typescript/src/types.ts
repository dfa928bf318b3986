/**
 * The wire vocabulary shared by the subscriber, the History client and the views: the event
 * as every reader gets it (docs/protocol.md §6) and the chat view's frames (§8).
 */

export type Category = 'message' | 'trace' | 'lifecycle';

export const CATEGORIES: readonly Category[] = ['message', 'trace', 'lifecycle'];

/** A stored event, exactly as WebSocket, SSE and History deliver it. */
export interface WireEvent {
  /** 1, 2, 3, … per thread, across runs. The cursor to resume after. */
  seq: number;
  /** The JetStream stream sequence of the log message it came from. */
  offset: number;
  thread_id: string;
  run_id: string;
  event_id: string;
  event_type: string;
  category: Category;
  /** `""` when the producer set none. */
  user_id: string;
  /** RFC 3339, UTC, with milliseconds. */
  created_at: string;
  content: unknown;
  metadata: Record<string, unknown>;
}

/** A run's status, decided by the broker's one lifecycle rule (docs/protocol.md §8). */
export type RunStatus = 'pending' | 'running' | 'success' | 'error' | 'interrupted' | 'cancelled';

/** A tool call of an assistant message in the chat view. */
export interface ChatToolCall {
  id: string;
  name: string;
  arguments: string;
  seq: number;
}

/** A chat message as History's `?view=chat` returns it. */
export interface ChatMessage {
  role: 'human' | 'assistant' | 'tool' | 'system';
  id: string;
  run_id: string;
  user_id: string;
  content: string;
  /** Assistant messages only. */
  tool_calls?: ChatToolCall[];
  /** Tool messages only. */
  tool_call_id?: string;
  name?: string;
  is_error?: boolean;
  first_seq: number;
  last_seq: number;
  event_count: number;
  created_at: string;
  /** The first event's metadata. Always in History's view; a live view has it from the message's first frame. */
  metadata?: unknown;
}

/** One `chat` frame of a `view: "chat"` subscription: the seq it reflects, its message, the change. */
export interface ChatFrame {
  seq: number;
  /**
   * The message's fields as of its first event; `first_seq` identifies it. `metadata` comes on
   * the message's first frame only: keep it from there.
   */
  message: Omit<ChatMessage, 'content' | 'tool_calls' | 'last_seq' | 'event_count'>;
  /** Text added to the message. */
  append?: string;
  /** The message's whole text, replacing what it had. */
  content?: string;
  /** Calls added to the message. */
  tool_calls?: ChatToolCall[];
}

/** A run record (History `GetRun` / `ListRuns`). */
export interface RunRecord {
  thread_id: string;
  run_id: string;
  user_id: string;
  status: RunStatus;
  first_seq: number;
  last_seq: number;
  end_seq: number | null;
  event_count: number;
  message_count: number;
  trace_count: number;
  lifecycle_count: number;
  started_at: string;
  updated_at: string;
  ended_at: string | null;
  metadata: Record<string, unknown>;
  outcome: unknown;
}
