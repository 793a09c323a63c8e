import { existsSync, mkdirSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import {
  MAX_SESSION_TTL_SECS,
  type SageMakerInferenceType,
  type SageMakerPingMode,
} from "../config/server-options.ts";
import { oneOf } from "./flag-choice.ts";
import type { FlagSpec } from "./options.ts";
import { UsageError } from "./usage-error.ts";

// The SageMaker flags (Triton's names: --allow-sagemaker, --sagemaker-port) and the
// `seqserve serve` command, which starts seqserve the way SageMaker starts a container
// (`docker run <image> serve`): the SageMaker API on $SAGEMAKER_BIND_TO_PORT (8080 when
// unset), models from /opt/ml/model, the other endpoints off. Every flag still overrides.

export const SAGEMAKER_FLAGS: readonly FlagSpec[] = [
  {
    name: "allow-sagemaker",
    boolean: true,
    default: "false",
    help: "Serve the SageMaker inference-container API (GET /ping, POST /invocations, POST /endpoints/{name}/invocations and /invocations-response-stream, the multi-model endpoint's /models routes) with stateful sessions.",
  },
  { name: "sagemaker-port", value: "port", default: "8080", help: "SageMaker port; 0 picks a free port." },
  {
    name: "sagemaker-model",
    value: "name",
    help: "The model SageMaker invocations go to when they name none (TargetModel); unset: the only model served.",
  },
  {
    name: "sagemaker-inference-type",
    value: "type",
    help: "What POST /invocations is: infer (KServe v2 and the other body forms, with sessions), generate or generate_stream (Triton's generate extension, for the default model). Default: $SAGEMAKER_TRITON_INFERENCE_TYPE, else infer.",
  },
  {
    name: "sagemaker-ping-mode",
    value: "mode",
    help: "What GET /ping answers 200 for: ready (every model ready, and not stopping) or live (the server running, whatever its models). Default: $SAGEMAKER_TRITON_PING_MODE, else ready; for `serve`, $SAGEMAKER_TRITON_OVERRIDE_PING_MODE, else live for a multi-model endpoint and ready otherwise.",
  },
  {
    name: "sagemaker-session-ttl-secs",
    value: "seconds",
    default: "1200",
    help: "How long a SageMaker session lives from its opening.",
  },
];

/** Where SageMaker mounts the model artifacts in a container. */
const SAGEMAKER_MODEL_DIR = "/opt/ml/model";

/**
 * The repository of a multi-model endpoint, as Triton's image names it: SageMaker puts each
 * model elsewhere (/opt/ml/models/<hash>/model) and loads it through POST /models, so this
 * one stays empty; it only has to exist.
 */
const SAGEMAKER_MULTI_MODEL_DIR = "/tmp/sagemaker";

type Env = Readonly<Record<string, string | undefined>>;

/** A whole number from the environment, or undefined when unset. */
function envNumber(env: Env, name: string, max: number): string | undefined {
  const value = envValue(env, name);
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value) || Number(value) > max) {
    throw new UsageError(`${name} must be a whole number up to ${max}, got '${value}'`);
  }
  return value;
}

/**
 * The defaults of `seqserve serve`, from SageMaker's environment: SAGEMAKER_BIND_TO_PORT,
 * and as conveniences SAGEMAKER_SESSIONS_EXPIRATION (the session TTL in AWS's container
 * standards) and SAGEMAKER_TRITON_DEFAULT_MODEL_NAME (Triton's SageMaker mode); the other
 * variables Triton's image reads become flags (serveArgs).
 */
export function serveDefaults(env: Env): Record<string, string> {
  const multiModel = isMultiModel(env);
  const defaults: Record<string, string> = {
    "allow-sagemaker": "true",
    "sagemaker-port": envNumber(env, "SAGEMAKER_BIND_TO_PORT", 65535) ?? "8080",
    "model-repository": multiModel ? SAGEMAKER_MULTI_MODEL_DIR : SAGEMAKER_MODEL_DIR,
    "allow-http": "false",
    "allow-grpc": "false",
    "allow-metrics": "false",
  };
  const ttl = envNumber(env, "SAGEMAKER_SESSIONS_EXPIRATION", MAX_SESSION_TTL_SECS);
  if (ttl !== undefined) defaults["sagemaker-session-ttl-secs"] = ttl;
  const model = defaultModelName(env);
  if (model !== undefined) defaults["sagemaker-model"] = model;
  // As Triton's image: a multi-model endpoint loads its models on SageMaker's request, and
  // a named default model is the only one loaded (an unrelated folder beside it, which
  // might not load, cannot stop the start).
  if (multiModel) defaults["model-control-mode"] = "explicit";
  else if (model !== undefined) {
    defaults["model-control-mode"] = "explicit";
    defaults["load-model"] = model;
  }
  // Triton's image: ready, or live for a multi-model endpoint (whose models come and go on
  // SageMaker's request), unless SAGEMAKER_TRITON_OVERRIDE_PING_MODE says otherwise.
  defaults["sagemaker-ping-mode"] =
    pingModeOf(env, "SAGEMAKER_TRITON_OVERRIDE_PING_MODE") ?? (multiModel ? "live" : "ready");
  return defaults;
}

/** SAGEMAKER_MULTI_MODEL=true: a multi-model endpoint (Triton's image compares it to "true" alone). */
function isMultiModel(env: Env): boolean {
  return env.SAGEMAKER_MULTI_MODEL === "true";
}

function defaultModelName(env: Env): string | undefined {
  const model = env.SAGEMAKER_TRITON_DEFAULT_MODEL_NAME;
  return model === undefined || model === "" ? undefined : model;
}

/** A multi-model endpoint's repository is made when missing, as Triton's image makes it (`mkdir -p`). */
export function prepareServeRepository(repository: string, env: Env): void {
  if (isMultiModel(env) && repository === SAGEMAKER_MULTI_MODEL_DIR)
    mkdirSync(repository, { recursive: true });
}

const isDirectory = (path: string): boolean => {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
};

/**
 * The checks of Triton's image before it starts a single-model endpoint, with its words:
 * the repository holds model folders (not one model's files at its top), the default
 * model's folder exists, and there is at least one model. A multi-model endpoint starts
 * empty. (With several folders and no default model, Triton's image refuses to start;
 * seqserve serves them all, and an invocation names its model.)
 */
export function checkServeRepositories(repositories: readonly string[], env: Env): void {
  if (isMultiModel(env) || repositories.length === 0) return;
  for (const repository of repositories) {
    if (existsSync(join(repository, "config.pbtxt"))) {
      throw new UsageError(
        `Incorrect directory structure in '${repository}': model directory needs to contain the top level folder (<model>/config.pbtxt, not config.pbtxt)`,
      );
    }
  }
  const model = defaultModelName(env);
  if (model !== undefined) {
    if (!repositories.some((repository) => isDirectory(join(repository, model)))) {
      throw new UsageError(
        `Directory with provided SAGEMAKER_TRITON_DEFAULT_MODEL_NAME ${model} does not exist`,
      );
    }
    return;
  }
  const folders = repositories.flatMap((repository) =>
    readdirSync(repository).filter((entry) => isDirectory(join(repository, entry))),
  );
  if (folders.length === 0) throw new UsageError("No model found in model repository");
}

/** The environment Triton's SageMaker image turns into flags, and the flag each becomes. */
const TRITON_SAGEMAKER_ENV: readonly (readonly [string, string])[] = [
  ["SAGEMAKER_TRITON_ALLOW_GRPC", "allow-grpc"],
  ["SAGEMAKER_TRITON_GRPC_PORT", "grpc-port"],
  ["SAGEMAKER_TRITON_ALLOW_METRICS", "allow-metrics"],
  ["SAGEMAKER_TRITON_METRICS_PORT", "metrics-port"],
  ["SAGEMAKER_TRITON_LOG_VERBOSE", "log-verbose"],
  ["SAGEMAKER_TRITON_LOG_INFO", "log-info"],
  ["SAGEMAKER_TRITON_LOG_WARNING", "log-warning"],
  ["SAGEMAKER_TRITON_LOG_ERROR", "log-error"],
  ["SAGEMAKER_SAFE_PORT_RANGE", "sagemaker-safe-port-range"],
];

/**
 * The flags Triton's SageMaker image makes of its environment (docker/sagemaker/serve),
 * around `serve`'s own: the variables' before them (a flag given wins), then
 * SAGEMAKER_TRITON_ADDITIONAL_ARGS after them (split on white space, as its shell splits
 * them), so they win, as in Triton's image.
 */
export function serveArgs(args: readonly string[], env: Env): string[] {
  const fromEnv: string[] = [];
  for (const [variable, flag] of TRITON_SAGEMAKER_ENV) {
    const value = env[variable];
    if (value !== undefined && value !== "") fromEnv.push(`--${flag}=${value}`);
  }
  const additional = env.SAGEMAKER_TRITON_ADDITIONAL_ARGS;
  return [
    ...fromEnv,
    ...args,
    ...(additional === undefined ? [] : additional.split(/\s+/).filter((arg) => arg !== "")),
  ];
}

/** A variable of the environment, or undefined when unset or empty. */
function envValue(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value === "" ? undefined : value;
}

const INFERENCE_TYPES: readonly SageMakerInferenceType[] = ["infer", "generate", "generate_stream"];

/**
 * What /invocations is (Triton's SAGEMAKER_TRITON_INFERENCE_TYPE, which its SageMaker
 * server reads, whether or not its image started it): the flag, else the variable, else
 * infer. Another value is refused at start, with the words of Triton's image.
 */
export function readInferenceType(flag: string | undefined, env: Env): SageMakerInferenceType {
  if (flag !== undefined)
    return oneOf("--sagemaker-inference-type", flag, INFERENCE_TYPES, "triton-sagemaker-image");
  const fromEnv = envValue(env, "SAGEMAKER_TRITON_INFERENCE_TYPE");
  return fromEnv === undefined
    ? "infer"
    : oneOf("SAGEMAKER_TRITON_INFERENCE_TYPE", fromEnv, INFERENCE_TYPES, "triton-sagemaker-image");
}

const PING_MODES: readonly SageMakerPingMode[] = ["ready", "live"];

/**
 * A ping mode from the environment, or undefined when unset. Triton takes any word but
 * "live" as ready; a misspelt mode is refused at start here, rather than quietly changing
 * what the health check means.
 */
function pingModeOf(env: Env, name: string): SageMakerPingMode | undefined {
  const value = envValue(env, name);
  return value === undefined ? undefined : oneOf(name, value, PING_MODES, "triton-sagemaker-image");
}

/**
 * What /ping answers for (Triton's SAGEMAKER_TRITON_PING_MODE, which its SageMaker server
 * reads; `serve` sets it as Triton's image does): the flag (or `serve`'s default), else the
 * variable, else ready.
 */
export function readPingMode(flag: string | undefined, env: Env): SageMakerPingMode {
  if (flag !== undefined) return oneOf("--sagemaker-ping-mode", flag, PING_MODES, "triton-sagemaker-image");
  return pingModeOf(env, "SAGEMAKER_TRITON_PING_MODE") ?? "ready";
}
