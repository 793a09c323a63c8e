import { MAX_SESSION_TTL_SECS } from "../config/server-options.ts";
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
    help: "Serve the SageMaker inference-container API (GET /ping, POST /invocations, POST /endpoints/{name}/invocations) with stateful sessions.",
  },
  { name: "sagemaker-port", value: "port", default: "8080", help: "SageMaker port; 0 picks a free port." },
  {
    name: "sagemaker-model",
    value: "name",
    help: "The model SageMaker invocations go to when they name none (TargetModel); unset: the only model served.",
  },
  {
    name: "sagemaker-session-ttl-secs",
    value: "seconds",
    default: "1200",
    help: "How long a SageMaker session lives from its opening.",
  },
];

/** Where SageMaker mounts the model artifacts in a container. */
export const SAGEMAKER_MODEL_DIR = "/opt/ml/model";

type Env = Readonly<Record<string, string | undefined>>;

/** A whole number from the environment, or undefined when unset. */
function envNumber(env: Env, name: string, max: number): string | undefined {
  const value = env[name];
  if (value === undefined || value === "") return undefined;
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
  const defaults: Record<string, string> = {
    "allow-sagemaker": "true",
    "sagemaker-port": envNumber(env, "SAGEMAKER_BIND_TO_PORT", 65535) ?? "8080",
    "model-repository": SAGEMAKER_MODEL_DIR,
    "allow-http": "false",
    "allow-grpc": "false",
    "allow-metrics": "false",
  };
  const ttl = envNumber(env, "SAGEMAKER_SESSIONS_EXPIRATION", MAX_SESSION_TTL_SECS);
  if (ttl !== undefined) defaults["sagemaker-session-ttl-secs"] = ttl;
  const model = env.SAGEMAKER_TRITON_DEFAULT_MODEL_NAME;
  if (model !== undefined && model !== "") defaults["sagemaker-model"] = model;
  return defaults;
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
