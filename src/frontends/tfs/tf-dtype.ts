import type { DataType } from "../../core/datatype.ts";

// TensorFlow's element types (tensorflow.DataType) against seqserve's datatypes, and the
// TensorProto field that carries each type's values when they are not in tensor_content.

/** The TensorFlow types seqserve serves, by enum number. */
const BY_NUMBER: ReadonlyMap<number, DataType> = new Map([
  [1, "FP32"],
  [2, "FP64"],
  [3, "INT32"],
  [4, "UINT8"],
  [5, "INT16"],
  [6, "INT8"],
  [7, "BYTES"],
  [9, "INT64"],
  [10, "BOOL"],
  [14, "BF16"],
  [17, "UINT16"],
  [19, "FP16"],
  [22, "UINT32"],
  [23, "UINT64"],
]);

const NUMBER_OF: ReadonlyMap<DataType, number> = new Map([...BY_NUMBER].map(([n, d]) => [d, n]));

/** TensorFlow's names, for messages and JSON (metadata). */
const NAMES: Readonly<Record<number, string>> = {
  0: "DT_INVALID",
  1: "DT_FLOAT",
  2: "DT_DOUBLE",
  3: "DT_INT32",
  4: "DT_UINT8",
  5: "DT_INT16",
  6: "DT_INT8",
  7: "DT_STRING",
  8: "DT_COMPLEX64",
  9: "DT_INT64",
  10: "DT_BOOL",
  14: "DT_BFLOAT16",
  17: "DT_UINT16",
  18: "DT_COMPLEX128",
  19: "DT_HALF",
  20: "DT_RESOURCE",
  21: "DT_VARIANT",
  22: "DT_UINT32",
  23: "DT_UINT64",
};

export const tfDtypeName = (dtype: number): string => NAMES[dtype] ?? `DataType ${dtype}`;

export function datatypeOfTf(dtype: number): DataType | undefined {
  return BY_NUMBER.get(dtype);
}

export function tfDtypeOf(datatype: DataType): number {
  return NUMBER_OF.get(datatype) ?? 0;
}

/** The TensorProto repeated field of each type's values. */
export type ValField =
  | "float_val"
  | "double_val"
  | "int_val"
  | "string_val"
  | "int64_val"
  | "bool_val"
  | "half_val"
  | "uint32_val"
  | "uint64_val";

export const VAL_FIELDS: readonly ValField[] = [
  "float_val",
  "double_val",
  "int_val",
  "string_val",
  "int64_val",
  "bool_val",
  "half_val",
  "uint32_val",
  "uint64_val",
];

export const VAL_FIELD_OF: Readonly<Record<DataType, ValField>> = {
  FP32: "float_val",
  FP64: "double_val",
  INT32: "int_val",
  INT16: "int_val",
  INT8: "int_val",
  UINT8: "int_val",
  UINT16: "int_val",
  BYTES: "string_val",
  INT64: "int64_val",
  BOOL: "bool_val",
  FP16: "half_val",
  BF16: "half_val",
  UINT32: "uint32_val",
  UINT64: "uint64_val",
};
