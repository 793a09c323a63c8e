import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";

// Which methods each path is served under, learnt as routes are registered, so that a
// request no route serves can be told apart: a path served under other methods gets 405
// with `Allow` (as Triton answers a GET to an inference route), an unknown path 404.
// Only requests that found no route pay for the lookup.

export interface RouteMethods {
  /** The methods `url`'s path is served under; empty when no route has the path. */
  allowed(url: string): string[];
}

/** A route's URL as a pattern: `:name` is one path segment, `*` the rest. */
function routePattern(url: string): RegExp {
  const source = url
    .split(/(:[A-Za-z0-9_]+|\*)/)
    .map((part) =>
      part === "*" ? ".*" : part.startsWith(":") ? "[^/]+" : part.replace(/[.+?^${}()|[\]\\]/g, "\\$&"),
    )
    .join("");
  return new RegExp(`^${source}/?$`);
}

/** Starts learning `app`'s routes: call before any route is registered. */
export function learnRouteMethods(app: FastifyInstance): RouteMethods {
  const routes = new Map<string, { pattern: RegExp; methods: Set<string> }>();
  app.addHook("onRoute", (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    // CORS preflights answer every path (`OPTIONS *`): they say nothing of what a path serves.
    if (route.url === "*" || methods.every((method) => method === "OPTIONS")) return;
    let entry = routes.get(route.url);
    if (entry === undefined) {
      entry = { pattern: routePattern(route.url), methods: new Set() };
      routes.set(route.url, entry);
    }
    for (const method of methods) entry.methods.add(method);
  });
  return {
    allowed(url) {
      const path = url.split("?", 1)[0]!;
      const methods = new Set<string>();
      for (const { pattern, methods: served } of routes.values()) {
        if (pattern.test(path)) for (const method of served) methods.add(method);
      }
      return [...methods].sort();
    },
  };
}

/** The status and message for a request no route serves; a 405 gets its `Allow` header here. */
export function unroutedAnswer(
  request: FastifyRequest,
  reply: FastifyReply,
  allowed: readonly string[],
): { status: 404 | 405; message: string } {
  if (allowed.length === 0 || allowed.includes(request.method)) {
    return { status: 404, message: `Not Found: no route for ${request.method} ${request.url}` };
  }
  reply.header("allow", allowed.join(", "));
  return {
    status: 405,
    message: `Method Not Allowed: ${request.url.split("?", 1)[0]} answers ${allowed.join(", ")}, not ${request.method}`,
  };
}
