import { readFileSync, statSync } from "node:fs";
import { resolve } from "node:path";
import {
  metricsListFlag,
  OvmsMetricsConfigError,
  type OvmsMetricsSettings,
  type OvmsMonitoring,
  ovmsMetricsSettings,
  ovmsMonitoring,
} from "../config/ovms-metrics-config.ts";
import type { SingleModelOptions } from "../config/server-options.ts";
import type { LogLevel } from "../observability/logger.ts";
import { flagBoolean } from "./flag-boolean.ts";
import { UsageError } from "./usage-error.ts";

// OpenVINO Model Server's command line, accepted beside Triton's so an `ovms …` launch
// script works with the program name changed. Flags that decide something seqserve does
// are applied; flags about OpenVINO itself (devices, streams, caches, threads) are
// accepted with a one-line notice. Underscore spellings of seqserve's own flags
// (`--config_path`) are the same flags.

export interface OvmsFlagSpec {
  readonly name: string;
  readonly value?: string;
  readonly boolean?: boolean;
  readonly help: string;
  readonly default?: string;
}

/** Flags that act. */
export const OVMS_FLAGS: readonly OvmsFlagSpec[] = [
  {
    name: "port",
    value: "port",
    help: "gRPC port (OVMS spelling; 0 or absent: no gRPC when OVMS ports are used).",
  },
  {
    name: "rest_port",
    value: "port",
    help: "HTTP port (OVMS spelling; 0 or absent: no HTTP when OVMS ports are used).",
  },
  { name: "model_path", value: "dir", help: "Single-model mode: the folder of the model's version folders." },
  { name: "model_name", value: "name", help: "Single-model mode: the model's name." },
  { name: "stateful", boolean: true, help: "Single-model mode: serve the model statefully (sequences)." },
  {
    name: "max_sequence_number",
    value: "n",
    help: "Single-model mode: live sequences at most; the next start is refused at once.",
    default: "500",
  },
  {
    name: "idle_sequence_cleanup",
    boolean: true,
    help: "Single-model mode: end sequences left idle by the sequence cleaner.",
    default: "true",
  },
  {
    name: "low_latency_transformation",
    boolean: true,
    help: "Single-model mode: accepted; an OpenVINO transformation without effect on ONNX models.",
  },
  {
    name: "state_pairs",
    value: "pairs",
    help: 'Single-model mode: the model\'s state tensors, "<<<state_in, state_out>>> …" (default: found from the model).',
  },
  {
    name: "model_version_policy",
    value: "json",
    help: 'Single-model mode: OVMS version policy, e.g. {"latest": {"num_versions": 1}}.',
  },
  {
    name: "sequence_cleaner_poll_wait_minutes",
    value: "minutes",
    help: "Period of the sequence cleaner; 0 disables it.",
    default: "5",
  },
  {
    name: "file_system_poll_wait_seconds",
    value: "seconds",
    help: "How often config.json files and their models' folders are checked for changes; 0 disables it.",
    default: "1",
  },
  {
    name: "log_level",
    value: "TRACE|DEBUG|INFO|WARNING|ERROR",
    help: "Least severe level logged (OVMS spelling).",
  },
  { name: "log_path", value: "file", help: "The log goes to this file (OVMS spelling of --log-file)." },
  {
    name: "rest_bind_address",
    value: "address",
    help: "Address the HTTP endpoint listens on (OVMS spelling of --http-address).",
  },
  {
    name: "grpc_bind_address",
    value: "address",
    help: "Address the gRPC endpoint listens on (OVMS spelling of --grpc-address).",
  },
  {
    name: "metrics_enable",
    boolean: true,
    help: "Serve GET /metrics on the REST port, with OVMS's metric families besides seqserve's, as OVMS.",
  },
  {
    name: "allowed_origins",
    value: "origins",
    help: "Web origins whose pages may call the API, separated by commas; '*' any (OVMS spelling of --cors-allow-origin). Unlike OVMS, none by default.",
  },
  {
    name: "allow_credentials",
    boolean: true,
    help: "Accepted with a notice: seqserve's CORS answers do not allow credentials (a page sends its API key in a header).",
  },
  {
    name: "metrics_list",
    value: "names",
    help: "OVMS's metric families to serve, separated by commas (with --metrics_enable); default: OVMS's default list.",
  },
  {
    name: "add_to_config",
    boolean: true,
    help: "Lists the model --model_name (base path --model_path, or its folder in --model_repository_path) in the --config_path file, creating it if need be, and exits.",
  },
  {
    name: "remove_from_config",
    boolean: true,
    help: "Takes the model --model_name out of the --config_path file, and exits.",
  },
  {
    name: "model_repository_path",
    value: "dir",
    help: "With --add_to_config: the folder holding the model's folder (default: $OVMS_MODEL_REPOSITORY_PATH, whose config.json is then the default --config_path).",
  },
  {
    name: "list_models",
    boolean: true,
    help: "Refused: it lists the generative models OVMS pulls, and seqserve pulls none.",
  },
];

/** Flags OVMS has that do not apply to seqserve: accepted with a notice saying why. */
export const OVMS_IGNORED_FLAGS: Readonly<Record<string, string>> = {
  target_device: "seqserve runs ONNX models on the CPU",
  nireq: "each instance runs one batch at a time; batches span sequences instead",
  batch_size: "ONNX models keep the batch dimension their file declares",
  shape: "ONNX models keep the shapes their file declares",
  layout: "ONNX models keep the layout their file declares",
  plugin_config: "it configures OpenVINO devices",
  cache_dir: "it caches compiled OpenVINO models",
  cpu_extension: "it loads OpenVINO extensions",
  grpc_workers: "grpc-js serves every call on one thread",
  rest_workers: "fastify serves every request on one thread",
  grpc_max_threads: "grpc-js serves every call on one thread",
  grpc_memory_quota: "the gRPC message limit is --grpc-max-message-bytes",
  grpc_channel_arguments: "gRPC settings are --grpc-keepalive-time and --grpc-max-message-bytes",
  custom_node_resources_cleaner_interval_seconds: "seqserve has no custom nodes",
  allowed_methods: "CORS allows the methods the API serves (GET, HEAD, POST, DELETE)",
  allowed_headers: "CORS allows the headers the API reads",
  api_key_file:
    "it guards OVMS's generative (OpenAI-style) endpoints, which seqserve does not serve; seqserve's API keys are --api-keys-file",
};

/**
 * `values` with OVMS's --allowed_origins (a comma-separated list) added to
 * --cors-allow-origin, which checks and applies them.
 */
export function withOvmsOrigins(values: Values): Values {
  const given = values.allowed_origins;
  if (given === undefined) return values;
  const origins = (Array.isArray(given) ? given : [given])
    .flatMap((list) => list.split(","))
    .map((origin) => origin.trim())
    .filter((origin) => origin !== "");
  const cors = values["cors-allow-origin"];
  return {
    ...values,
    "cors-allow-origin": [...(cors === undefined ? [] : Array.isArray(cors) ? cors : [cors]), ...origins],
  };
}

/** OVMS's log level names. */
const LOG_LEVEL_OF: Readonly<Record<string, LogLevel>> = {
  TRACE: "trace",
  DEBUG: "debug",
  INFO: "info",
  WARNING: "warn",
  ERROR: "error",
};

export interface OvmsSettings {
  /** undefined: the OVMS port flags were not used. Otherwise the ports they give (undefined = off). */
  readonly ports: { readonly grpc: number | undefined; readonly http: number | undefined } | undefined;
  readonly metricsEnable: boolean;
  /** `--metrics_list`'s names; undefined when not given or empty (OVMS's default list). */
  readonly metricsList: string[] | undefined;
  readonly singleModel: SingleModelOptions | undefined;
  readonly configPollSecs: number;
  readonly sequenceCleanerPollWaitMinutes: number;
  readonly logLevel: LogLevel | undefined;
  /** --log_path: the log goes to this file. */
  readonly logPath: string | undefined;
  /** --grpc_bind_address / --rest_bind_address: the address each endpoint listens on. */
  readonly grpcBindAddress: string | undefined;
  readonly restBindAddress: string | undefined;
  /** One line per accepted flag that has no effect. */
  readonly notices: readonly string[];
}

type Values = Readonly<Record<string, string | string[] | undefined>>;

function integer(name: string, value: string, max = Number.MAX_SAFE_INTEGER): number {
  if (!/^\d+$/.test(value) || Number(value) > max) {
    throw new UsageError(`--${name} expects a whole number between 0 and ${max}, got '${value}'`);
  }
  return Number(value);
}

const STATEFUL_ONLY = [
  "max_sequence_number",
  "idle_sequence_cleanup",
  "low_latency_transformation",
  "state_pairs",
];

function singleModel(
  values: Values,
  text: (name: string) => string | undefined,
): SingleModelOptions | undefined {
  const path = text("model_path");
  const name = text("model_name");
  if (path === undefined && name === undefined) {
    for (const flag of ["stateful", ...STATEFUL_ONLY, "model_version_policy"]) {
      if (values[flag] !== undefined)
        throw new UsageError(`--${flag} applies to a model given with --model_path`);
    }
    return undefined;
  }
  if (path === undefined || name === undefined || name === "") {
    throw new UsageError("single-model mode needs both --model_path <dir> and --model_name <name>");
  }
  const basePath = resolve(path);
  let isDirectory = false;
  try {
    isDirectory = statSync(basePath).isDirectory();
  } catch {}
  if (!isDirectory) throw new UsageError(`--model_path '${path}' is not a directory`);
  const stateful = text("stateful") !== undefined && flagBoolean("stateful", text("stateful")!);
  if (!stateful) {
    for (const flag of STATEFUL_ONLY) {
      if (values[flag] !== undefined)
        throw new UsageError(`--${flag} applies to stateful models only: add --stateful`);
    }
  }
  const maxSequenceNumber = text("max_sequence_number");
  const idle = text("idle_sequence_cleanup");
  const lowLatency = text("low_latency_transformation");
  const statePairs = text("state_pairs");
  const policy = text("model_version_policy");
  return {
    name,
    basePath,
    stateful,
    ...(maxSequenceNumber === undefined
      ? {}
      : { maxSequenceNumber: integer("max_sequence_number", maxSequenceNumber, 2 ** 32 - 1) }),
    ...(idle === undefined ? {} : { idleSequenceCleanup: flagBoolean("idle_sequence_cleanup", idle) }),
    ...(lowLatency === undefined
      ? {}
      : { lowLatencyTransformation: flagBoolean("low_latency_transformation", lowLatency) }),
    ...(statePairs === undefined ? {} : { statePairs }),
    ...(policy === undefined ? {} : { modelVersionPolicy: policy }),
  };
}

/**
 * One address to bind: OVMS takes a list separated by commas, seqserve binds an endpoint
 * to one, so a list is refused as the command line is read (not after the models load).
 */
function bindAddress(flag: string, value: string | undefined): string | undefined {
  if (value === undefined || !value.includes(",")) return value;
  throw new UsageError(
    `--${flag} '${value}' lists several addresses: seqserve binds an endpoint to one ('::' serves IPv4 and IPv6 both)`,
  );
}

/** Reads the OVMS flags among parsed `values` (each flag given at most once). */
export function readOvmsFlags(values: Values): OvmsSettings {
  const text = (name: string): string | undefined => {
    const value = values[name];
    if (!Array.isArray(value)) return value;
    if (value.length > 1) throw new UsageError(`--${name} is given more than once`);
    return value[0];
  };
  const port = text("port");
  const restPort = text("rest_port");
  const ports =
    port === undefined && restPort === undefined
      ? undefined
      : {
          grpc: port === undefined || port === "0" ? undefined : integer("port", port, 65535),
          http:
            restPort === undefined || restPort === "0" ? undefined : integer("rest_port", restPort, 65535),
        };
  // OVMS's own checks (Config::validate), in its words.
  if (ports?.grpc !== undefined && ports.grpc === ports.http) {
    throw new UsageError("port and rest_port cannot have the same values");
  }
  const level = text("log_level");
  let logLevel: LogLevel | undefined;
  if (level !== undefined) {
    logLevel = LOG_LEVEL_OF[level.toUpperCase()];
    if (logLevel === undefined) {
      throw new UsageError(`--log_level must be one of TRACE, DEBUG, INFO, WARNING, ERROR, got '${level}'`);
    }
  }
  const notices: string[] = [];
  for (const [flag, why] of Object.entries(OVMS_IGNORED_FLAGS)) {
    if (values[flag] !== undefined) notices.push(`--${flag} has no effect in seqserve: ${why}`);
  }
  const credentials = text("allow_credentials");
  if (credentials !== undefined && flagBoolean("allow_credentials", credentials)) {
    notices.push(
      "--allow_credentials has no effect in seqserve: its CORS answers do not allow credentials (a page sends its API key in a header)",
    );
  }
  const model = singleModel(values, text);
  if (model?.lowLatencyTransformation === true) {
    notices.push("--low_latency_transformation has no effect in seqserve: it is an OpenVINO transformation");
  }
  const metrics = text("metrics_enable");
  return {
    ports,
    metricsEnable: metrics !== undefined && flagBoolean("metrics_enable", metrics),
    metricsList: text("metrics_list") === undefined ? undefined : metricsListFlag(text("metrics_list")!),
    singleModel: model,
    configPollSecs: integer("file_system_poll_wait_seconds", text("file_system_poll_wait_seconds") ?? "1"),
    sequenceCleanerPollWaitMinutes: integer(
      "sequence_cleaner_poll_wait_minutes",
      text("sequence_cleaner_poll_wait_minutes") ?? "5",
    ),
    logLevel,
    logPath: text("log_path"),
    grpcBindAddress: bindAddress("grpc_bind_address", text("grpc_bind_address")),
    restBindAddress: bindAddress("rest_bind_address", text("rest_bind_address")),
    notices,
  };
}

/**
 * OVMS's metric families to serve, from `--metrics_enable` / `--metrics_list` or the
 * `monitoring` section of the config files, with OVMS's refusals; undefined when off.
 */
export function readOvmsMetrics(
  ovms: OvmsSettings,
  configFiles: readonly string[],
  restPort: number | undefined,
): OvmsMetricsSettings | undefined {
  if (ovms.metricsList !== undefined && !ovms.metricsEnable) {
    throw new UsageError("metrics_enable setting is missing, required when metrics_list is provided");
  }
  let monitoring: OvmsMonitoring | undefined;
  try {
    for (const file of configFiles) monitoring ??= ovmsMonitoring(readFileSync(file, "utf8"));
    if (monitoring !== undefined && ovms.metricsEnable) {
      throw new UsageError("Metrics configuration duplicated in configuration file and CLI parameters");
    }
    let settings: OvmsMetricsSettings | undefined;
    if (ovms.metricsEnable) {
      settings = ovmsMetricsSettings(ovms.metricsList);
      if (restPort === undefined) {
        throw new UsageError("rest_port setting is missing, metrics are enabled on rest port");
      }
    } else if (monitoring?.enable === true) {
      settings = ovmsMetricsSettings(monitoring.list);
      if (restPort === undefined) throw new UsageError("Missing rest_port parameter in server CLI");
    }
    return settings;
  } catch (error) {
    if (error instanceof OvmsMetricsConfigError) throw new UsageError(error.message);
    throw error;
  }
}
