/**
 * A client's copy of a thread's chat view, kept up by the live chat frames of a
 * `"view": "chat"` subscription (WebSocket `chat` frames, SSE `event: chat`). Start it
 * from History's chat messages at seq N (or empty at 0), subscribe after N, and apply
 * every frame: it then holds exactly History's chat view at {@link ChatView.cursor}.
 * docs/protocol.md (the live chat view) describes the frames.
 */

/** A tool call of an assistant message. */
export interface ChatToolCall {
  id: string;
  name: string;
  arguments: string;
  seq: number;
}

/** A chat message as History's `?view=chat` returns it. */
export interface ChatViewMessage {
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
  metadata: unknown;
}

/** A chat frame's data: the seq it reflects, its message (from its first event), the change. */
export interface ChatFrameData {
  seq: number;
  message: Omit<ChatViewMessage, 'content' | 'tool_calls' | 'last_seq' | 'event_count'>;
  /** Text added to the message. */
  append?: string;
  /** The message's whole text, replacing what it had. */
  content?: string;
  /** Calls added to the message. */
  tool_calls?: ChatToolCall[];
}

export class ChatView {
  readonly messages: ChatViewMessage[];
  /** The seq the view reflects: resume after it. */
  cursor: number;
  /** Messages by first_seq, which identifies a message. */
  readonly #byFirstSeq = new Map<number, ChatViewMessage>();

  /** `messages`: History's chat view at `cursor`, ascending (merge parts that share an id first). */
  constructor(messages: readonly ChatViewMessage[] = [], cursor = 0) {
    this.messages = messages.map((m) => structuredClone(m));
    for (const m of this.messages) this.#byFirstSeq.set(m.first_seq, m);
    this.cursor = cursor;
  }

  /** Applies one chat frame; returns the message it changed. */
  apply(frame: ChatFrameData): ChatViewMessage {
    let m = this.#byFirstSeq.get(frame.message.first_seq);
    if (m === undefined) {
      m = {
        ...structuredClone(frame.message),
        content: '',
        ...(frame.message.role === 'assistant' ? { tool_calls: [] } : {}),
        last_seq: frame.seq,
        event_count: 0,
      };
      this.#byFirstSeq.set(m.first_seq, m);
      this.messages.push(m);
    }
    m.last_seq = frame.seq;
    m.event_count++;
    if (frame.append !== undefined) m.content += frame.append;
    if (frame.content !== undefined) m.content = frame.content;
    if (frame.tool_calls !== undefined) m.tool_calls = [...(m.tool_calls ?? []), ...frame.tool_calls];
    this.cursor = Math.max(this.cursor, frame.seq);
    return m;
  }

  /** A `live` frame: nothing the view shows lies between its cursor and `seq`. */
  advance(seq: number): void {
    this.cursor = Math.max(this.cursor, seq);
  }
}
