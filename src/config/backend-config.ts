import { DEFAULT_MAX_BATCH_SIZE } from "./resolve/io-config.ts";
import { ONNX_BACKEND, STATEFUL_BACKEND } from "./resolve/model-identity.ts";
import { splitSettingFlag } from "./setting-flag.ts";

// Triton's `--backend-config=<backend>,<setting>=<value>` (or `<setting>=<value>` for every
// backend), read the way Triton's ONNX Runtime and ONNX stateful backends read their
// command-line settings. What seqserve can act on is honoured; the rest is accepted with a
// one-line notice, so a Triton launch script runs unchanged.

/** ONNX Runtime's log severity (ORT_LOGGING_LEVEL_*): 0 verbose, 1 info, 2 warning, 3 error, 4 fatal. */
type OrtLogSeverity = 0 | 1 | 2 | 3 | 4;

export interface BackendSettings {
  /** max_batch_size that autocomplete gives a model that can batch (Triton's default: 4). */
  readonly defaultMaxBatchSize: number;
  /** ONNX Runtime's log severity for sessions of each backend's models, where set. */
  readonly ortLogSeverity: Readonly<Partial<Record<string, OrtLogSeverity>>>;
}

export const DEFAULT_BACKEND_SETTINGS: BackendSettings = Object.freeze({
  defaultMaxBatchSize: DEFAULT_MAX_BATCH_SIZE,
  ortLogSeverity: {},
});

export interface BackendConfigResult {
  readonly settings: BackendSettings;
  /** One line for each setting accepted without effect. */
  readonly notices: readonly string[];
}

/** A value that cannot be used (the message names the flag and the setting). */
export class BackendConfigError extends Error {
  override name = "BackendConfigError";
}

const ONNX_RUNTIME_NOTICES: Readonly<Record<string, string>> = {
  "enable-global-threadpool":
    "each model instance runs its own ONNX Runtime session in its own worker thread, so there is no pool to share",
  intra_op_thread_count:
    "it sizes Triton's global thread pool; seqserve gives each instance one thread unless the model's intra_op_thread_count parameter says otherwise",
  inter_op_thread_count:
    "it sizes Triton's global thread pool; a model's inter_op_thread_count parameter sets its own",
};

function wholeNumber(flag: string, value: string, min: number, max: number): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < min || n > max) {
    throw new BackendConfigError(
      `--backend-config ${flag} must be a whole number from ${min} to ${max}, got '${value}'`,
    );
  }
  return n;
}

/** Reads every `--backend-config` value, in order (a later one wins). */
export function readBackendConfig(values: readonly string[]): BackendConfigResult {
  let defaultMaxBatchSize = DEFAULT_MAX_BATCH_SIZE;
  const ortLogSeverity: Partial<Record<string, OrtLogSeverity>> = {};
  const notices: string[] = [];
  for (const raw of values) {
    const setting = splitSettingFlag(raw);
    if (setting === undefined) {
      throw new BackendConfigError(
        `--backend-config expects <backend>,<setting>=<value> or <setting>=<value>, got '${raw}'`,
      );
    }
    const { scope: backend, key, value } = setting;
    const flag = `${backend === "" ? "" : `${backend},`}${key}`;
    if (key === "default-max-batch-size" && (backend === "" || backend === ONNX_BACKEND)) {
      defaultMaxBatchSize = wholeNumber(flag, value, 0, 2 ** 31 - 1);
    } else if (key === "ort-logging-level" && backend === STATEFUL_BACKEND) {
      ortLogSeverity[STATEFUL_BACKEND] = wholeNumber(flag, value, 0, 4) as OrtLogSeverity;
    } else if (backend === ONNX_BACKEND && ONNX_RUNTIME_NOTICES[key] !== undefined) {
      notices.push(`--backend-config ${flag} has no effect: ${ONNX_RUNTIME_NOTICES[key]}`);
    } else if (backend === "" || backend === ONNX_BACKEND || backend === STATEFUL_BACKEND) {
      notices.push(`--backend-config ${flag} is not a setting seqserve knows; it has no effect`);
    } else {
      notices.push(
        `--backend-config ${flag} has no effect: seqserve serves ONNX models (backends '${ONNX_BACKEND}' and '${STATEFUL_BACKEND}'), not backend '${backend}'`,
      );
    }
  }
  return { settings: { defaultMaxBatchSize, ortLogSeverity }, notices };
}
