import type { DataType, NumericArray } from "../../core/datatype.ts";
import { invalidArg } from "../../core/errors.ts";
import { type BytesElements, shapeInMessage, type Tensor } from "../../core/tensor.ts";
import { checkedElementCount } from "../../core/tensor-size.ts";
import { type Int64, int64ToBigInt } from "./int64.ts";
import type { InferTensorContentsMessage } from "./messages.ts";

// Tensors sent as typed values (InferTensorContents) rather than raw bytes. Each datatype
// has exactly one field; the narrow integer types travel widened (INT8/INT16 in
// int_contents, UINT8/UINT16 in uint_contents), so their values are range-checked here
// instead of being silently truncated. FP16 and BF16 have no typed field.

type ContentsField = keyof InferTensorContentsMessage;

const CONTENTS_FIELDS: readonly ContentsField[] = [
  "bool_contents",
  "int_contents",
  "int64_contents",
  "uint_contents",
  "uint64_contents",
  "fp32_contents",
  "fp64_contents",
  "bytes_contents",
];

const FIELD_OF: Readonly<Record<DataType, ContentsField | undefined>> = {
  BOOL: "bool_contents",
  INT8: "int_contents",
  INT16: "int_contents",
  INT32: "int_contents",
  INT64: "int64_contents",
  UINT8: "uint_contents",
  UINT16: "uint_contents",
  UINT32: "uint_contents",
  UINT64: "uint64_contents",
  FP32: "fp32_contents",
  FP64: "fp64_contents",
  BYTES: "bytes_contents",
  FP16: undefined,
  BF16: undefined,
};

/** Inclusive ranges of the integer types that travel widened. */
const RANGES: Partial<Record<DataType, readonly [number, number]>> = {
  INT8: [-128, 127],
  INT16: [-32768, 32767],
  UINT8: [0, 255],
  UINT16: [0, 65535],
};

interface Where {
  readonly input: string;
  readonly model: string;
}

function checkRange(where: Where, datatype: DataType, values: readonly number[]): void {
  const range = RANGES[datatype];
  if (range === undefined) return;
  const [min, max] = range;
  for (let i = 0; i < values.length; i++) {
    const value = values[i] as number;
    if (value < min || value > max) {
      throw invalidArg(
        `value ${value} at index ${i} of input '${where.input}' for model '${where.model}' is out of range for ${datatype} [${min}, ${max}]`,
      );
    }
  }
}

function bigints<T extends BigInt64Array | BigUint64Array>(
  into: T,
  values: readonly Int64[],
  unsigned: boolean,
): T {
  for (let i = 0; i < values.length; i++) into[i] = int64ToBigInt(values[i] as Int64, unsigned);
  return into;
}

function typedData(datatype: DataType, values: readonly unknown[]): NumericArray | BytesElements {
  switch (datatype) {
    case "BOOL": {
      const bools = values as readonly boolean[];
      const data = new Uint8Array(bools.length);
      for (let i = 0; i < bools.length; i++) data[i] = bools[i] ? 1 : 0;
      return data;
    }
    case "INT8":
      return Int8Array.from(values as readonly number[]);
    case "INT16":
      return Int16Array.from(values as readonly number[]);
    case "INT32":
      return Int32Array.from(values as readonly number[]);
    case "UINT8":
      return Uint8Array.from(values as readonly number[]);
    case "UINT16":
      return Uint16Array.from(values as readonly number[]);
    case "UINT32":
      return Uint32Array.from(values as readonly number[]);
    case "INT64":
      return bigints(new BigInt64Array(values.length), values as readonly Int64[], false);
    case "UINT64":
      return bigints(new BigUint64Array(values.length), values as readonly Int64[], true);
    case "FP32":
      return Float32Array.from(values as readonly number[]);
    case "FP64":
      return Float64Array.from(values as readonly number[]);
    case "BYTES":
      return values as BytesElements;
    default:
      throw new Error(`${datatype} has no typed contents`);
  }
}

/**
 * The tensor an input carries in `contents`. Throws INVALID_ARG naming the input when the
 * field does not match the datatype, when the value count disagrees with the shape, or
 * when a value does not fit the datatype.
 */
export function decodeTensorContents(
  where: Where,
  datatype: DataType,
  shape: readonly number[],
  contents: InferTensorContentsMessage,
): Tensor {
  const expected = FIELD_OF[datatype];
  let field: ContentsField | undefined;
  for (const candidate of CONTENTS_FIELDS) {
    const values = contents[candidate];
    if (values === undefined || values.length === 0) continue;
    if (field !== undefined) {
      throw invalidArg(
        `input '${where.input}' for model '${where.model}' sets both ${field} and ${candidate}; use the one field of its datatype ${datatype}`,
      );
    }
    field = candidate;
  }
  if (expected === undefined) {
    throw invalidArg(
      `input '${where.input}' for model '${where.model}' is ${datatype}, which has no typed contents: send it in raw_input_contents`,
    );
  }
  if (field !== undefined && field !== expected) {
    throw invalidArg(
      `unexpected explicit tensor data for input tensor '${where.input}' for model '${where.model}': ${field} given for datatype '${datatype}', expected ${expected}`,
    );
  }
  const values = contents[expected] ?? [];
  const count = checkedElementCount(where.input, datatype, shape);
  if (values.length !== count) {
    throw invalidArg(
      `input '${where.input}' for model '${where.model}' has ${values.length} values in ${expected}, but shape ${shapeInMessage(shape)} needs ${count}`,
    );
  }
  checkRange(where, datatype, values as readonly number[]);
  return { datatype, shape, data: typedData(datatype, values) };
}
