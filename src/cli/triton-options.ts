import { DEFAULT_METRICS_SETTINGS, readMetricsConfig } from "../config/metrics-config.ts";
import type { ServerOptions } from "../config/server-options.ts";
import { readBoolean, readWholeNumber } from "../config/setting-flag.ts";
import { readTraceConfig } from "../config/trace-config.ts";
import type { LogLevel } from "../observability/logger.ts";
import type { FlagSpec } from "./options.ts";
import { UsageError } from "./usage-error.ts";

// The rest of `tritonserver --help`, so a Triton launch script runs unchanged: every flag
// is honoured with Triton's spelling and values, accepted with a one-line notice saying
// why it has no effect here, or refused with the reason when running without it would
// mislead (an endpoint seqserve does not have). README.md has the whole table.

const INT32_MAX = 2 ** 31 - 1;

/** Triton's flags seqserve honours beyond the ones options.ts defines (shown in --help). */
export const TRITON_FLAGS: readonly FlagSpec[] = [
  {
    name: "id",
    value: "name",
    default: "seqserve",
    help: "The server's name in GET /v2 and ServerMetadata.",
  },
  {
    name: "exit-on-error",
    boolean: true,
    default: "true",
    help: "A model that fails to load at start stops the start (exit code 1); false: serve the others.",
  },
  {
    name: "strict-readiness",
    boolean: true,
    default: "true",
    help: "Ready (GET /v2/health/ready, /ping) only while every model is ready; false: while the server runs.",
  },
  {
    name: "disable-auto-complete-config",
    boolean: true,
    help: "Same as --strict-model-config=true: configs are not completed from the model file.",
  },
  {
    name: "allow-client-shm",
    boolean: true,
    default: "false",
    help: "Clients may register system shared memory regions (POSIX shared memory in /dev/shm) and pass tensors through them.",
  },
  {
    name: "model-config-name",
    value: "name",
    help: "Read <model>/configs/<name>.pbtxt instead of config.pbtxt where it exists.",
  },
  {
    name: "model-load-retry-count",
    value: "n",
    default: "0",
    help: "How many more times a model whose load failed is tried.",
  },
  { name: "http-address", value: "address", help: "Address the HTTP endpoint binds to (default: --host)." },
  { name: "grpc-address", value: "address", help: "Address the gRPC endpoint binds to (default: --host)." },
  {
    name: "metrics-address",
    value: "address",
    help: "Address the metrics endpoint binds to (default: --http-address, else --host).",
  },
  { name: "http-max-input-size", value: "bytes", help: "Triton's name for --http-max-body-bytes." },
  {
    name: "log-verbose",
    value: "n",
    default: "0",
    help: "1: debug messages, 2 or more: trace messages too (unless --log-level is given).",
  },
  {
    name: "log-info",
    boolean: true,
    default: "true",
    help: "Log info messages (unless --log-level is given).",
  },
  {
    name: "log-warning",
    boolean: true,
    default: "true",
    help: "Log warnings (unless --log-level is given).",
  },
  { name: "log-error", boolean: true, default: "true", help: "Log errors (unless --log-level is given)." },
  { name: "log-file", value: "file", help: "Write the log to this file instead of standard output." },
  {
    name: "allow-cpu-metrics",
    boolean: true,
    default: "true",
    help: "Publish nv_cpu_utilization, nv_cpu_memory_total_bytes and nv_cpu_memory_used_bytes.",
  },
  {
    name: "metrics-interval-ms",
    value: "ms",
    default: String(DEFAULT_METRICS_SETTINGS.intervalMs),
    help: "How often the CPU metrics are sampled.",
  },
  {
    name: "metrics-config",
    value: "setting=value",
    multiple: true,
    help:
      "counter_latencies=true|false (nv_inference_*_duration_us), summary_latencies=true|false " +
      "(nv_inference_*_summary_us), summary_quantiles=<q>:<error>,..., histogram_latencies=true|false " +
      "(latency histograms; seqserve's default: true). Repeatable.",
  },
  {
    name: "trace-config",
    value: "[mode,]setting=value",
    multiple: true,
    help:
      "Request tracing, Triton's settings: level=OFF|TIMESTAMPS|TENSORS, rate=N (one request in N; 0: only " +
      "requests carrying a trace context), count=N, mode=triton|opentelemetry; opentelemetry,url=<OTLP/HTTP " +
      "endpoint>, opentelemetry,resource=<key>=<value>, opentelemetry,bsp_max_queue_size|bsp_schedule_delay|" +
      "bsp_max_export_batch_size=N; triton,file=<path>, triton,log-frequency=N. Repeatable.",
  },
  {
    name: "grpc-keepalive-permit-without-calls",
    boolean: true,
    default: "false",
    help: "Passed to grpc-js (grpc.keepalive_permit_without_calls); its server accepts client pings either way.",
  },
  {
    name: "grpc-max-connection-age",
    value: "ms",
    help: "Close each gRPC connection after this long (then --grpc-max-connection-age-grace).",
  },
  {
    name: "grpc-max-connection-age-grace",
    value: "ms",
    help: "How long calls may go on after --grpc-max-connection-age.",
  },
  {
    name: "sagemaker-safe-port-range",
    value: "low-high",
    help: "The ports the other endpoints may use beside the SageMaker endpoint (checked at start).",
  },
  { name: "trace-file", value: "file", help: "Deprecated by Triton: --trace-config triton,file=<file>." },
  {
    name: "trace-level",
    value: "level",
    multiple: true,
    help: "Deprecated by Triton: --trace-config level=<level>.",
  },
  { name: "trace-rate", value: "n", help: "Deprecated by Triton: --trace-config rate=<n>." },
  { name: "trace-count", value: "n", help: "Deprecated by Triton: --trace-config count=<n>." },
  {
    name: "trace-log-frequency",
    value: "n",
    help: "Deprecated by Triton: --trace-config triton,log-frequency=<n>.",
  },
];

/** What a flag that is not honoured does with a value: a notice, a refusal, or nothing (it asks for what seqserve does). */
type Verdict = { readonly notice: string } | { readonly refuse: string } | undefined;

interface OtherFlag {
  readonly name: string;
  readonly boolean?: boolean;
  readonly multiple?: boolean;
  judge(value: string): Verdict;
}

const isTrue = (name: string, value: string): boolean => readBoolean(`--${name}`, value);

/** A flag that never has an effect here. */
const noEffect = (name: string, why: string, extra: Partial<OtherFlag> = {}): OtherFlag => ({
  name,
  ...extra,
  judge: () => ({ notice: `--${name} has no effect: ${why}` }),
});

/** A boolean flag whose `true` has no effect here (its `false` is what seqserve does). */
const trueHasNoEffect = (name: string, why: string): OtherFlag => ({
  name,
  boolean: true,
  judge: (value) => (isTrue(name, value) ? { notice: `--${name}=true has no effect: ${why}` } : undefined),
});

const NO_GPU = "seqserve runs ONNX Runtime on the CPU";
const THREADS = "requests are read on the main thread, and each model instance runs in its own worker thread";
const NO_CACHE = "seqserve has no response cache; every request runs its model";
const NO_RATE_LIMITER = "seqserve has no rate limiter; a model's instances take batches as they free up";

/** Triton's flags seqserve accepts without effect, or refuses. */
export const OTHER_TRITON_FLAGS: readonly OtherFlag[] = [
  trueHasNoEffect("model-namespacing", "model names must be unique across the repositories"),
  noEffect("enable-peer-access", NO_GPU, { boolean: true }),
  trueHasNoEffect("reuse-http-port", "the HTTP port is bound by this process alone"),
  trueHasNoEffect("reuse-grpc-port", "the gRPC port is bound by this process alone"),
  noEffect("http-header-forward-pattern", "ONNX models take no request parameters"),
  noEffect("grpc-header-forward-pattern", "ONNX models take no request parameters"),
  noEffect("http-thread-count", THREADS),
  noEffect("grpc-infer-thread-count", THREADS),
  noEffect("grpc-infer-allocation-pool-size", "seqserve keeps no pool of request objects"),
  noEffect("grpc-max-response-pool-size", "responses are written as they are ready"),
  {
    name: "grpc-infer-response-compression-level",
    judge: (value) => {
      const level = value.toLowerCase();
      if (!["none", "low", "medium", "high"].includes(level)) {
        throw new UsageError(
          `--grpc-infer-response-compression-level must be none, low, medium or high, got '${value}'`,
        );
      }
      return level === "none"
        ? undefined
        : {
            notice: `--grpc-infer-response-compression-level=${level} has no effect: grpc-js servers do not compress responses`,
          };
    },
  },
  noEffect("grpc-http2-max-pings-without-data", "grpc-js servers do not count pings without data"),
  noEffect("grpc-http2-min-recv-ping-interval-without-data", "grpc-js servers do not police ping intervals"),
  noEffect("grpc-http2-max-ping-strikes", "grpc-js servers do not police ping intervals"),
  noEffect("sagemaker-thread-count", THREADS),
  {
    name: "allow-vertex-ai",
    boolean: true,
    judge: (value) =>
      isTrue("allow-vertex-ai", value)
        ? { refuse: "seqserve has no Vertex AI endpoint; its KServe v2 HTTP API serves the same models" }
        : undefined,
  },
  noEffect("vertex-ai-port", "seqserve has no Vertex AI endpoint"),
  noEffect("vertex-ai-thread-count", "seqserve has no Vertex AI endpoint"),
  noEffect("vertex-ai-default-model", "seqserve has no Vertex AI endpoint"),
  trueHasNoEffect("allow-gpu-metrics", NO_GPU),
  noEffect("cache-config", NO_CACHE, { multiple: true }),
  noEffect("cache-directory", NO_CACHE),
  noEffect("response-cache-byte-size", NO_CACHE),
  {
    name: "rate-limit",
    judge: (value) => {
      const mode = value.toLowerCase();
      if (mode !== "off" && mode !== "execution_count") {
        throw new UsageError(`--rate-limit must be off or execution_count, got '${value}'`);
      }
      return mode === "off"
        ? undefined
        : { notice: `--rate-limit=${mode} has no effect: ${NO_RATE_LIMITER}` };
    },
  },
  noEffect("rate-limit-resource", NO_RATE_LIMITER, { multiple: true }),
  noEffect("pinned-memory-pool-byte-size", NO_GPU),
  noEffect("cuda-memory-pool-byte-size", NO_GPU, { multiple: true }),
  noEffect("cuda-virtual-address-size", NO_GPU, { multiple: true }),
  noEffect("min-supported-compute-capability", NO_GPU),
  noEffect("model-load-gpu-limit", NO_GPU, { multiple: true }),
  noEffect("buffer-manager-thread-count", "tensors are copied by the threads that use them"),
  noEffect("host-policy", "worker threads are placed by the operating system", { multiple: true }),
  noEffect("backend-directory", "seqserve's backends are built in"),
  noEffect("repoagent-directory", "seqserve has no repository agents"),
];

/** Every Triton flag seqserve parses beyond options.ts's own: their parseArgs shapes. */
export function tritonFlagNames(): { name: string; multiple: boolean; boolean: boolean }[] {
  return [...TRITON_FLAGS, ...OTHER_TRITON_FLAGS].map((f) => ({
    name: f.name,
    multiple: f.multiple === true,
    boolean: f.boolean === true,
  }));
}

type Values = Readonly<Record<string, string | string[] | undefined>>;
type Env = Readonly<Record<string, string | undefined>>;

/** The options the Triton flags set, over `base` (the options of options.ts's flags). */
export function readTritonFlags(values: Values, base: ServerOptions, env: Env): ServerOptions {
  const str = (name: string): string | undefined => {
    const value = values[name];
    return Array.isArray(value) ? value[value.length - 1] : value;
  };
  const list = (name: string): string[] => {
    const value = values[name];
    return value === undefined ? [] : Array.isArray(value) ? value : [value];
  };
  const bool = (name: string, fallback: boolean): boolean => {
    const value = str(name);
    return value === undefined ? fallback : isTrue(name, value);
  };
  const whole = (name: string, min: number, max = INT32_MAX): number | undefined => {
    const value = str(name);
    return value === undefined ? undefined : readWholeNumber(`--${name}`, value, min, max);
  };
  const notices = [...base.notices];

  for (const flag of OTHER_TRITON_FLAGS) {
    for (const value of list(flag.name)) {
      const verdict = flag.judge(value);
      if (verdict === undefined) continue;
      if ("refuse" in verdict) throw new UsageError(`--${flag.name} is not supported: ${verdict.refuse}`);
      notices.push(verdict.notice);
    }
  }

  const httpAddress = str("http-address");
  const metrics = readMetricsConfig(list("metrics-config"), {
    ...base.metrics,
    cpuMetrics: bool("allow-cpu-metrics", base.metrics.cpuMetrics),
    intervalMs: whole("metrics-interval-ms", 1) ?? base.metrics.intervalMs,
  });
  notices.push(...metrics.notices);
  const tracing = readTraceConfig(
    list("trace-config"),
    {
      file: str("trace-file"),
      levels: list("trace-level"),
      rate: str("trace-rate"),
      count: str("trace-count"),
      logFrequency: str("trace-log-frequency"),
    },
    env,
  );
  notices.push(...tracing.notices);

  const options: ServerOptions = {
    ...base,
    serverId: str("id") ?? base.serverId,
    exitOnError: bool("exit-on-error", base.exitOnError),
    strictReadiness: bool("strict-readiness", base.strictReadiness),
    allowClientSharedMemory: bool("allow-client-shm", base.allowClientSharedMemory),
    strictModelConfig: bool("disable-auto-complete-config", false) || base.strictModelConfig,
    modelConfigName: modelConfigName(str("model-config-name")) ?? base.modelConfigName,
    modelLoadRetryCount: whole("model-load-retry-count", 0) ?? base.modelLoadRetryCount,
    httpAddress: httpAddress ?? base.httpAddress,
    grpcAddress: str("grpc-address") ?? base.grpcAddress,
    metricsAddress: str("metrics-address") ?? httpAddress ?? base.metricsAddress,
    httpBodyLimitBytes: whole("http-max-input-size", 1, Number.MAX_SAFE_INTEGER) ?? base.httpBodyLimitBytes,
    // --log-level (seqserve's) and --log_level (OVMS's) win over Triton's severity flags.
    logLevel:
      values["log-level"] === undefined && values.log_level === undefined
        ? tritonLogLevel(values)
        : base.logLevel,
    logFile: str("log-file") ?? base.logFile,
    logVerbose:
      values["log-level"] === undefined && values.log_level === undefined
        ? tritonVerboseLevel(values)
        : base.logVerbose,
    metrics: metrics.settings,
    tracing: tracing.settings,
    grpcMaxConnectionAgeMs: whole("grpc-max-connection-age", 0) ?? base.grpcMaxConnectionAgeMs,
    grpcMaxConnectionAgeGraceMs:
      whole("grpc-max-connection-age-grace", 0) ?? base.grpcMaxConnectionAgeGraceMs,
    grpcKeepalivePermitWithoutCalls: bool(
      "grpc-keepalive-permit-without-calls",
      base.grpcKeepalivePermitWithoutCalls,
    ),
    // A flag given several times (one value per GPU, say) is noticed once.
    notices: [...new Set(notices)],
  };
  checkSafePortRange(str("sagemaker-safe-port-range"), options);
  checkPortCollision(options);
  return options;
}

/**
 * Triton's check (CheckPortCollision): two endpoints on one address and port are refused
 * as the command line is read, before any model loads (a free port, 0, never collides).
 */
function checkPortCollision(options: ServerOptions): void {
  const endpoints: [string, string, number | undefined][] = [
    ["HTTP", options.httpAddress ?? options.host, options.httpPort],
    ["GRPC", options.grpcAddress ?? options.host, options.grpcPort],
    ["metrics", options.metricsAddress ?? options.httpAddress ?? options.host, options.metricsPort],
    ["SageMaker", options.host, options.sagemakerPort],
  ];
  for (let i = 0; i < endpoints.length; i++) {
    for (let j = i + 1; j < endpoints.length; j++) {
      const [name, address, port] = endpoints[i]!;
      const [other, otherAddress, otherPort] = endpoints[j]!;
      if (port === undefined || port === 0 || port !== otherPort || address !== otherAddress) continue;
      throw new UsageError(
        `The server cannot listen to ${name} requests and ${other} requests at the same address and port ${address}:${port}`,
      );
    }
  }
}

/** Triton's logging flags as a level: the least severe kind still logged. */
/** Triton's --log-verbose level (0 when not given). */
function tritonVerboseLevel(values: Values): number {
  const verbose = values["log-verbose"];
  // Triton reads true/false as 1/0 here too.
  return verbose === undefined
    ? 0
    : /^(true|false)$/i.test(String(verbose))
      ? Number(String(verbose).toLowerCase() === "true")
      : readWholeNumber("--log-verbose", String(verbose), 0, INT32_MAX);
}

function tritonLogLevel(values: Values): LogLevel {
  const flag = (name: string): boolean => {
    const value = values[name];
    return value === undefined ? true : isTrue(name, String(value));
  };
  const level = tritonVerboseLevel(values);
  if (level >= 2) return "trace";
  if (level === 1) return "debug";
  if (flag("log-info")) return "info";
  if (flag("log-warning")) return "warn";
  if (flag("log-error")) return "error";
  return "silent";
}

function modelConfigName(name: string | undefined): string | undefined {
  if (name === undefined) return undefined;
  if (name === "" || /[\s/\\]/.test(name) || name === "." || name === "..") {
    throw new UsageError(`--model-config-name must be a file name without spaces or slashes, got '${name}'`);
  }
  return name;
}

/** Triton's check: beside the SageMaker endpoint, the others on the same address use ports in the range. */
function checkSafePortRange(range: string | undefined, options: ServerOptions): void {
  if (range === undefined) return;
  const match = /^(\d+)-(\d+)$/.exec(range);
  if (match === null)
    throw new UsageError(`--sagemaker-safe-port-range expects <low>-<high>, got '${range}'`);
  const [low, high] = [Number(match[1]), Number(match[2])];
  if (options.sagemakerPort === undefined) return;
  const endpoints: [string, number | undefined, string | undefined][] = [
    ["HTTP", options.httpPort, options.httpAddress],
    ["GRPC", options.grpcPort, options.grpcAddress],
    ["metrics", options.metricsPort, options.metricsAddress],
  ];
  for (const [name, port, address] of endpoints) {
    if (port === undefined || port === 0 || (address ?? options.host) !== options.host) continue;
    if (port < low || port > high) {
      throw new UsageError(
        `The server cannot listen to ${name} requests at port ${port}, allowed port range is [${low}, ${high}]`,
      );
    }
  }
}
