/** Where a subscription starts, and the extent of the log that offsets refer to. */

/** Where a subscription starts. */
export type StartCursor =
  | { readonly kind: 'after_seq'; readonly seq: number }
  | { readonly kind: 'from_offset'; readonly offset: number }
  | { readonly kind: 'live' };

/** The JetStream log's current extent: offsets first..last are replayable. */
export interface LogBounds {
  readonly first: number;
  readonly last: number;
  /** When the stream was created (JetStream's text): another time is another stream, numbered from 1. */
  readonly created?: string | undefined;
}
