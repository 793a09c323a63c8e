import { availableParallelism } from "node:os";
import type { LogFormat, LogLevel } from "../observability/logger.ts";
import { type BackendSettings, DEFAULT_BACKEND_SETTINGS } from "./backend-config.ts";
import { DEFAULT_METRICS_SETTINGS, type MetricsSettings } from "./metrics-config.ts";
import type { OvmsMetricsSettings } from "./ovms-metrics-config.ts";
import { DEFAULT_SECURITY_OPTIONS, type SecurityOptions } from "./security-options.ts";
import { DEFAULT_TRACE_SETTINGS, type TraceSettings } from "./trace-config.ts";

// The server's options: what the CLI (or an embedding program) decides, validated once
// and frozen. Names follow Triton's flags.

export type ModelControlMode = "none" | "explicit" | "poll";

/**
 * OpenVINO Model Server's single-model mode (`--model_path DIR --model_name NAME`): one
 * model, served as a config.json entry with these keys would be.
 */
export interface SingleModelOptions {
  readonly name: string;
  /** Absolute path of the folder holding the version folders. */
  readonly basePath: string;
  readonly stateful: boolean;
  readonly maxSequenceNumber?: number;
  readonly idleSequenceCleanup?: boolean;
  readonly lowLatencyTransformation?: boolean;
  /** `<<<in, out>>> …`; undefined = found from the model file. */
  readonly statePairs?: string;
  /** OVMS's model_version_policy, as JSON text. */
  readonly modelVersionPolicy?: string;
}

/**
 * The longest SageMaker session TTL: 100 years. Far longer, a session's expiry would fall
 * past the last date JavaScript can represent, and could not be written in its header.
 */
export const MAX_SESSION_TTL_SECS = 3_155_760_000;

/** Triton's SageMaker inference types: the handler of /invocations. */
export type SageMakerInferenceType = "infer" | "generate" | "generate_stream";
/** What SageMaker's `/ping` answers for (Triton's SAGEMAKER_TRITON_PING_MODE): every model ready, or the server running. */
export type SageMakerPingMode = "ready" | "live";

export interface ServerOptions {
  /** Triton-style model repositories (`<repo>/<model>/config.pbtxt` + version folders). */
  readonly modelRepositories: readonly string[];
  /** OpenVINO Model Server config.json files (`model_config_list`). */
  readonly ovmsConfigs: readonly string[];
  /** OVMS single-model mode: a model given on the command line. */
  readonly singleModel?: SingleModelOptions | undefined;
  /** How often the OVMS config files (and their models' folders) are checked for changes; 0 = never. */
  readonly configPollSecs?: number;
  /** OVMS's sequence cleaner period: idle sequences of models with idle_sequence_cleanup end after it. */
  readonly sequenceCleanerPollWaitMinutes?: number;
  readonly host: string;
  /** 0 = any free port; undefined = the endpoint is off. */
  readonly httpPort: number | undefined;
  readonly grpcPort: number | undefined;
  readonly metricsPort: number | undefined;
  readonly logLevel: LogLevel;
  /** Triton's --log-verbose level, read back by the logging extension (past 1, all trace). */
  readonly logVerbose?: number | undefined;
  readonly logFormat: LogFormat;
  readonly strictModelConfig: boolean;
  readonly modelControlMode: ModelControlMode;
  /** Models to load at start in explicit mode ("*" = all). */
  readonly loadModels: readonly string[];
  readonly repositoryPollSecs: number;
  readonly exitTimeoutSecs: number;
  readonly httpBodyLimitBytes: number;
  readonly grpcMaxMessageBytes: number;
  readonly grpcKeepaliveTimeMs: number;
  readonly grpcKeepaliveTimeoutMs: number;
  readonly grpcMaxInflightPerStream: number;
  /** Messages a WebSocket sequence stream may have unanswered before the server stops reading it. */
  readonly httpStreamMaxInflight: number;
  /** Triton's --backend-config settings seqserve acts on. */
  readonly backendSettings: BackendSettings;
  /** Models loaded at the same time (Triton's --model-load-thread-count). */
  readonly modelLoadThreadCount: number;
  /** Worker threads that ONNX model instances share at most; 0: a thread per instance. */
  readonly onnxWorkerThreads: number;
  /** One line each for options accepted without effect, logged at start. */
  readonly notices: readonly string[];
  /** One line each for options honoured but deprecated, logged at start as warnings (as Triton writes them to standard error). */
  readonly warnings: readonly string[];
  /** The SageMaker inference-container port (0 = any free port); undefined = off. */
  readonly sagemakerPort?: number | undefined;
  /** The model SageMaker invocations go to when they name none; undefined = the only model. */
  readonly sagemakerModel?: string | undefined;
  /** How long a SageMaker session lives from its opening. */
  readonly sagemakerSessionTtlSecs?: number;
  /** What SageMaker's /invocations is: an inference, or Triton's generate extension (SAGEMAKER_TRITON_INFERENCE_TYPE). */
  readonly sagemakerInferenceType?: SageMakerInferenceType;
  /** What SageMaker's /ping answers for: ready (every model ready) or live (the server running). */
  readonly sagemakerPingMode?: SageMakerPingMode;
  /** The server's name in `GET /v2` and gRPC ServerMetadata (Triton's --id). */
  readonly serverId: string;
  /** Addresses the HTTP, gRPC and metrics endpoints bind to; undefined: `host`. */
  readonly httpAddress: string | undefined;
  readonly grpcAddress: string | undefined;
  /** undefined: the HTTP address (as Triton), else `host`. */
  readonly metricsAddress: string | undefined;
  /**
   * Serve `GET /metrics` on the HTTP port too: OpenVINO Model Server's `--metrics_enable`,
   * whose metrics share the REST port.
   */
  readonly metricsOnHttpPort: boolean;
  /** OpenVINO Model Server's metric families, served too (its --metrics_enable / monitoring); undefined: not. */
  readonly ovmsMetrics: OvmsMetricsSettings | undefined;
  /** A model that fails to load at start stops the start (Triton's --exit-on-error). */
  readonly exitOnError: boolean;
  /** Ready only while every model is ready (Triton's --strict-readiness); false: while the server runs. */
  readonly strictReadiness: boolean;
  /** Clients may register system shared memory regions (Triton's --allow-client-shm). */
  readonly allowClientSharedMemory: boolean;
  /** Logs go to this file instead of standard output. */
  readonly logFile: string | undefined;
  /** How many times a failed model load is tried again (Triton's --model-load-retry-count). */
  readonly modelLoadRetryCount: number;
  /** Read `<model>/configs/<name>.pbtxt` instead of config.pbtxt where it exists (Triton's --model-config-name). */
  readonly modelConfigName: string | undefined;
  readonly metrics: MetricsSettings;
  readonly tracing: TraceSettings;
  /** gRPC connections are closed after this long, in ms, then given the grace period (0: never). */
  readonly grpcMaxConnectionAgeMs: number;
  readonly grpcMaxConnectionAgeGraceMs: number;
  /** Passed to grpc-js as grpc.keepalive_permit_without_calls (Triton's --grpc-keepalive-permit-without-calls). */
  readonly grpcKeepalivePermitWithoutCalls: boolean;
  /**
   * Where sequences keep their state: "memory" (default: this process) or a Redis location
   * (redis://, rediss://, redis+cluster://…) shared by replicas, written through at every step.
   */
  readonly stateStore?: string;
  /** Limits, access control, TLS and CORS (security-options.ts); absent = the defaults. */
  readonly security?: SecurityOptions;
}

export const DEFAULT_SERVER_OPTIONS: ServerOptions = Object.freeze({
  modelRepositories: [],
  ovmsConfigs: [],
  configPollSecs: 1,
  sequenceCleanerPollWaitMinutes: 5,
  host: "0.0.0.0",
  httpPort: 8000,
  grpcPort: 8001,
  metricsPort: 8002,
  logLevel: "info",
  logFormat: "json",
  strictModelConfig: false,
  modelControlMode: "none",
  loadModels: [],
  repositoryPollSecs: 15,
  exitTimeoutSecs: 30,
  httpBodyLimitBytes: 64 * 1024 * 1024,
  grpcMaxMessageBytes: 2 ** 31 - 1,
  grpcKeepaliveTimeMs: 7_200_000,
  grpcKeepaliveTimeoutMs: 20_000,
  grpcMaxInflightPerStream: 1024,
  httpStreamMaxInflight: 64,
  backendSettings: DEFAULT_BACKEND_SETTINGS,
  modelLoadThreadCount: 4,
  onnxWorkerThreads: availableParallelism(),
  notices: [],
  warnings: [],
  sagemakerPort: undefined,
  sagemakerModel: undefined,
  sagemakerSessionTtlSecs: 1200,
  sagemakerInferenceType: "infer",
  sagemakerPingMode: "ready",
  serverId: "seqserve",
  httpAddress: undefined,
  grpcAddress: undefined,
  metricsAddress: undefined,
  metricsOnHttpPort: false,
  ovmsMetrics: undefined,
  exitOnError: true,
  strictReadiness: true,
  allowClientSharedMemory: false,
  logFile: undefined,
  modelLoadRetryCount: 0,
  modelConfigName: undefined,
  metrics: DEFAULT_METRICS_SETTINGS,
  tracing: DEFAULT_TRACE_SETTINGS,
  grpcMaxConnectionAgeMs: 0,
  grpcMaxConnectionAgeGraceMs: 0,
  grpcKeepalivePermitWithoutCalls: false,
  stateStore: "memory",
  security: DEFAULT_SECURITY_OPTIONS,
});
