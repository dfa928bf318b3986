/**
 * Spans through `@opentelemetry/api`: a producer's Publish call, and the persister batch
 * that stores its events, in the trace its W3C `traceparent` names. The API is a no-op until
 * the process registers a tracer provider (an SDK and an exporter of the operator's
 * choosing, e.g. with `node --import` of an OpenTelemetry setup file); the broker requires
 * none.
 */
import {
  type Attributes,
  context,
  type Link,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api';
import { parseTraceparent } from './domain/trace.js';

/** One tracer: it follows a provider registered later (the API's proxy), and is not made per span. */
const tracer = trace.getTracer('runstream');

/** The span context a valid `traceparent` names (remote), or undefined. */
export function spanContextOf(traceparent: string | undefined): SpanContext | undefined {
  const v = parseTraceparent(traceparent);
  if (v === undefined) return undefined;
  const [, traceId, spanId, flags] = v.split('-') as [string, string, string, string];
  return { traceId, spanId, traceFlags: Number.parseInt(flags, 16), isRemote: true };
}

/** Starts a span, a child of `traceparent`'s span when there is one. */
export function startSpan(
  name: string,
  o: { kind?: SpanKind; attributes?: Attributes; traceparent?: string | undefined; links?: Link[] } = {},
): Span {
  const parent = spanContextOf(o.traceparent);
  const ctx = parent ? trace.setSpanContext(context.active(), parent) : context.active();
  return tracer.startSpan(
    name,
    { kind: o.kind ?? SpanKind.INTERNAL, attributes: o.attributes, links: o.links },
    ctx,
  );
}

/** Ends `span` when `p` settles, with an error status if it rejects. */
export function endWith<T>(span: Span, p: Promise<T>): Promise<T> {
  p.then(
    () => span.end(),
    (err: unknown) => {
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message ?? String(err) });
      span.end();
    },
  );
  return p;
}

/** Links to the distinct traces named by events' metadata (`"traceparent"`), at most `max`. */
export function traceLinks(metadataJsons: Iterable<string>, max = 32): Link[] {
  const seen = new Set<string>();
  const links: Link[] = [];
  for (const m of metadataJsons) {
    if (!m.includes('"traceparent"')) continue;
    const value = /"traceparent"\s*:\s*"([^"]*)"/.exec(m)?.[1];
    if (value === undefined || seen.has(value)) continue;
    seen.add(value);
    const sc = spanContextOf(value);
    if (sc) links.push({ context: sc });
    if (links.length >= max) break;
  }
  return links;
}

export { SpanKind };
