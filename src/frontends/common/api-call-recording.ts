import type { ApiCallRecorder } from "../../core/api-calls.ts";
import type { ModelRegistry } from "../../core/model.ts";
import { COUNTED_CALLS, type CountedApi } from "../../observability/ovms-counted-calls.ts";

// A frontend's calls, recorded for metrics counted per API, method and transport (OVMS's
// ovms_requests_success / _fail, ovms_request_time_us). A call counts for the model it
// names once the handler has found that model: a call for a model the server does not
// have counts nowhere, as in OVMS.

export interface CallSite {
  readonly api: CountedApi;
  readonly transport: "REST" | "gRPC";
  readonly method: string;
  /** Whether its processing time is observed (inference calls). */
  readonly timed: boolean;
}

/** A frontend's call sites: each counted call of `api`, over `transport`. */
export function callSites<A extends CountedApi>(
  api: A,
  transport: CallSite["transport"],
): Record<keyof (typeof COUNTED_CALLS)[A], CallSite> {
  const calls: Record<string, { readonly timed: boolean }> = COUNTED_CALLS[api];
  const sites: Record<string, CallSite> = {};
  for (const [method, { timed }] of Object.entries(calls)) sites[method] = { api, transport, method, timed };
  return sites as Record<keyof (typeof COUNTED_CALLS)[A], CallSite>;
}

/** Tells which model (and version, where the method has one) the call is about. */
export type IdentifyModel = (name: string, version?: string) => void;

const NOT_RECORDED: IdentifyModel = () => {};

/**
 * Runs `work`, then records the call for the model it identified, when calls are recorded;
 * otherwise just runs it (no promise added on the request path).
 */
export function recordCall<T>(
  recorder: ApiCallRecorder | undefined,
  site: CallSite,
  work: (identify: IdentifyModel) => T | Promise<T>,
): T | Promise<T> {
  return recorder === undefined ? work(NOT_RECORDED) : recorded(recorder, site, work);
}

async function recorded<T>(
  recorder: ApiCallRecorder,
  site: CallSite,
  work: (identify: IdentifyModel) => T | Promise<T>,
): Promise<T> {
  const start = performance.now();
  let model: string | undefined;
  let version: string | undefined;
  const record = (ok: boolean): void => {
    if (model === undefined) return;
    const { api, transport, method, timed } = site;
    const durationUs = timed ? Math.round((performance.now() - start) * 1000) : undefined;
    recorder.record({
      api,
      transport,
      method,
      model,
      version,
      ok,
      ...(durationUs === undefined ? {} : { durationUs }),
    });
  };
  try {
    const result = await work((name, modelVersion) => {
      model = name;
      version = modelVersion;
    });
    record(true);
    return result;
  } catch (error) {
    record(false);
    throw error;
  }
}

/**
 * A readiness check, counted as OVMS counts it: a success for a version the server has,
 * ready or not (the call itself succeeded); nothing for one it does not have.
 */
export function recordReadiness(
  recorder: ApiCallRecorder | undefined,
  site: CallSite,
  models: ModelRegistry,
  model: string,
  version: string | undefined,
): void {
  if (recorder === undefined) return;
  const wanted = version === undefined || version === "" ? undefined : String(Number(version));
  const known = models
    .index()
    .some((entry) => entry.name === model && (wanted === undefined || entry.version === wanted));
  if (known) recorder.record({ ...site, model, version: undefined, ok: true });
}
