/**
 * The cursors of a History page, shared by the event pages and the chat projection: an
 * ascending page is continued with `nextAfterSeq`, a descending one (asked with
 * `beforeSeq`) with `nextBeforeSeq`; an empty page hands back the query's own cursor.
 */

export interface PageCursors {
  readonly nextAfterSeq: number | undefined;
  readonly nextBeforeSeq: number | undefined;
}

/** `edgeSeq`: the seq the next page continues from (the page's last in paging order); undefined when empty. */
export function pageCursors(
  q: { readonly afterSeq: number; readonly beforeSeq?: number | undefined },
  edgeSeq: number | undefined,
): PageCursors {
  const descending = q.beforeSeq !== undefined;
  return {
    nextAfterSeq: descending ? undefined : (edgeSeq ?? q.afterSeq),
    nextBeforeSeq: descending ? (edgeSeq ?? q.beforeSeq) : undefined,
  };
}
