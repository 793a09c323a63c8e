import type { ApiGroup } from "../../../config/security-options.ts";

// The API group of every HTTP route, in one table, so access control cannot miss one: a
// route this table does not know stops the server at start (see http-access.ts).
// Triton's categories where Triton has the route, seqserve's `sequences` for its own.

const MODEL = "/v2/models/:model";
const VERSION = "/v2/models/:model/versions/:version";

const BY_SUFFIX: readonly [string, ApiGroup][] = [
  ["/ready", "health"],
  ["/config", "model-config"],
  ["/stats", "statistics"],
  ["/infer", "inference"],
  ["/generate", "inference"],
  ["/generate_stream", "inference"],
  ["/stream", "inference"],
  ["/sequences", "sequences"],
  ["/sequences/:id", "sequences"],
  ["/trace/setting", "trace"],
  ["", "metadata"],
];

/** Triton's shared memory routes of one kind, every region or one: all `shared-memory`. */
function sharedMemoryPaths(kind: "system" | "cuda"): Record<string, ApiGroup> {
  const paths: Record<string, ApiGroup> = {};
  for (const region of ["", "/region/:region"]) {
    for (const action of ["status", "register", "unregister"]) {
      paths[`/v2/${kind}sharedmemory${region}/${action}`] = "shared-memory";
    }
  }
  return paths;
}

const EXACT: Readonly<Record<string, ApiGroup>> = {
  "/v2": "metadata",
  "/v2/health/live": "health",
  "/v2/health/ready": "health",
  "/v2/models/stats": "statistics",
  "/v2/logging": "logging",
  "/v2/trace/setting": "trace",
  "/v2/repository/index": "model-repository",
  ...sharedMemoryPaths("system"),
  ...sharedMemoryPaths("cuda"),
  "/v2/repository/models/:model/load": "model-repository",
  "/v2/repository/models/:model/unload": "model-repository",
  // Triton's paths naming a repository.
  "/v2/repository/:repository/index": "model-repository",
  "/v2/repository/:repository/models/:model/load": "model-repository",
  "/v2/repository/:repository/models/:model/unload": "model-repository",
  // OpenVINO Model Server's metrics on its REST port (--metrics_enable).
  "/metrics": "metrics",
  // The OpenAPI document of the server's routes.
  "/openapi.json": "metadata",
  // TF-Serving REST: every model's status.
  "/v1/config": "health",
  "/v1/config/reload": "model-repository",
  "POST /v1/models/*": "inference",
  // SageMaker.
  "/ping": "health",
  "/invocations": "inference",
  "/endpoints/:endpoint/invocations": "inference",
  "/endpoints/:endpoint/invocations-response-stream": "inference",
  // SageMaker's multi-model endpoint: Triton's categories for them.
  "/models": "model-repository",
  "/models/:name": "model-repository",
  "/models/:name/invoke": "inference",
};

/** TF-Serving's model status path: /v1/models/{m}[/versions/{v}|/labels/{l}], decoded. */
const TFS_STATUS_PATH = /^\/v1\/models\/[^/]+(?:\/(?:versions|labels)\/[^/]+)?\/?$/;

/**
 * The group of a `GET /v1/models/…`: a model's status is health; anything else, its
 * metadata however the path spells it (percent-encoded, with a trailing slash, which the
 * router reads as the same path), needs the metadata group.
 */
function tfsModelGet(url: string): ApiGroup {
  const path = url.split("?")[0]!;
  let decoded: string;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    return "metadata";
  }
  return TFS_STATUS_PATH.test(decoded) ? "health" : "metadata";
}

/**
 * The group of a route (`url` as registered); undefined when unknown. A group decided by
 * the request's own path (TF-Serving's `GET /v1/models/*`: status or metadata) is given as
 * a function of it.
 */
export function routeApiGroup(
  method: string,
  url: string,
): ApiGroup | ((path: string) => ApiGroup) | undefined {
  const exact = EXACT[`${method} ${url}`] ?? EXACT[url];
  if (exact !== undefined) return exact;
  if (url === "/v1/models/*") return tfsModelGet;
  for (const base of [VERSION, MODEL]) {
    if (!url.startsWith(base)) continue;
    const suffix = url.slice(base.length);
    for (const [known, group] of BY_SUFFIX) if (suffix === known) return group;
  }
  return undefined;
}
