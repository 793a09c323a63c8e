import { readWholeNumber, SettingFlagError, splitSettingFlag } from "./setting-flag.ts";

// Request tracing, set as Triton sets it: `--trace-config <setting>=<value>` for level,
// rate, count and mode; `--trace-config opentelemetry,<setting>=<value>` for the OTLP
// exporter (url, resource, bsp_*); `--trace-config triton,<setting>=<value>` for Triton's
// JSON trace file (file, log-frequency). Triton's deprecated --trace-file, --trace-level,
// --trace-rate, --trace-count and --trace-log-frequency still work, and --trace-config
// overrides them, as in Triton.

export type TraceMode = "triton" | "opentelemetry";

export interface TraceSettings {
  /** Level TIMESTAMPS: when each request was received, queued, batched, computed, answered. */
  readonly timestamps: boolean;
  /** Level TENSORS: the request's input and output tensors (Triton's trace file only, as in Triton). */
  readonly tensors: boolean;
  /** One request in `rate` is traced; 0 traces only requests that carry a trace context. */
  readonly rate: number;
  /** Traces left to collect; -1 never stops. */
  readonly count: number;
  readonly mode: TraceMode;
  /** Where the OTLP/HTTP exporter sends spans. */
  readonly url: string;
  /** OpenTelemetry resource attributes. */
  readonly resource: Readonly<Record<string, string>>;
  readonly bspMaxQueueSize: number;
  readonly bspScheduleDelayMs: number;
  readonly bspMaxExportBatchSize: number;
  /** Triton mode: the JSON trace file. */
  readonly file: string | undefined;
  /** Triton mode: write `<file>.<n>` every this many traces; 0 writes `file` at shutdown. */
  readonly logFrequency: number;
}

export const DEFAULT_TRACE_SETTINGS: TraceSettings = Object.freeze({
  timestamps: false,
  tensors: false,
  rate: 1000,
  count: -1,
  mode: "triton",
  url: "http://localhost:4318/v1/traces",
  resource: Object.freeze({ "service.name": "seqserve" }),
  bspMaxQueueSize: 2048,
  bspScheduleDelayMs: 5000,
  bspMaxExportBatchSize: 512,
  file: undefined,
  logFrequency: 0,
});

/** Triton's deprecated single-setting trace flags. */
export interface DeprecatedTraceFlags {
  readonly file?: string | undefined;
  readonly levels?: readonly string[];
  readonly rate?: string | undefined;
  readonly count?: string | undefined;
  readonly logFrequency?: string | undefined;
}

export interface TraceConfigResult {
  readonly settings: TraceSettings;
  readonly notices: readonly string[];
}

type Env = Readonly<Record<string, string | undefined>>;
type Mutable<T> = { -readonly [K in keyof T]: T[K] };

const INT32_MAX = 2 ** 31 - 1;

/** A trace level as Triton reads it: undefined for OFF. */
function readLevel(flag: string, value: string): "TIMESTAMPS" | "TENSORS" | undefined {
  switch (value.toLowerCase()) {
    case "off":
    case "false":
      return undefined;
    case "timestamps":
    case "true":
    case "on":
    case "min":
    case "max":
      return "TIMESTAMPS";
    case "tensors":
      return "TENSORS";
    default:
      throw new SettingFlagError(`${flag} must be OFF, TIMESTAMPS or TENSORS, got '${value}'`);
  }
}

function readMode(flag: string, value: string): TraceMode {
  const mode = value.toLowerCase();
  if (mode === "triton" || mode === "opentelemetry") return mode;
  throw new SettingFlagError(`${flag} must be triton or opentelemetry, got '${value}'`);
}

/** `key=value` pairs, comma-separated, as OTEL_RESOURCE_ATTRIBUTES writes them. */
function resourcePairs(flag: string, text: string): [string, string][] {
  return text
    .split(",")
    .filter((pair) => pair.trim() !== "")
    .map((pair) => {
      const equals = pair.indexOf("=");
      const key = pair.slice(0, equals).trim();
      if (equals <= 0 || key === "") {
        throw new SettingFlagError(`${flag} expects <key>=<value>, got '${pair}'`);
      }
      return [key, pair.slice(equals + 1).trim()];
    });
}

/**
 * Reads the trace flags. Defaults come from Triton's, and the batch span processor's and
 * the resource's from the OTEL_BSP_* and OTEL_RESOURCE_ATTRIBUTES variables, as Triton reads them.
 */
export function readTraceConfig(
  values: readonly string[],
  deprecated: DeprecatedTraceFlags = {},
  env: Env = {},
): TraceConfigResult {
  const notices: string[] = [];
  const settings: Mutable<TraceSettings> = { ...DEFAULT_TRACE_SETTINGS };
  const resource: Record<string, string> = { ...DEFAULT_TRACE_SETTINGS.resource };
  const fromEnv = (name: string, fallback: number): number => {
    const value = env[name];
    return value === undefined || value === "" ? fallback : readWholeNumber(name, value, 1, INT32_MAX);
  };
  settings.bspMaxQueueSize = fromEnv("OTEL_BSP_MAX_QUEUE_SIZE", settings.bspMaxQueueSize);
  settings.bspScheduleDelayMs = fromEnv("OTEL_BSP_SCHEDULE_DELAY", settings.bspScheduleDelayMs);
  settings.bspMaxExportBatchSize = fromEnv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", settings.bspMaxExportBatchSize);
  for (const [key, value] of resourcePairs("OTEL_RESOURCE_ATTRIBUTES", env.OTEL_RESOURCE_ATTRIBUTES ?? "")) {
    resource[key] = value;
  }

  // Levels add up (TIMESTAMPS and TENSORS may both be asked for); an explicit OFF wins.
  let off = false;
  const addLevel = (flag: string, value: string): void => {
    const level = readLevel(flag, value);
    if (level === undefined) off = true;
    else if (level === "TIMESTAMPS") settings.timestamps = true;
    else settings.tensors = true;
  };
  const deprecation = (flag: string, instead: string): void => {
    notices.push(`${flag} is deprecated in Triton: use --trace-config ${instead}`);
  };
  if (deprecated.file !== undefined) {
    deprecation("--trace-file", "triton,file=<path>");
    settings.file = deprecated.file;
  }
  for (const level of deprecated.levels ?? []) {
    deprecation("--trace-level", "level=<OFF|TIMESTAMPS|TENSORS>");
    addLevel("--trace-level", level);
  }
  if (deprecated.rate !== undefined) {
    deprecation("--trace-rate", "rate=<rate>");
    settings.rate = readWholeNumber("--trace-rate", deprecated.rate, 0, INT32_MAX);
  }
  if (deprecated.count !== undefined) {
    deprecation("--trace-count", "count=<count>");
    settings.count = readWholeNumber("--trace-count", deprecated.count, -1, INT32_MAX);
  }
  if (deprecated.logFrequency !== undefined) {
    deprecation("--trace-log-frequency", "triton,log-frequency=<n>");
    settings.logFrequency = readWholeNumber("--trace-log-frequency", deprecated.logFrequency, 0, INT32_MAX);
  }

  for (const raw of values) {
    const setting = splitSettingFlag(raw);
    if (setting === undefined) {
      throw new SettingFlagError(
        `--trace-config expects <setting>=<value> or <mode>,<setting>=<value>, got '${raw}'`,
      );
    }
    const { key, value } = setting;
    const scope = setting.scope === "" ? "" : readMode("--trace-config", setting.scope);
    const flag = `--trace-config ${scope === "" ? "" : `${scope},`}${key}`;
    if (scope === "") {
      if (key === "level") addLevel(flag, value);
      else if (key === "rate") settings.rate = readWholeNumber(flag, value, 0, INT32_MAX);
      else if (key === "count") settings.count = readWholeNumber(flag, value, -1, INT32_MAX);
      else if (key === "mode") settings.mode = readMode(flag, value);
      else notices.push(`${flag} is not a trace setting seqserve knows; it has no effect`);
    } else if (scope === "opentelemetry") {
      if (key === "url") settings.url = /^https?:\/\//.test(value) ? value : `http://${value}`;
      else if (key === "resource") {
        for (const [k, v] of resourcePairs(flag, value)) resource[k] = v;
      } else if (key === "bsp_max_queue_size")
        settings.bspMaxQueueSize = readWholeNumber(flag, value, 1, INT32_MAX);
      else if (key === "bsp_schedule_delay")
        settings.bspScheduleDelayMs = readWholeNumber(flag, value, 1, INT32_MAX);
      else if (key === "bsp_max_export_batch_size") {
        settings.bspMaxExportBatchSize = readWholeNumber(flag, value, 1, INT32_MAX);
      } else notices.push(`${flag} is not a trace setting seqserve knows; it has no effect`);
    } else if (key === "file") settings.file = value;
    else if (key === "log-frequency") settings.logFrequency = readWholeNumber(flag, value, 0, INT32_MAX);
    else notices.push(`${flag} is not a trace setting seqserve knows; it has no effect`);
  }
  if (off) settings.timestamps = settings.tensors = false;
  settings.resource = Object.freeze(resource);
  if (settings.bspMaxExportBatchSize > settings.bspMaxQueueSize) {
    throw new SettingFlagError(
      `--trace-config opentelemetry,bsp_max_export_batch_size (${settings.bspMaxExportBatchSize}) must not exceed bsp_max_queue_size (${settings.bspMaxQueueSize})`,
    );
  }
  if (settings.mode === "opentelemetry" && settings.tensors) {
    notices.push(
      "--trace-config level=TENSORS has no effect in opentelemetry mode (as in Triton): spans carry timestamps only",
    );
  }
  if (
    settings.mode === "triton" &&
    (settings.timestamps || settings.tensors) &&
    settings.file === undefined
  ) {
    notices.push(
      "tracing is on in triton mode without --trace-config triton,file=<path>: no trace is written",
    );
  }
  return { settings: Object.freeze(settings), notices };
}
