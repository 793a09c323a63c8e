import type { DataType } from "../../core/datatype.ts";
import { invalidArg } from "../../core/errors.ts";
import { type BytesElements, shapeInMessage, type Tensor } from "../../core/tensor.ts";
import { checkedElementCount } from "../../core/tensor-size.ts";
import type { InferTensorContentsMessage } from "./messages.ts";
import type { DecodedNumbers } from "./typed-array-fields.ts";
import { typedTensorData } from "./typed-tensor-data.ts";

// Tensors sent as typed values (InferTensorContents) rather than raw bytes. Each datatype
// has exactly one field; the narrow integer types travel widened (INT8/INT16 in
// int_contents, UINT8/UINT16 in uint_contents). FP16 and BF16 have no typed field. The
// decoder gives each field's values in a typed array of its own, which becomes the
// tensor's data (typed-tensor-data.ts).

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

interface Where {
  readonly input: string;
  readonly model: string;
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
  const data =
    datatype === "BYTES"
      ? (values as BytesElements)
      : typedTensorData(
          `input '${where.input}' for model '${where.model}'`,
          datatype,
          values as DecodedNumbers,
        );
  return { datatype, shape, data } as Tensor;
}
