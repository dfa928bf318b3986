/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` a producer's
 * gRPC call carries is kept in each of its events' metadata, so what subscribers receive
 * names the trace the event was made in, from the agent to the browser.
 */

/** The metadata key (and gRPC metadata key) of the trace parent. */
export const TRACEPARENT_KEY = 'traceparent';

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/;

/**
 * A valid `traceparent` value, or undefined: version `ff`, an all-zero trace or parent id
 * and anything malformed are ignored, as the specification says a receiver must.
 */
export function parseTraceparent(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const v = value.trim().toLowerCase();
  const m = TRACEPARENT.exec(v);
  if (!m || m[1] === 'ff' || /^0+$/.test(m[2] as string) || /^0+$/.test(m[3] as string)) return undefined;
  return v;
}

/**
 * `metadataJson` (a JSON object's text) with `traceparent` added first, unless the event
 * already carries one of its own (the producer's own wins). The rest of the text is kept as
 * the producer wrote it.
 */
export function withTraceparent(metadataJson: string, traceparent: string): string {
  if (metadataJson.includes(`"${TRACEPARENT_KEY}"`)) {
    const own = (JSON.parse(metadataJson) as Record<string, unknown>)[TRACEPARENT_KEY];
    if (own !== undefined) return metadataJson;
  }
  const open = metadataJson.indexOf('{');
  const rest = metadataJson.slice(open + 1);
  const entry = `"${TRACEPARENT_KEY}":"${traceparent}"`;
  return `{${entry}${rest.trim().startsWith('}') ? '' : ','}${rest}`;
}
