/**
 * The client's copy of a thread's chat view is @runstream/client's ChatView: one
 * implementation of the apply rule (docs/protocol.md §8, the live chat view) for the
 * package, this repo's tests and its tools.
 */
export {
  type ChatFrame as ChatFrameData,
  type ChatMessage as ChatViewMessage,
  type ChatToolCall,
  ChatView,
} from '@runstream/client';
