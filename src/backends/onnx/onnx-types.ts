import type { DataType } from "../../core/datatype.ts";

// ONNX tensor element types (TensorProto.DataType, which ONNX Runtime's
// ONNXTensorElementDataType numbers the same way) ⇄ KServe datatypes ⇄ the type names of
// onnxruntime-node's Tensor. Only types onnxruntime-node has a Tensor type for can be fed
// or fetched; the rest (bfloat16, float8, complex, 4-bit) keep a name for messages.

interface ElementType {
  /** The name onnxruntime-node and its messages use, e.g. "float32". */
  readonly name: string;
  /** Undefined when onnxruntime-node cannot feed or fetch the type. */
  readonly datatype: DataType | undefined;
}

const ELEMENT_TYPES: ReadonlyMap<number, ElementType> = new Map([
  [1, { name: "float32", datatype: "FP32" }],
  [2, { name: "uint8", datatype: "UINT8" }],
  [3, { name: "int8", datatype: "INT8" }],
  [4, { name: "uint16", datatype: "UINT16" }],
  [5, { name: "int16", datatype: "INT16" }],
  [6, { name: "int32", datatype: "INT32" }],
  [7, { name: "int64", datatype: "INT64" }],
  [8, { name: "string", datatype: "BYTES" }],
  [9, { name: "bool", datatype: "BOOL" }],
  [10, { name: "float16", datatype: "FP16" }],
  [11, { name: "float64", datatype: "FP64" }],
  [12, { name: "uint32", datatype: "UINT32" }],
  [13, { name: "uint64", datatype: "UINT64" }],
  [14, { name: "complex64", datatype: undefined }],
  [15, { name: "complex128", datatype: undefined }],
  [16, { name: "bfloat16", datatype: undefined }],
  [17, { name: "float8e4m3fn", datatype: undefined }],
  [18, { name: "float8e4m3fnuz", datatype: undefined }],
  [19, { name: "float8e5m2", datatype: undefined }],
  [20, { name: "float8e5m2fnuz", datatype: undefined }],
  [21, { name: "uint4", datatype: undefined }],
  [22, { name: "int4", datatype: undefined }],
  [23, { name: "float4e2m1", datatype: undefined }],
]);

export function elementType(onnxType: number): ElementType {
  return ELEMENT_TYPES.get(onnxType) ?? { name: `onnx type ${onnxType}`, datatype: undefined };
}

/** onnxruntime-node's Tensor type for each datatype it can feed; BF16 has none. */
export type OrtTensorType =
  | "bool"
  | "uint8"
  | "uint16"
  | "uint32"
  | "uint64"
  | "int8"
  | "int16"
  | "int32"
  | "int64"
  | "float16"
  | "float32"
  | "float64"
  | "string";

const ORT_TYPES: Readonly<Record<DataType, OrtTensorType | undefined>> = {
  BOOL: "bool",
  UINT8: "uint8",
  UINT16: "uint16",
  UINT32: "uint32",
  UINT64: "uint64",
  INT8: "int8",
  INT16: "int16",
  INT32: "int32",
  INT64: "int64",
  FP16: "float16",
  FP32: "float32",
  FP64: "float64",
  BYTES: "string",
  BF16: undefined,
};

export function ortTensorType(datatype: DataType): OrtTensorType | undefined {
  return ORT_TYPES[datatype];
}

const FROM_ORT_TYPE: ReadonlyMap<string, DataType> = new Map(
  Object.entries(ORT_TYPES).flatMap(([datatype, ortType]) =>
    ortType === undefined ? [] : [[ortType, datatype as DataType] as const],
  ),
);

/** The datatype of an onnxruntime-node Tensor type name; undefined for types seqserve cannot carry. */
export function datatypeOfOrtType(ortType: string): DataType | undefined {
  return FROM_ORT_TYPE.get(ortType);
}
