import { notFound } from "../../core/errors.ts";
import type { ModelMetadata, ModelRegistry, TensorMetadata } from "../../core/model.ts";
import type { InputConfig, ModelConfig, OutputConfig } from "../../core/model-config.ts";
import { OVMS_MESSAGES } from "./error-status.ts";
import { isModelScalar, isRowScalar } from "./model-scalars.ts";
import { tfDtypeOf } from "./tf-dtype.ts";

// What GetModelStatus and GetModelMetadata answer, over REST and gRPC alike: the
// versions of a model and their states in TF-Serving's terms, and the model's one
// signature (its inputs and outputs with TensorFlow dtypes; -1 for a variable dimension,
// the batch dimension included).

type VersionState = "UNKNOWN" | "START" | "LOADING" | "AVAILABLE" | "UNLOADING" | "END";

export interface VersionStatus {
  readonly version: string;
  readonly state: VersionState;
  /** A tensorflow.error.Code name: "OK", or "UNKNOWN" for a version that failed to load. */
  readonly errorCode: "OK" | "UNKNOWN";
  readonly errorMessage: string;
}

/** The status of every version of `name` (or of one). */
export function modelStatus(registry: ModelRegistry, name: string, version?: string): VersionStatus[] {
  const entries = registry.index().filter((e) => e.name === name);
  if (entries.length === 0) throw notFound(OVMS_MESSAGES.model_unknown);
  const statuses: VersionStatus[] = entries.map((entry) => {
    const failed = entry.state === "UNAVAILABLE" && entry.reason !== "" && entry.reason !== "unloaded";
    // As OVMS: a version whose load failed stays LOADING with error UNKNOWN
    // (ModelVersionStatus::isFailedLoading); a healthy one's message is its code, "OK".
    const state: VersionState =
      entry.state === "READY"
        ? "AVAILABLE"
        : entry.state === "LOADING" || failed
          ? "LOADING"
          : entry.state === "UNLOADING"
            ? "UNLOADING"
            : "END";
    return {
      version: entry.version ?? "0",
      state,
      errorCode: failed ? "UNKNOWN" : "OK",
      // OVMS writes the code's name; the reason says more, and seqserve gives it.
      errorMessage: failed ? (entry.reason ?? "UNKNOWN") : "OK",
    };
  });
  if (version === undefined) return statuses;
  const one = statuses.filter((s) => s.version === String(Number(version)));
  if (one.length === 0) throw notFound(OVMS_MESSAGES.version_unknown);
  return one;
}

export interface TensorInfo {
  readonly name: string;
  readonly dtype: number;
  readonly dims: readonly number[];
}

export interface Signature {
  readonly inputs: ReadonlyMap<string, TensorInfo>;
  readonly outputs: ReadonlyMap<string, TensorInfo>;
  /** Empty, as in OVMS, which never sets it (REST prints it as ""; on gRPC an empty proto3 string is not on the wire). */
  readonly methodName: string;
}

function tensorInfos(
  tensors: readonly TensorMetadata[],
  configured: readonly (InputConfig | OutputConfig)[],
  config: ModelConfig,
): Map<string, TensorInfo> {
  return new Map(
    tensors.map((t) => {
      const tensor = configured.find((c) => c.name === t.name);
      let dims = t.shape;
      if (tensor !== undefined && isModelScalar(config, tensor)) dims = [];
      else if (tensor !== undefined && isRowScalar(config, tensor)) dims = t.shape.slice(0, 1);
      return [t.name, { name: t.name, dtype: tfDtypeOf(t.datatype), dims }];
    }),
  );
}

/**
 * The model's signature; a tensor the model declares as a scalar has no dimensions, and
 * one it declares with its batch dimension alone has that one, as in OVMS.
 */
export function signatureOf(metadata: ModelMetadata, config: ModelConfig): Signature {
  return {
    inputs: tensorInfos(metadata.inputs, config.inputs, config),
    outputs: tensorInfos(metadata.outputs, config.outputs, config),
    // OVMS leaves the SignatureDef's method_name unset, not "tensorflow/serving/predict":
    // a client comparing metadata with an OVMS deployment's sees the same.
    methodName: "",
  };
}
