// Original file: runstream/v1/history.proto

export const ChatRole = {
  CHAT_ROLE_UNSPECIFIED: 'CHAT_ROLE_UNSPECIFIED',
  CHAT_ROLE_HUMAN: 'CHAT_ROLE_HUMAN',
  CHAT_ROLE_ASSISTANT: 'CHAT_ROLE_ASSISTANT',
  CHAT_ROLE_TOOL: 'CHAT_ROLE_TOOL',
  CHAT_ROLE_SYSTEM: 'CHAT_ROLE_SYSTEM',
} as const;

export type ChatRole =
  | 'CHAT_ROLE_UNSPECIFIED'
  | 0
  | 'CHAT_ROLE_HUMAN'
  | 1
  | 'CHAT_ROLE_ASSISTANT'
  | 2
  | 'CHAT_ROLE_TOOL'
  | 3
  | 'CHAT_ROLE_SYSTEM'
  | 4

export type ChatRole__Output = typeof ChatRole[keyof typeof ChatRole]
