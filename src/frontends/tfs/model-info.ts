import { notFound } from "../../core/errors.ts";
import type { ModelMetadata, ModelRegistry, TensorMetadata } from "../../core/model.ts";
import { DEFAULT_SIGNATURE } from "./predict.ts";
import { tfDtypeOf } from "./tf-dtype.ts";

// What GetModelStatus and GetModelMetadata answer, over REST and gRPC alike: the
// versions of a model and their states in TF-Serving's terms, and the model's one
// signature (its inputs and outputs with TensorFlow dtypes; -1 for a variable dimension,
// the batch dimension included).

export type VersionState = "UNKNOWN" | "START" | "LOADING" | "AVAILABLE" | "UNLOADING" | "END";

export interface VersionStatus {
  readonly version: string;
  readonly state: VersionState;
  /** A tensorflow.error.Code name: "OK", or "UNKNOWN" for a version that failed to load. */
  readonly errorCode: "OK" | "UNKNOWN";
  readonly errorMessage: string;
}

/** OVMS's texts for a model or version that is not there. */
const MODEL_MISSING = "Model with requested name is not found";
const VERSION_MISSING = "Model with requested version is not found";

/** The status of every version of `name` (or of one). */
export function modelStatus(registry: ModelRegistry, name: string, version?: string): VersionStatus[] {
  const entries = registry.index().filter((e) => e.name === name);
  if (entries.length === 0) throw notFound(MODEL_MISSING);
  const statuses: VersionStatus[] = entries.map((entry) => {
    const failed = entry.state === "UNAVAILABLE" && entry.reason !== "" && entry.reason !== "unloaded";
    const state: VersionState =
      entry.state === "READY"
        ? "AVAILABLE"
        : entry.state === "LOADING"
          ? "LOADING"
          : entry.state === "UNLOADING"
            ? "UNLOADING"
            : "END";
    return {
      version: entry.version ?? "0",
      state,
      errorCode: failed ? "UNKNOWN" : "OK",
      errorMessage: failed ? (entry.reason ?? "") : "",
    };
  });
  if (version === undefined) return statuses;
  const one = statuses.filter((s) => s.version === String(Number(version)));
  if (one.length === 0) throw notFound(VERSION_MISSING);
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
  readonly methodName: string;
}

const tensorInfos = (tensors: readonly TensorMetadata[]): Map<string, TensorInfo> =>
  new Map(tensors.map((t) => [t.name, { name: t.name, dtype: tfDtypeOf(t.datatype), dims: t.shape }]));

export function signatureOf(metadata: ModelMetadata): Signature {
  return {
    inputs: tensorInfos(metadata.inputs),
    outputs: tensorInfos(metadata.outputs),
    methodName: "tensorflow/serving/predict",
  };
}

export { DEFAULT_SIGNATURE };
