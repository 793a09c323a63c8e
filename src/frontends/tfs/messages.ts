import type { Int64 } from "../grpc/int64.ts";

// The plain-object shapes of the TF-Serving messages as the frontend reads and writes
// them. Requests come from protobufjs directly (proto-definitions.ts): 64-bit integers as
// Long objects, enums as numbers, absent scalars at their defaults, absent messages null,
// bytes as Buffer views over the received message. For encoding, 64-bit integers may be
// numbers, decimal strings or bigints' decimal strings.

export interface TensorShapeMessage {
  readonly dim?: readonly { readonly size?: Int64; readonly name?: string }[];
  readonly unknown_rank?: boolean;
}

/**
 * A request's TensorProto as decoded: the *_val numbers in typed arrays of their own
 * (typed-array-fields.ts), booleans as 0 or 1; a field not sent is an empty array.
 */
export interface TensorProtoMessage {
  readonly dtype?: number;
  readonly tensor_shape?: TensorShapeMessage | null;
  readonly version_number?: number;
  readonly tensor_content?: Uint8Array;
  readonly half_val?: Int32Array | readonly never[];
  readonly float_val?: Float32Array | readonly never[];
  readonly double_val?: Float64Array | readonly never[];
  readonly int_val?: Int32Array | readonly never[];
  readonly string_val?: readonly Uint8Array[];
  readonly int64_val?: BigInt64Array | readonly never[];
  readonly bool_val?: Uint8Array | readonly never[];
  readonly uint32_val?: Uint32Array | readonly never[];
  readonly uint64_val?: BigUint64Array | readonly never[];
}

/** A TensorProto to encode: the fields seqserve writes (64-bit integers as decimal strings). */
export interface TensorProtoToEncode {
  readonly dtype: number;
  readonly tensor_shape: TensorShapeMessage;
  readonly tensor_content?: Uint8Array;
  readonly string_val?: readonly Uint8Array[];
  readonly uint32_val?: readonly number[];
  readonly uint64_val?: readonly string[];
}

export interface ModelSpecMessage {
  readonly name?: string;
  readonly version?: { readonly value?: Int64 } | null;
  readonly version_label?: string;
  readonly signature_name?: string;
}

export interface PredictRequestMessage {
  readonly model_spec?: ModelSpecMessage | null;
  readonly inputs?: Readonly<Record<string, TensorProtoMessage>>;
  readonly output_filter?: readonly string[];
}

export interface PredictResponseMessage {
  readonly model_spec: ModelSpecMessage;
  readonly outputs: Readonly<Record<string, TensorProtoToEncode>>;
}

export interface GetModelMetadataRequestMessage {
  readonly model_spec?: ModelSpecMessage | null;
  readonly metadata_field?: readonly string[];
}

export interface GetModelStatusRequestMessage {
  readonly model_spec?: ModelSpecMessage | null;
}
