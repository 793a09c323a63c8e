import { statSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { BackendConfigError, readBackendConfig } from "../config/backend-config.ts";
import {
  DEFAULT_SERVER_OPTIONS,
  MAX_SESSION_TTL_SECS,
  type ModelControlMode,
  type ServerOptions,
} from "../config/server-options.ts";
import { LOG_LEVELS, type LogFormat, type LogLevel } from "../observability/logger.ts";
import { flagBoolean } from "./flag-boolean.ts";
import { oneOf } from "./flag-choice.ts";
import { type OvmsConfigEdit, readOvmsConfigEdit } from "./ovms-config-edit.ts";
import {
  OVMS_FLAGS,
  OVMS_IGNORED_FLAGS,
  readOvmsFlags,
  readOvmsMetrics,
  withOvmsOrigins,
} from "./ovms-flags.ts";
import {
  checkServeRepositories,
  prepareServeRepository,
  readInferenceType,
  readPingMode,
  SAGEMAKER_FLAGS,
  serveArgs,
  serveDefaults,
} from "./sagemaker-options.ts";
import { readStateStore, SCALE_FLAGS } from "./scale-options.ts";
import { readSecurityOptions, SECURITY_FLAGS } from "./security-options.ts";
import { OTHER_TRITON_FLAGS, readTritonFlags, TRITON_FLAGS, tritonFlagNames } from "./triton-options.ts";
import { asUsageError, UsageError } from "./usage-error.ts";

// argv → ServerOptions. Flags keep Triton's spelling so existing launch scripts work;
// every value is checked here, and a bad one stops the server with a message naming it.

export { UsageError };

export interface FlagSpec {
  readonly name: string;
  readonly value?: string;
  readonly multiple?: boolean;
  readonly boolean?: boolean;
  readonly help: string;
  readonly default?: string;
}

export const FLAGS: readonly FlagSpec[] = [
  {
    name: "model-repository",
    value: "dir",
    multiple: true,
    help: "Triton-style model repository to serve (repeatable). Alias: --model-store.",
  },
  {
    name: "config-path",
    value: "file",
    multiple: true,
    help: "OpenVINO Model Server config.json (model_config_list) to serve (repeatable).",
  },
  {
    name: "host",
    value: "address",
    default: DEFAULT_SERVER_OPTIONS.host,
    help: "Address every endpoint binds to.",
  },
  { name: "http-port", value: "port", default: "8000", help: "KServe v2 HTTP port; 0 picks a free port." },
  { name: "grpc-port", value: "port", default: "8001", help: "KServe v2 gRPC port; 0 picks a free port." },
  {
    name: "metrics-port",
    value: "port",
    default: "8002",
    help: "Prometheus metrics port (GET /metrics); 0 picks a free port.",
  },
  { name: "allow-http", boolean: true, default: "true", help: "Serve HTTP." },
  { name: "allow-grpc", boolean: true, default: "true", help: "Serve gRPC." },
  { name: "allow-metrics", boolean: true, default: "true", help: "Serve metrics." },
  ...SAGEMAKER_FLAGS,
  ...SCALE_FLAGS,
  { name: "log-level", value: LOG_LEVELS.join("|"), default: "info", help: "Least severe level logged." },
  {
    name: "log-format",
    value: "json|default|ISO8601|text",
    help:
      "json: one JSON object per line; default (or text) and ISO8601: Triton's records in its two formats, " +
      "warnings and errors on standard error. Without the flag: default when standard output is a terminal, else json.",
  },
  {
    name: "strict-model-config",
    boolean: true,
    default: "false",
    help: "Require a complete config.pbtxt; when false a missing or partial config is completed from the ONNX model. Triton's deprecated spelling of --disable-auto-complete-config: given, it is warned about as Triton warns.",
  },
  {
    name: "model-control-mode",
    value: "none|explicit|poll",
    default: "none",
    help: "none: load every model at start; explicit: load only --load-model models and via the repository API; poll: also follow repository changes.",
  },
  {
    name: "load-model",
    value: "name",
    multiple: true,
    help: "In explicit mode, a model to load at start (repeatable; '*' = all).",
  },
  {
    name: "repository-poll-secs",
    value: "seconds",
    default: "15",
    help: "How often poll mode rescans the repositories (0: load once, never rescan).",
  },
  {
    name: "exit-timeout-secs",
    value: "seconds",
    default: "30",
    help: "On shutdown, how long live sequences and requests may finish (with --state-store, how long the accepted steps may finish and be written: the sequences are handed over to the other replicas, not ended).",
  },
  {
    name: "http-max-body-bytes",
    value: "bytes",
    default: String(DEFAULT_SERVER_OPTIONS.httpBodyLimitBytes),
    help: "Largest HTTP request body (after decompression); larger bodies get 413.",
  },
  {
    name: "grpc-max-message-bytes",
    value: "bytes",
    default: String(DEFAULT_SERVER_OPTIONS.grpcMaxMessageBytes),
    help: "Largest gRPC message received or sent.",
  },
  {
    name: "grpc-keepalive-time",
    value: "ms",
    default: String(DEFAULT_SERVER_OPTIONS.grpcKeepaliveTimeMs),
    help: "gRPC keepalive ping interval.",
  },
  {
    name: "grpc-keepalive-timeout",
    value: "ms",
    default: String(DEFAULT_SERVER_OPTIONS.grpcKeepaliveTimeoutMs),
    help: "gRPC keepalive ping timeout.",
  },
  {
    name: "grpc-max-inflight-per-stream",
    value: "n",
    default: String(DEFAULT_SERVER_OPTIONS.grpcMaxInflightPerStream),
    help: "Requests a ModelStreamInfer stream may have in flight before the server stops reading it; requests waiting for a sequence slot (bounded by --max-queued-start-bytes) and answered ones waiting for their turn are not counted.",
  },
  {
    name: "http-stream-max-inflight",
    value: "n",
    default: String(DEFAULT_SERVER_OPTIONS.httpStreamMaxInflight),
    help: "Messages a WebSocket sequence stream (GET /v2/models/{m}/stream) may have unanswered before the server stops reading it.",
  },
  {
    name: "backend-config",
    value: "backend,setting=value",
    multiple: true,
    help:
      "Triton's backend settings (repeatable): onnxruntime,default-max-batch-size=N (or default-max-batch-size=N) " +
      "sets the max_batch_size autocomplete gives; stateful,ort-logging-level=0..4 sets ONNX Runtime's log level " +
      "for models of backend 'stateful'. Other settings are accepted with a notice.",
  },
  {
    name: "model-load-thread-count",
    value: "n",
    default: String(DEFAULT_SERVER_OPTIONS.modelLoadThreadCount),
    help: "How many models load at the same time.",
  },
  {
    name: "onnx-worker-threads",
    value: "n",
    default: String(DEFAULT_SERVER_OPTIONS.onnxWorkerThreads),
    help:
      "Worker threads that ONNX model instances run on, by default one per CPU: an instance has " +
      "a thread of its own up to n, then instances share them and take turns. 0: a thread per instance.",
  },
  ...TRITON_FLAGS,
  ...SECURITY_FLAGS,
  { name: "help", boolean: true, help: "Show this help and exit." },
  { name: "version", boolean: true, help: "Show the version and exit." },
];

const BOOLEAN_FLAGS = new Set(
  [...FLAGS, ...OTHER_TRITON_FLAGS, ...OVMS_FLAGS].filter((f) => f.boolean === true).map((f) => f.name),
);

export function helpText(version: string): string {
  const lines = [
    `seqserve ${version}: an inference server for stateful models (KServe v2 / Triton HTTP and gRPC)`,
    "",
    "Usage: seqserve --model-repository <dir> [options]",
    "       seqserve serve [options]     a SageMaker container: SageMaker API on $SAGEMAKER_BIND_TO_PORT",
    "                                    (default 8080), models from /opt/ml/model, other endpoints off",
    "       seqserve bench --model <name> (--model-repository <dir> | --url <http://host:port>) [options]",
    "                                    load a model through one protocol and report its throughput and",
    "                                    latency (seqserve bench --help lists its options)",
    "",
    "Options (also --name=value):",
  ];
  for (const flag of FLAGS) {
    const left = `  --${flag.name}${flag.value ? ` <${flag.value}>` : flag.boolean && flag.name !== "help" && flag.name !== "version" ? "[=true|false]" : ""}`;
    const def = flag.default !== undefined ? ` (default: ${flag.default})` : "";
    lines.push(left, `      ${flag.help}${def}`);
  }
  lines.push("", "OpenVINO Model Server's flags (--config_path is --config-path):");
  for (const flag of OVMS_FLAGS) {
    const left = `  --${flag.name}${flag.value ? ` <${flag.value}>` : "[=true|false]"}`;
    const def = flag.default !== undefined ? ` (default: ${flag.default})` : "";
    lines.push(left, `      ${flag.help}${def}`);
  }
  lines.push(
    "  Accepted without effect (a notice says why):",
    ...wrap(Object.keys(OVMS_IGNORED_FLAGS).map((f) => `--${f}`)),
  );
  lines.push(
    "",
    "Accepted from Triton launch scripts with a one-line notice that they have no effect here (or, where",
    "running without them would mislead, refused with the reason):",
    ...wrap(OTHER_TRITON_FLAGS.map((f) => `--${f.name}`)),
  );
  return lines.join("\n");
}

/** Words on lines of at most 100 characters, indented. */
function wrap(words: readonly string[]): string[] {
  const lines: string[] = [];
  let line = " ";
  for (const word of words) {
    if (line.length + word.length + 1 > 100) {
      lines.push(line);
      line = " ";
    }
    line += ` ${word}`;
  }
  if (line.trim() !== "") lines.push(line);
  return lines;
}

/**
 * Boolean flags may be given bare (--strict-model-config) or with a value, joined or not
 * (--strict-model-config=false, --strict-model-config false); a flag takes a negative number
 * as its value.
 */
function normalizeFlags(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const name = arg.startsWith("--") ? arg.slice(2) : "";
    const next = argv[i + 1];
    if (BOOLEAN_FLAGS.has(name)) {
      if (next !== undefined && /^(true|false|on|off|1|0)$/i.test(next)) {
        out.push(`${arg}=${next}`);
        i++;
      } else out.push(`${arg}=true`);
    } else if (name !== "" && !name.includes("=") && next !== undefined && /^-\d/.test(next)) {
      // A negative value, as Triton takes it (`--trace-count -1`).
      out.push(`${arg}=${next}`);
      i++;
    } else out.push(arg);
  }
  return out;
}

function parseInteger(name: string, value: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!/^\d+$/.test(value)) throw new UsageError(`--${name} expects a whole number, got '${value}'`);
  const n = Number(value);
  if (n < min || n > max) throw new UsageError(`--${name} must be between ${min} and ${max}, got ${value}`);
  return n;
}

/** A whole number, negative ones included, raised to `min` when below it (Triton's clamps). */
function clampedInteger(name: string, value: string, min: number): number {
  if (!/^-?\d+$/.test(value)) throw new UsageError(`--${name} expects a whole number, got '${value}'`);
  const n = Number(value);
  if (!Number.isSafeInteger(n)) throw new UsageError(`--${name} is out of range, got ${value}`);
  return Math.max(min, n);
}

function checkDirectory(path: string): string {
  const absolute = resolve(path);
  let isDirectory = false;
  try {
    isDirectory = statSync(absolute).isDirectory();
  } catch {
    throw new UsageError(`model repository '${path}' does not exist`);
  }
  if (!isDirectory) throw new UsageError(`model repository '${path}' is not a directory`);
  return absolute;
}

function checkFile(path: string): string {
  const absolute = resolve(path);
  try {
    if (statSync(absolute).isFile()) return absolute;
  } catch {}
  throw new UsageError(`config file '${path}' does not exist`);
}

/** `default` is Triton's name for its text format. */
function logFormat(value: string): LogFormat {
  const format = oneOf("--log-format", value, ["json", "text", "default", "ISO8601"] as const);
  return format === "default" ? "text" : format;
}

export type CliCommand =
  | { kind: "help" }
  | { kind: "version" }
  | { kind: "serve"; options: ServerOptions }
  /** OVMS's --add_to_config / --remove_from_config: edit a config.json, serve nothing. */
  | { kind: "ovms-config"; edit: OvmsConfigEdit };

export interface CommandLineContext {
  /** Standard output is a terminal: logs default to text rather than JSON. */
  readonly terminal?: boolean;
}

/**
 * `env` is read by the `serve` command (SageMaker's container conventions), by the trace
 * settings (OTEL_BSP_*, OTEL_RESOURCE_ATTRIBUTES, as Triton reads them) and by --api-keys-env.
 */
export function parseCommandLine(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>> = {},
  context: CommandLineContext = {},
): CliCommand {
  const serve = argv[0] === "serve";
  const defaults: Readonly<Record<string, string>> = serve ? serveDefaults(env) : {};
  if (serve) argv = serveArgs(argv.slice(1), env);
  const options: Record<string, { type: "string"; multiple?: boolean }> = {};
  for (const flag of FLAGS)
    options[flag.name] = flag.multiple ? { type: "string", multiple: true } : { type: "string" };
  options["model-store"] = { type: "string", multiple: true };
  options.config_path = { type: "string", multiple: true };
  for (const flag of OVMS_FLAGS) options[flag.name] = { type: "string", multiple: true };
  for (const flag of Object.keys(OVMS_IGNORED_FLAGS)) options[flag] = { type: "string", multiple: true };
  for (const flag of tritonFlagNames()) options[flag.name] ??= { type: "string", multiple: flag.multiple };
  let values: Record<string, string | string[] | undefined>;
  try {
    ({ values } = parseArgs({
      args: normalizeFlags(argv),
      options,
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    throw new UsageError(
      error instanceof Error ? error.message.replace(/\. To specify.*$/s, "") : String(error),
    );
  }
  const str = (name: string): string | undefined => values[name] as string | undefined;
  const list = (name: string): string[] => (values[name] as string[] | undefined) ?? [];
  const flagDefault = (name: string): string => FLAGS.find((f) => f.name === name)!.default!;
  const get = (name: string): string => str(name) ?? defaults[name] ?? flagDefault(name);

  if (str("help") !== undefined && flagBoolean("help", str("help")!)) return { kind: "help" };
  if (str("version") !== undefined && flagBoolean("version", str("version")!)) return { kind: "version" };
  // Before the files are checked: an add creates a config file that is not there yet.
  const edit = readOvmsConfigEdit(values, env);
  if (edit !== undefined) return { kind: "ovms-config", edit };

  const given = [...list("model-repository"), ...list("model-store")];
  if (given.length === 0 && serve) prepareServeRepository(defaults["model-repository"]!, env);
  const repositories = (given.length === 0 && serve ? [defaults["model-repository"]!] : given).map(
    checkDirectory,
  );
  if (serve) checkServeRepositories(repositories, env);
  const ovmsConfigs = [...list("config-path"), ...list("config_path")].map(checkFile);
  const ovms = readOvmsFlags(values);
  if (repositories.length === 0 && ovmsConfigs.length === 0 && ovms.singleModel === undefined) {
    throw new UsageError(
      "no models to serve: give --model-repository <dir> (or --config-path <config.json>, or --model_path <dir> --model_name <name>)",
    );
  }
  let backendConfig: ReturnType<typeof readBackendConfig>;
  try {
    backendConfig = readBackendConfig(list("backend-config"));
  } catch (error) {
    if (error instanceof BackendConfigError) throw new UsageError(error.message);
    throw error;
  }
  const port = (name: string, allow: string): number | undefined =>
    flagBoolean(allow, get(allow)) ? parseInteger(name, get(name), 0, 65535) : undefined;
  // With OVMS's --port / --rest_port, an endpoint without a port is off, as in OVMS,
  // unless seqserve's own flag gives it one; metrics only with --metrics_enable.
  const ovmsPort = (flag: string, allow: string, ovmsValue: number | undefined): number | undefined =>
    str(flag) !== undefined ? port(flag, allow) : ovmsValue;
  const ports =
    ovms.ports === undefined
      ? {
          http: port("http-port", "allow-http"),
          grpc: port("grpc-port", "allow-grpc"),
          metrics: port("metrics-port", "allow-metrics"),
        }
      : {
          http: ovmsPort("http-port", "allow-http", ovms.ports.http),
          grpc: ovmsPort("grpc-port", "allow-grpc", ovms.ports.grpc),
          // OVMS serves its metrics on the REST port (metricsOnHttpPort); a metrics port of
          // its own only when asked for.
          metrics: str("metrics-port") !== undefined ? port("metrics-port", "allow-metrics") : undefined,
        };

  if (ovms.ports !== undefined && ports.http === undefined && ports.grpc === undefined) {
    // OVMS's words: a server listening on nothing is refused.
    throw new UsageError("port and rest_port cannot both be unset");
  }
  const ovmsMetrics = readOvmsMetrics(ovms, ovmsConfigs, ports.http);
  /** A launch with OVMS's config.json alone (no Triton repository beside it). */
  const ovmsOnly = ovmsConfigs.length > 0 && given.length === 0;
  const serverOptions: ServerOptions = {
    ...DEFAULT_SERVER_OPTIONS,
    modelRepositories: repositories,
    ovmsConfigs,
    singleModel: ovms.singleModel,
    // OVMS starts whatever models of its config.json fail to load, serves the others and
    // loads the rest when their folders are ready: so does a launch with config.json alone
    // (beside a Triton repository, Triton's rule holds; --exit-on-error decides either way).
    exitOnError: ovmsOnly ? false : DEFAULT_SERVER_OPTIONS.exitOnError,
    // OVMS is ready once it serves, whichever models failed (Server::isReady): so is such a
    // launch, or its readiness probe would never pass (--strict-readiness decides either way).
    strictReadiness: ovmsOnly ? false : DEFAULT_SERVER_OPTIONS.strictReadiness,
    configPollSecs: ovms.configPollSecs,
    sequenceCleanerPollWaitMinutes: ovms.sequenceCleanerPollWaitMinutes,
    host: get("host"),
    // OVMS's spellings; Triton's --http-address, --grpc-address and --log-file win over them.
    httpAddress: ovms.restBindAddress,
    grpcAddress: ovms.grpcBindAddress,
    metricsAddress: ovms.restBindAddress,
    metricsOnHttpPort: ovmsMetrics !== undefined,
    ovmsMetrics,
    logFile: ovms.logPath,
    httpPort: ports.http,
    grpcPort: ports.grpc,
    metricsPort: ports.metrics,
    logLevel:
      str("log-level") === undefined && ovms.logLevel !== undefined
        ? ovms.logLevel
        : oneOf<LogLevel>("log-level", get("log-level"), LOG_LEVELS),
    logFormat: logFormat(str("log-format") ?? (context.terminal === true ? "text" : "json")),
    strictModelConfig: flagBoolean("strict-model-config", get("strict-model-config")),
    // Triton reads the mode in any case.
    modelControlMode: oneOf<ModelControlMode>("model-control-mode", get("model-control-mode").toLowerCase(), [
      "none",
      "explicit",
      "poll",
    ]),
    // `serve`'s default model is loaded in explicit mode (a mode given as a flag wins), with
    // any --load-model beside it: Triton's image passes it as one, and the flag adds up
    // (SAGEMAKER_TRITON_ADDITIONAL_ARGS="--load-model=…" loads the models it calls).
    loadModels: [
      ...new Set([
        ...(defaults["load-model"] !== undefined && get("model-control-mode").toLowerCase() === "explicit"
          ? [defaults["load-model"]]
          : []),
        ...list("load-model"),
      ]),
    ],
    // 0: poll mode loads the repository once and never looks again, as Triton's does.
    repositoryPollSecs: parseInteger("repository-poll-secs", get("repository-poll-secs"), 0),
    exitTimeoutSecs: clampedInteger("exit-timeout-secs", get("exit-timeout-secs"), 0),
    httpBodyLimitBytes: parseInteger("http-max-body-bytes", get("http-max-body-bytes"), 1),
    grpcMaxMessageBytes: parseInteger(
      "grpc-max-message-bytes",
      get("grpc-max-message-bytes"),
      1,
      2 ** 31 - 1,
    ),
    grpcKeepaliveTimeMs: parseInteger("grpc-keepalive-time", get("grpc-keepalive-time"), 1),
    grpcKeepaliveTimeoutMs: parseInteger("grpc-keepalive-timeout", get("grpc-keepalive-timeout"), 1),
    grpcMaxInflightPerStream: parseInteger(
      "grpc-max-inflight-per-stream",
      get("grpc-max-inflight-per-stream"),
      1,
    ),
    httpStreamMaxInflight: parseInteger("http-stream-max-inflight", get("http-stream-max-inflight"), 1),
    backendSettings: backendConfig.settings,
    modelLoadThreadCount: clampedInteger("model-load-thread-count", get("model-load-thread-count"), 1),
    onnxWorkerThreads: parseInteger("onnx-worker-threads", get("onnx-worker-threads"), 0),
    // One line each, logged at start, for flags accepted without effect.
    notices: [...ovms.notices, ...backendConfig.notices],
    // Triton's own warning for the flag, which it still honours (command_line_parser.cc).
    warnings:
      str("strict-model-config") === undefined
        ? []
        : [
            "Warning: '--strict-model-config' has been deprecated! Please use '--disable-auto-complete-config' instead.",
          ],
    sagemakerPort: port("sagemaker-port", "allow-sagemaker"),
    sagemakerModel: str("sagemaker-model") ?? defaults["sagemaker-model"],
    sagemakerSessionTtlSecs: parseInteger(
      "sagemaker-session-ttl-secs",
      get("sagemaker-session-ttl-secs"),
      1,
      MAX_SESSION_TTL_SECS,
    ),
    sagemakerInferenceType: readInferenceType(str("sagemaker-inference-type"), env),
    sagemakerPingMode: readPingMode(str("sagemaker-ping-mode") ?? defaults["sagemaker-ping-mode"], env),
    stateStore: readStateStore(get("state-store")),
    security: readSecurityOptions(withOvmsOrigins(values), env),
  };
  if (serverOptions.loadModels.length > 0 && serverOptions.modelControlMode !== "explicit") {
    throw new UsageError("--load-model requires --model-control-mode=explicit");
  }
  if (serverOptions.loadModels.includes("*") && serverOptions.loadModels.some((name) => name !== "*")) {
    // Triton's words: its core refuses the mix rather than load everything.
    throw new UsageError("Wildcard model name '*' must be the ONLY startup model if specified at all.");
  }
  try {
    return { kind: "serve", options: Object.freeze(readTritonFlags(values, serverOptions, env)) };
  } catch (error) {
    throw asUsageError(error);
  }
}
