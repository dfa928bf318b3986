// Original file: runstream/v1/runstream.proto

export const AckLevel = {
  ACK_LEVEL_UNSPECIFIED: 'ACK_LEVEL_UNSPECIFIED',
  ACCEPTED: 'ACCEPTED',
  PERSISTED: 'PERSISTED',
} as const;

export type AckLevel =
  | 'ACK_LEVEL_UNSPECIFIED'
  | 0
  | 'ACCEPTED'
  | 1
  | 'PERSISTED'
  | 2

export type AckLevel__Output = typeof AckLevel[keyof typeof AckLevel]
