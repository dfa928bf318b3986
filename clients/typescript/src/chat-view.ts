/**
 * A client's copy of a thread's chat view, kept up by the chat items of a `view: "chat"`
 * subscription. Start it from History's chat messages at seq N (or empty at 0), subscribe after
 * N and apply every frame: it then holds exactly History's chat view at {@link ChatView.cursor}
 * (docs/protocol.md §8, the live chat view).
 */
import type { ChatFrame, ChatMessage } from './types.js';

export class ChatView {
  readonly messages: ChatMessage[];
  /** The seq the view reflects: resume after it. */
  cursor: number;
  /** Messages by first_seq, which identifies a message. */
  readonly #byFirstSeq = new Map<number, ChatMessage>();

  /** `messages`: History's chat view at `cursor`, ascending (parts that share an id merged). */
  constructor(messages: readonly ChatMessage[] = [], cursor = 0) {
    this.messages = messages.map((m) => structuredClone(m));
    for (const m of this.messages) this.#byFirstSeq.set(m.first_seq, m);
    this.cursor = cursor;
  }

  /** Applies one chat frame; returns the message it changed. */
  apply(frame: ChatFrame): ChatMessage {
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

  /** A `live` item: nothing the view shows lies between its cursor and `seq`. */
  advance(seq: number): void {
    this.cursor = Math.max(this.cursor, seq);
  }
}
