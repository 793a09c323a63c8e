import { readBoolean, SettingFlagError, splitSettingFlag } from "./setting-flag.ts";

// What the metrics endpoint publishes, set with Triton's flags: `--metrics-config
// <setting>=<value>` (counter_latencies, summary_latencies, summary_quantiles,
// histogram_latencies), --allow-cpu-metrics and --metrics-interval-ms.

export interface SummaryQuantile {
  readonly quantile: number;
  /** The allowed error Triton's syntax carries; prom-client's summaries size their own. */
  readonly error: number;
}

export interface MetricsSettings {
  /** The cumulative nv_inference_*_duration_us counters (Triton's default: on). */
  readonly counterLatencies: boolean;
  /** The nv_inference_*_summary_us summaries (Triton's default: off). */
  readonly summaryLatencies: boolean;
  readonly summaryQuantiles: readonly SummaryQuantile[];
  /**
   * Latency histograms per model: nv_inference_first_response_histogram_ms and seqserve's
   * request, queue and compute histograms. On unless turned off (Triton's default is off;
   * its only histogram is the first one).
   */
  readonly histogramLatencies: boolean;
  /** nv_cpu_utilization, nv_cpu_memory_total_bytes, nv_cpu_memory_used_bytes. */
  readonly cpuMetrics: boolean;
  /** How often the CPU metrics are sampled, in ms. */
  readonly intervalMs: number;
}

export const DEFAULT_METRICS_SETTINGS: MetricsSettings = Object.freeze({
  counterLatencies: true,
  summaryLatencies: false,
  summaryQuantiles: Object.freeze(
    [
      [0.5, 0.05],
      [0.9, 0.01],
      [0.95, 0.001],
      [0.99, 0.001],
      [0.999, 0.001],
    ].map(([quantile, error]) => Object.freeze({ quantile: quantile!, error: error! })),
  ),
  histogramLatencies: true,
  cpuMetrics: true,
  intervalMs: 2000,
});

function readQuantiles(value: string): SummaryQuantile[] {
  const quantiles = value.split(",").map((pair): SummaryQuantile => {
    const [q, e, extra] = pair.split(":").map((part) => part.trim());
    const quantile = Number(q);
    const error = Number(e);
    if (
      extra !== undefined ||
      q === "" ||
      e === "" ||
      !(quantile > 0 && quantile < 1) ||
      !(error >= 0 && error < 1)
    ) {
      throw new SettingFlagError(
        `--metrics-config summary_quantiles expects <quantile>:<error>,... with each between 0 and 1, got '${value}'`,
      );
    }
    return { quantile, error };
  });
  return quantiles;
}

export interface MetricsConfigResult {
  readonly settings: MetricsSettings;
  /** One line for each setting accepted without effect. */
  readonly notices: readonly string[];
}

/** Reads every `--metrics-config` value over `base`, in order (a later one wins). */
export function readMetricsConfig(
  values: readonly string[],
  base: MetricsSettings = DEFAULT_METRICS_SETTINGS,
): MetricsConfigResult {
  const settings: { -readonly [K in keyof MetricsSettings]: MetricsSettings[K] } = { ...base };
  const notices: string[] = [];
  for (const raw of values) {
    const setting = splitSettingFlag(raw);
    if (setting === undefined || setting.scope !== "") {
      throw new SettingFlagError(`--metrics-config expects <setting>=<value>, got '${raw}'`);
    }
    const { key, value } = setting;
    const flag = `--metrics-config ${key}`;
    switch (key) {
      case "counter_latencies":
        settings.counterLatencies = readBoolean(flag, value);
        break;
      case "summary_latencies":
        settings.summaryLatencies = readBoolean(flag, value);
        break;
      case "histogram_latencies":
        settings.histogramLatencies = readBoolean(flag, value);
        break;
      case "summary_quantiles":
        settings.summaryQuantiles = readQuantiles(value);
        break;
      default:
        notices.push(`${flag} is not a metrics setting seqserve knows; it has no effect`);
    }
  }
  return { settings: Object.freeze(settings), notices };
}
