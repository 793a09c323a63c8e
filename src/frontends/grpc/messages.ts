import type { Int64 } from "./int64.ts";

// The plain-object shapes of the KServe v2 gRPC messages, as the frontend reads and
// writes them. Two decoders produce them: proto-loader for most RPCs (64-bit integers as
// decimal strings, absent fields undefined) and protobufjs directly for the inference hot
// path (64-bit integers as Long objects, absent scalars at their defaults, absent
// messages null); see proto-definitions.ts. Both give bytes as Buffer views over the
// received message. For encoding, 64-bit integers may be numbers or decimal strings.

type InferParameterChoice = "bool_param" | "int64_param" | "string_param" | "double_param" | "uint64_param";

export interface InferParameterMessage {
  /** Which member of the oneof is set (undefined when none is). */
  readonly parameter_choice?: InferParameterChoice;
  readonly bool_param?: boolean;
  readonly int64_param?: Int64;
  readonly string_param?: string;
  readonly double_param?: number;
  readonly uint64_param?: Int64;
}

export type ParameterMap = Readonly<Record<string, InferParameterMessage>>;

/**
 * Typed contents as decoded: numbers in typed arrays of their own (typed-array-fields.ts),
 * booleans as 0 or 1; a field not sent is an empty array.
 */
export interface InferTensorContentsMessage {
  readonly bool_contents?: Uint8Array | readonly never[];
  readonly int_contents?: Int32Array | readonly never[];
  readonly int64_contents?: BigInt64Array | readonly never[];
  readonly uint_contents?: Uint32Array | readonly never[];
  readonly uint64_contents?: BigUint64Array | readonly never[];
  readonly fp32_contents?: Float32Array | readonly never[];
  readonly fp64_contents?: Float64Array | readonly never[];
  readonly bytes_contents?: readonly Uint8Array[];
}

export interface InferInputTensorMessage {
  readonly name?: string;
  readonly datatype?: string;
  readonly shape?: readonly Int64[];
  readonly parameters?: ParameterMap;
  readonly contents?: InferTensorContentsMessage | null;
}

interface InferRequestedOutputMessage {
  readonly name?: string;
  readonly parameters?: ParameterMap;
}

export interface ModelInferRequestMessage {
  readonly model_name?: string;
  readonly model_version?: string;
  readonly id?: string;
  readonly parameters?: ParameterMap;
  readonly inputs?: readonly InferInputTensorMessage[];
  readonly outputs?: readonly InferRequestedOutputMessage[];
  readonly raw_input_contents?: readonly Uint8Array[];
}

export interface InferOutputTensorMessage {
  readonly name: string;
  readonly datatype: string;
  readonly shape: readonly Int64[];
  readonly parameters?: ParameterMap;
  readonly contents?: InferTensorContentsMessage;
}

export interface ModelInferResponseMessage {
  readonly model_name?: string;
  readonly model_version?: string;
  readonly id?: string;
  readonly parameters?: ParameterMap;
  readonly outputs?: readonly InferOutputTensorMessage[];
  readonly raw_output_contents?: readonly Uint8Array[];
}

export interface ModelStreamInferResponseMessage {
  readonly error_message?: string;
  readonly infer_response?: ModelInferResponseMessage;
}

/** ModelReady, ModelMetadata, ModelConfig and ModelStatistics requests. */
export interface ModelRequestMessage {
  readonly name?: string;
  readonly version?: string;
}

export interface TensorMetadataMessage {
  readonly name: string;
  readonly datatype: string;
  readonly shape: readonly Int64[];
}

export interface ModelMetadataResponseMessage {
  readonly name: string;
  readonly versions: readonly string[];
  readonly platform: string;
  readonly inputs: readonly TensorMetadataMessage[];
  readonly outputs: readonly TensorMetadataMessage[];
}

export interface RepositoryIndexRequestMessage {
  readonly repository_name?: string;
  readonly ready?: boolean;
}

export interface ModelIndexMessage {
  readonly name: string;
  readonly version: string;
  readonly state: string;
  readonly reason: string;
}

export interface ModelRepositoryParameterMessage {
  readonly parameter_choice?: "bool_param" | "int64_param" | "string_param" | "bytes_param";
  readonly bool_param?: boolean;
  readonly int64_param?: Int64;
  readonly string_param?: string;
  readonly bytes_param?: Uint8Array;
}

export interface RepositoryModelRequestMessage {
  readonly repository_name?: string;
  readonly model_name?: string;
  readonly parameters?: Readonly<Record<string, ModelRepositoryParameterMessage>>;
}

export interface HealthCheckRequestMessage {
  readonly service?: string;
}

export type ServingStatus = "UNKNOWN" | "SERVING" | "NOT_SERVING" | "SERVICE_UNKNOWN";

export interface HealthCheckResponseMessage {
  readonly status: ServingStatus;
}
