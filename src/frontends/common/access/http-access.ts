import { isIP } from "node:net";
import { hostname as osHostname } from "node:os";
import cors from "@fastify/cors";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { ApiGroup } from "../../../config/security-options.ts";
import { ServerError } from "../../../core/errors.ts";
import type { Refusals } from "../../../core/refusals.ts";
import type { AccessPolicy } from "./access-policy.ts";
import { routeApiGroup } from "./route-api.ts";

// Access control for an HTTP server, before anything else a request does: requests a
// browser sends from another web origin are refused unless --cors-allow-origin lists it
// (a page could otherwise POST `text/plain` to /load or /infer without a CORS preflight),
// then the route's API group is checked against the access policy. The caller's name
// (its API key's) is left on the request for the sequences it starts.

declare module "fastify" {
  interface FastifyRequest {
    /** The caller, by its API key's name; undefined when the API needs no key. */
    principal: string | undefined;
  }
  interface FastifyContextConfig {
    /** The route's API group (route-api.ts), or how to tell it from the request's path. */
    apiGroup?: ApiGroup | ((path: string) => ApiGroup);
  }
}

export interface HttpAccessOptions {
  readonly policy: AccessPolicy;
  /** Origins allowed to call from a browser; "*" = any; empty = only the server's own. */
  readonly corsAllowOrigins: readonly string[];
  readonly refusals?: Refusals | undefined;
  /** Headers of the API family a browser page may send, and read, beyond KServe's. */
  readonly corsHeaders?: CorsHeaders | undefined;
}

export interface CorsHeaders {
  readonly allowed: readonly string[];
  readonly exposed: readonly string[];
}

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(",") : value;
}

/**
 * Whether a page from `hostname` can be the server's own without the operator saying so:
 * an IP address, localhost, or this machine's name. Any other name may be an attacker's
 * that resolves to this server (DNS rebinding): its page and the server would then share
 * an origin, Host header included, so the operator lists such origins
 * (--cors-allow-origin).
 */
function trustedHostname(hostname: string): boolean {
  const bare = hostname.startsWith("[") ? hostname.slice(1, -1) : hostname;
  if (isIP(bare) !== 0) return true;
  const name = bare.toLowerCase().replace(/\.$/, "");
  return name === "localhost" || name.endsWith(".localhost") || name === MACHINE_NAME;
}

/** This machine's name, read once: the check runs on every request with an Origin. */
const MACHINE_NAME = osHostname().toLowerCase();

/** Whether `origin` is the server's own (the Host the request was sent to, a trusted name). */
function sameOrigin(origin: string, host: string | undefined): boolean {
  if (host === undefined) return false;
  try {
    const url = new URL(origin);
    return url.host === host && trustedHostname(url.hostname);
  } catch {
    return false;
  }
}

export function guardHttpApp(app: FastifyInstance, options: HttpAccessOptions): void {
  const { policy, refusals } = options;
  const allowAny = options.corsAllowOrigins.includes("*");
  const allowed = new Set(options.corsAllowOrigins);
  app.decorateRequest("principal", undefined);

  app.addHook("onRoute", (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    // Preflights carry no credentials; the origin check below still applies to them.
    if (methods.every((m) => m === "OPTIONS")) return;
    const group = routeApiGroup(methods.find((m) => m !== "HEAD") ?? methods[0]!, route.url);
    if (group === undefined)
      throw new Error(`the HTTP route ${methods.join(",")} ${route.url} has no API group`);
    route.config = { ...route.config, apiGroup: group };
  });

  /** The origin check, then the access policy; throws the refusal. */
  const checkRequest = (request: FastifyRequest, reply: FastifyReply): void => {
    const origin = request.headers.origin;
    if (
      origin !== undefined &&
      !allowAny &&
      !allowed.has(origin) &&
      !sameOrigin(origin, request.headers.host)
    ) {
      refusals?.refused("cross_origin");
      throw new ServerError(
        "PERMISSION_DENIED",
        `requests from the web origin '${origin}' are not allowed (the server allows ${
          allowed.size === 0 ? "no other origin" : [...allowed].join(", ")
        }; see --cors-allow-origin)`,
      );
    }
    if (policy.unrestricted) return;
    const config = request.routeOptions.config.apiGroup;
    if (config === undefined) return;
    const group = typeof config === "function" ? config(request.url) : config;
    try {
      request.principal = policy.check(group, (name) => single(request.headers[name]));
    } catch (error) {
      if (error instanceof ServerError && error.code === "UNAUTHENTICATED") {
        reply.header("www-authenticate", 'Bearer realm="seqserve"');
      }
      throw error;
    }
  };

  // Callback style: no promise on each request's way in.
  app.addHook("onRequest", (request: FastifyRequest, reply: FastifyReply, done: (error?: Error) => void) => {
    try {
      checkRequest(request, reply);
      done();
    } catch (error) {
      done(error as Error);
    }
  });

  if (options.corsAllowOrigins.length > 0) {
    app.register(cors, {
      origin: allowAny ? "*" : [...allowed],
      methods: ["GET", "HEAD", "POST", "DELETE"],
      allowedHeaders: [
        "content-type",
        "authorization",
        "x-api-key",
        "inference-header-content-length",
        "content-encoding",
        ...(options.corsHeaders?.allowed ?? []),
      ],
      exposedHeaders: [
        "inference-header-content-length",
        "retry-after",
        ...(options.corsHeaders?.exposed ?? []),
      ],
      maxAge: 600,
    });
  }
}
