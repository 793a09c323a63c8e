// OpenVINO Model Server's metrics settings: `--metrics_enable` / `--metrics_list` on its
// command line, or the `monitoring` section of its config.json. Enabled, the metrics are
// served on the REST port, under OVMS's family names, besides seqserve's own. The names,
// the default list and the messages are OVMS's (metric_config.cpp, config.cpp).

/** The families `metrics_enable` turns on (the MediaPipe ones have no series without graphs). */
export const OVMS_DEFAULT_METRIC_FAMILIES = [
  "ovms_current_requests",
  "ovms_requests_success",
  "ovms_requests_fail",
  "ovms_request_time_us",
  "ovms_streams",
  "ovms_inference_time_us",
  "ovms_wait_for_infer_req_time_us",
  "ovms_current_graphs",
  "ovms_requests_accepted",
  "ovms_requests_rejected",
  "ovms_graph_error",
  "ovms_graph_processing_time_us",
  "ovms_responses",
] as const;

/** The families only `metrics_list` turns on. */
export const OVMS_ADDITIONAL_METRIC_FAMILIES = [
  "ovms_infer_req_queue_size",
  "ovms_infer_req_active",
] as const;

export interface OvmsMetricsSettings {
  /** The families served. */
  readonly families: ReadonlySet<string>;
  /** Where they are served on the REST port. */
  readonly endpointPath: string;
}

export class OvmsMetricsConfigError extends Error {}

const VALID_ENDPOINT = /^\/[a-zA-Z0-9]*$/;

/**
 * The settings for metrics enabled with `list` (undefined: the default families) at
 * `endpointPath`; throws OvmsMetricsConfigError with OVMS's message for a name it does not
 * know or a path it refuses.
 */
export function ovmsMetricsSettings(
  list: readonly string[] | undefined,
  endpointPath = "/metrics",
): OvmsMetricsSettings {
  if (!VALID_ENDPOINT.test(endpointPath)) {
    throw new OvmsMetricsConfigError(`Metrics config endpoint path is invalid: '${endpointPath}'`);
  }
  if (list === undefined) return { families: new Set(OVMS_DEFAULT_METRIC_FAMILIES), endpointPath };
  const known = new Set<string>([...OVMS_DEFAULT_METRIC_FAMILIES, ...OVMS_ADDITIONAL_METRIC_FAMILIES]);
  for (const name of list) {
    if (!known.has(name)) throw new OvmsMetricsConfigError(`Invalid name in metrics_list: '${name}'`);
  }
  return { families: new Set(list), endpointPath };
}

/** `--metrics_list`'s value: names separated by commas, blanks around them dropped. */
export function metricsListFlag(value: string): string[] {
  return value
    .split(",")
    .map((name) => name.trim())
    .filter((name) => name !== "");
}

/**
 * The `monitoring.metrics` section of an OVMS config.json text: undefined when the file has
 * none (or does not parse, which the config reader reports), else whether it enables the
 * metrics and how.
 */
export function ovmsMonitoring(
  text: string,
): { readonly enable: boolean; readonly list?: string[]; readonly endpointPath?: string } | undefined {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return undefined;
  }
  const metrics = (json as { monitoring?: { metrics?: unknown } } | null)?.monitoring?.metrics;
  if (metrics === undefined || metrics === null || typeof metrics !== "object") return undefined;
  const { enable, metrics_list: list, endpoint_path: endpointPath } = metrics as Record<string, unknown>;
  if (enable !== undefined && typeof enable !== "boolean") {
    throw new OvmsMetricsConfigError("monitoring.metrics.enable must be a boolean");
  }
  if (list !== undefined && !(Array.isArray(list) && list.every((name) => typeof name === "string"))) {
    throw new OvmsMetricsConfigError("monitoring.metrics.metrics_list must be an array of metric names");
  }
  if (endpointPath !== undefined && typeof endpointPath !== "string") {
    throw new OvmsMetricsConfigError("monitoring.metrics.endpoint_path must be a string");
  }
  return {
    enable: enable === true,
    ...(list === undefined ? {} : { list: list as string[] }),
    ...(endpointPath === undefined ? {} : { endpointPath }),
  };
}
