/**
 * The HTTP port's routes, by owner: each route is a method and a path template
 * (`/v1/threads/{thread_id}/events`) registered by the module that serves it. Which route
 * serves a request follows from the templates alone, never from the order they were added:
 * of two that match, the one with a literal at the first segment where they differ wins;
 * the same method and template twice is refused at start; and a path that some route has
 * under another method answers 405 with `Allow`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Path parameters are the raw segments: each handler decodes its own (domain/ids pathId). */
export type RouteParams = Readonly<Record<string, string>>;

export type RouteHandler = (
  req: IncomingMessage,
  res: ServerResponse,
  params: RouteParams,
  url: URL,
) => Promise<void>;

export interface Route {
  readonly method: string;
  /** `/literal/{param}/...`; a segment is a literal or one `{name}`. */
  readonly path: string;
  /** Who serves it (`history`, `sse`, `langgraph`, …), for the start-up refusal of a clash. */
  readonly owner: string;
  readonly handle: RouteHandler;
}

type Segment = { readonly literal: string } | { readonly param: string };

interface Compiled {
  readonly route: Route;
  readonly segments: readonly Segment[];
}

export type Match =
  | { readonly kind: 'route'; readonly route: Route; readonly params: RouteParams }
  | { readonly kind: 'method'; readonly allowed: readonly string[] }
  | { readonly kind: 'none' };

export class Router {
  readonly #routes: Compiled[] = [];

  /** Adds routes; throws when one has the same method and template as a route already there. */
  add(...routes: readonly Route[]): this {
    for (const route of routes) {
      const segments = compile(route.path);
      const clash = this.#routes.find(
        (c) => c.route.method === route.method && sameShape(c.segments, segments),
      );
      if (clash) {
        throw new Error(
          `${route.method} ${route.path} (${route.owner}) is already served by ${clash.route.owner} as ${clash.route.path}`,
        );
      }
      this.#routes.push({ route, segments });
    }
    return this;
  }

  /** The route for a method and a (raw, not decoded) path. */
  match(method: string, pathname: string): Match {
    const parts = pathname.split('/').slice(1);
    let best: { c: Compiled; params: Record<string, string> } | undefined;
    const allowed = new Set<string>();
    for (const c of this.#routes) {
      const params = matchSegments(c.segments, parts);
      if (!params) continue;
      allowed.add(c.route.method);
      if (c.route.method !== method) continue;
      if (!best || moreSpecific(c.segments, best.c.segments)) best = { c, params };
    }
    if (best) return { kind: 'route', route: best.c.route, params: best.params };
    if (allowed.size > 0) return { kind: 'method', allowed: [...allowed] };
    return { kind: 'none' };
  }

  get routes(): readonly Route[] {
    return this.#routes.map((c) => c.route);
  }
}

function compile(path: string): Segment[] {
  if (!path.startsWith('/')) throw new Error(`route path ${path} must start with /`);
  return path
    .split('/')
    .slice(1)
    .map((s) => {
      const m = /^\{([a-z_]+)\}$/.exec(s);
      return m ? { param: m[1] as string } : { literal: s };
    });
}

/**
 * Of two templates that match the same path, whether `a` wins: at the first segment where
 * one has a literal and the other a parameter, the literal. (Equal shapes cannot both be
 * added, so this decides every pair.)
 */
function moreSpecific(a: readonly Segment[], b: readonly Segment[]): boolean {
  for (let i = 0; i < a.length; i++) {
    const x = 'literal' in (a[i] as Segment);
    const y = 'literal' in (b[i] as Segment);
    if (x !== y) return x;
  }
  return false;
}

/** Two templates that match exactly the same paths. */
function sameShape(a: readonly Segment[], b: readonly Segment[]): boolean {
  return (
    a.length === b.length &&
    a.every((s, i) => {
      const t = b[i] as Segment;
      return 'literal' in s ? 'literal' in t && t.literal === s.literal : 'param' in t;
    })
  );
}

function matchSegments(
  segments: readonly Segment[],
  parts: readonly string[],
): Record<string, string> | undefined {
  if (segments.length !== parts.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < segments.length; i++) {
    const s = segments[i] as Segment;
    const part = parts[i] as string;
    if ('literal' in s) {
      if (s.literal !== part) return undefined;
    } else {
      if (part === '') return undefined;
      params[s.param] = part;
    }
  }
  return params;
}
