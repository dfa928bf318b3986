/**
 * Partitions of the log: every thread belongs to one of a fixed number of partitions, and a
 * persister stores only the partitions it holds a lease on (persist/leases.ts). The count is
 * fixed when the log is created; every process checks its own against the log's at start.
 */

/** Partitions of a new log (RS_PARTITIONS). */
export const DEFAULT_PARTITIONS = 32;
/** Most partitions a log may have: each one is a consumer on NATS and a lease row in Postgres. */
export const MAX_PARTITIONS = 1024;

/**
 * The partition of a thread: FNV-1a (32 bit) of its id, modulo the count. Stable across
 * processes, versions and languages (ids are ASCII, so code units are bytes).
 */
export function partitionOf(threadId: string, partitions: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < threadId.length; i++) {
    h ^= threadId.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % partitions;
}
