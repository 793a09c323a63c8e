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
 * standards) and SAGEMAKER_TRITON_DEFAULT_MODEL_NAME (Triton's SageMaker mode).
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
