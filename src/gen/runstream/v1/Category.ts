// Original file: runstream/v1/runstream.proto

export const Category = {
  CATEGORY_UNSPECIFIED: 'CATEGORY_UNSPECIFIED',
  MESSAGE: 'MESSAGE',
  TRACE: 'TRACE',
  LIFECYCLE: 'LIFECYCLE',
} as const;

export type Category =
  | 'CATEGORY_UNSPECIFIED'
  | 0
  | 'MESSAGE'
  | 1
  | 'TRACE'
  | 2
  | 'LIFECYCLE'
  | 3

export type Category__Output = typeof Category[keyof typeof Category]
