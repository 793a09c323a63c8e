// OpenVINO Model Server's metrics settings: `--metrics_enable` / `--metrics_list` on its
// command line, or the `monitoring` section of its config.json. Enabled, the metrics are
// served on the REST port, under OVMS's family names, besides seqserve's own. The names,
// the default list and the messages are OVMS's (metric_config.cpp, config.cpp).

/** The families `metrics_enable` turns on (the MediaPipe ones have no series without graphs). */
const OVMS_DEFAULT_METRIC_FAMILIES = [
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
const OVMS_ADDITIONAL_METRIC_FAMILIES = ["ovms_infer_req_queue_size", "ovms_infer_req_active"] as const;

export interface OvmsMetricsSettings {
  /** The families served (at `/metrics` on the REST port, as OVMS serves them). */
  readonly families: ReadonlySet<string>;
}

export class OvmsMetricsConfigError extends Error {}

/**
 * The settings for metrics enabled with `list` (undefined: the default families); throws
 * OvmsMetricsConfigError with OVMS's message for a name it does not know.
 */
export function ovmsMetricsSettings(list: readonly string[] | undefined): OvmsMetricsSettings {
  if (list === undefined) return { families: new Set(OVMS_DEFAULT_METRIC_FAMILIES) };
  checkNames(list);
  return { families: new Set(list) };
}

function checkNames(list: readonly string[]): void {
  const known = new Set<string>([...OVMS_DEFAULT_METRIC_FAMILIES, ...OVMS_ADDITIONAL_METRIC_FAMILIES]);
  for (const name of list) {
    if (!known.has(name)) throw new OvmsMetricsConfigError(`Invalid name in metrics_list: '${name}'`);
  }
}

/**
 * `--metrics_list`'s value: names separated by commas, blanks around them dropped (an
 * empty name between two commas is refused as OVMS refuses it); undefined for an empty
 * value, which leaves OVMS's default list.
 */
export function metricsListFlag(value: string): string[] | undefined {
  if (value.trim() === "") return undefined;
  return value.split(",").map((name) => name.trim());
}

export interface OvmsMonitoring {
  readonly enable: boolean;
  readonly list?: readonly string[];
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * The `monitoring` section of an OVMS config.json text, checked as OVMS's config schema
 * checks it (`metrics` with `enable`, and `metrics_list`; nothing else): undefined when the
 * file has none (or does not parse, which the config reader reports).
 */
export function ovmsMonitoring(text: string): OvmsMonitoring | undefined {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!isObject(json) || !("monitoring" in json)) return undefined;
  const monitoring = json.monitoring;
  const invalid = (why: string) =>
    new OvmsMetricsConfigError(`the config file's 'monitoring' section is invalid: ${why}`);
  if (!isObject(monitoring)) throw invalid("it must be an object");
  for (const key in monitoring) if (key !== "metrics") throw invalid(`unknown key '${key}'`);
  const metrics = monitoring.metrics;
  if (!isObject(metrics)) throw invalid("'metrics' must be an object with 'enable'");
  for (const key in metrics) {
    if (key !== "enable" && key !== "metrics_list") {
      throw invalid(`unknown key '${key}' in 'metrics' (OVMS serves its metrics at /metrics)`);
    }
  }
  const { enable, metrics_list: list } = metrics;
  if (typeof enable !== "boolean") throw invalid("'metrics.enable' must be a boolean");
  if (list === undefined) return { enable };
  if (!Array.isArray(list) || !list.every((name) => typeof name === "string")) {
    throw invalid("'metrics.metrics_list' must be an array of metric names");
  }
  // Checked even when the metrics are off, as OVMS does.
  checkNames(list);
  return { enable, list };
}
