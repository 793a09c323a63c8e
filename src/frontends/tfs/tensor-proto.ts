import {
  allocateArray,
  type DataType,
  elementByteSize,
  type NumericArray,
  type NumericDataType,
} from "../../core/datatype.ts";
import { invalidArg } from "../../core/errors.ts";
import { type NumericTensor, shapeInMessage, type Tensor } from "../../core/tensor.ts";
import { checkedElementCount } from "../../core/tensor-size.ts";
import { decodeRawTensor, encodeRawTensor } from "../common/raw-tensor.ts";
import { int64ToNumber } from "../grpc/int64.ts";
import type { DecodedNumbers } from "../grpc/typed-array-fields.ts";
import { typedTensorData } from "../grpc/typed-tensor-data.ts";
import type { TensorProtoMessage, TensorProtoToEncode, TensorShapeMessage } from "./messages.ts";
import { datatypeOfTf, tfDtypeName, tfDtypeOf, VAL_FIELD_OF, VAL_FIELDS, type ValField } from "./tf-dtype.ts";

// TensorFlow's TensorProto ↔ seqserve's Tensor. A request's values come in every form a
// client sends: `tensor_content` (raw little-endian bytes, kept as a view, no copy), or
// the typed `*_val` field of the dtype (decoded into a typed array that becomes the
// tensor's data; a single value fills the shape, as TensorFlow's version 0 encoding
// allows). Outputs go back in `tensor_content` (strings in `string_val`), which is what
// TensorFlow's make_ndarray and TF-Serving clients read.

/** The dims of a TensorShapeProto; undefined when the proto has none (or no shape at all). */
export function shapeOf(shape: TensorShapeMessage | null | undefined): number[] | undefined {
  if (shape === null || shape === undefined) return undefined;
  return (shape.dim ?? []).map((d) => int64ToNumber(d.size ?? 0));
}

function checkShape(input: string, shape: TensorShapeMessage | null | undefined): number[] {
  if (shape?.unknown_rank === true) {
    throw invalidArg(`input '${input}' has an unknown rank: a request tensor needs its full shape`);
  }
  const dims = shapeOf(shape) ?? [];
  if (dims.some((d) => !Number.isSafeInteger(d) || d < 0)) {
    throw invalidArg(
      `input '${input}' has an invalid shape ${shapeInMessage(dims)}: dimensions must be non-negative integers`,
    );
  }
  return dims;
}

type Values = NonNullable<TensorProtoMessage[ValField]>;

/** The tensor's data from its field's values (typed-tensor-data.ts); one value fills the shape. */
function valuesOf(
  input: string,
  datatype: DataType,
  field: ValField,
  values: Values,
  count: number,
): NumericArray | Uint8Array[] {
  // Version 0 encoding: one value stands for every element.
  const fill = values.length === 1 && count !== 1;
  if (values.length !== count && !fill) {
    throw invalidArg(
      `input '${input}' has ${values.length} values in ${field}, but its shape needs ${count} (or 1 to fill it)`,
    );
  }
  if (datatype === "BYTES") {
    const strings = values as readonly Uint8Array[];
    return fill ? new Array<Uint8Array>(count).fill(strings[0]!) : [...strings];
  }
  const data = typedTensorData(`input '${input}'`, datatype as NumericDataType, values as DecodedNumbers);
  if (!fill) return data;
  const filled = allocateArray(datatype as NumericDataType, count);
  (filled as Int32Array).fill((data as Int32Array)[0]!);
  return filled;
}

/**
 * What the single-value fills of one request may still take, in bytes: a value of a few
 * bytes fills a shape of any size, so the fills of all its inputs together are bounded.
 */
export interface FillBudget {
  bytesLeft: number;
}

/**
 * The tensor a request's TensorProto carries; INVALID_ARG naming the input when it cannot be
 * read. A single value fills its shape, taking its bytes from `fill`.
 */
export function decodeTensorProto(
  input: string,
  proto: TensorProtoMessage,
  fill: FillBudget = { bytesLeft: Number.POSITIVE_INFINITY },
): Tensor {
  const dtype = proto.dtype ?? 0;
  const datatype = datatypeOfTf(dtype);
  if (datatype === undefined) {
    throw invalidArg(`input '${input}' has dtype ${tfDtypeName(dtype)}, which seqserve does not serve`);
  }
  const shape = checkShape(input, proto.tensor_shape);
  const count = checkedElementCount(input, datatype, shape);
  const expected = VAL_FIELD_OF[datatype];
  const content = proto.tensor_content;
  let given: ValField | undefined;
  for (const field of VAL_FIELDS) {
    if ((proto[field]?.length ?? 0) === 0) continue;
    if (field !== expected || given !== undefined) {
      throw invalidArg(
        `input '${input}' of dtype ${tfDtypeName(dtype)} sets ${field}; its values belong in tensor_content or ${expected}`,
      );
    }
    given = field;
  }
  if (content !== undefined && content.length > 0) {
    if (given !== undefined) {
      throw invalidArg(`input '${input}' sets both tensor_content and ${given}: send its values once`);
    }
    if (datatype === "BYTES") {
      throw invalidArg(`input '${input}' of dtype DT_STRING must carry its values in string_val`);
    }
    return decodeRawTensor(input, datatype, shape, content);
  }
  if (given === undefined) {
    if (count === 0) return { datatype, shape, data: datatype === "BYTES" ? [] : allocateArray(datatype, 0) };
    throw invalidArg(
      `input '${input}' carries no values for its shape ${shapeInMessage(shape)}: set tensor_content or ${expected}`,
    );
  }
  const values = proto[given]!;
  if (values.length === 1) {
    // One value repeated over the shape: a string is repeated whole, with its length.
    const element =
      datatype === "BYTES" ? 4 + (values[0] as Uint8Array).byteLength : elementByteSize(datatype)!;
    const bytes = count * element;
    if (bytes > fill.bytesLeft) {
      throw invalidArg(
        `input '${input}' fills shape ${shapeInMessage(shape)} from one value: ${bytes} bytes of ${datatype}, more than the ${fill.bytesLeft} bytes the request's inputs may still expand to`,
      );
    }
    fill.bytesLeft -= bytes;
  }
  const data = valuesOf(input, datatype, given, values, count);
  return { datatype, shape, data } as Tensor;
}

function shapeMessage(shape: readonly number[]): TensorShapeMessage {
  return { dim: shape.map((size) => ({ size })) };
}

/** An output as a TensorProto: raw bytes in tensor_content, BYTES elements in string_val. */
export function encodeTensorProto(tensor: Tensor): TensorProtoToEncode {
  const base = { dtype: tfDtypeOf(tensor.datatype), tensor_shape: shapeMessage(tensor.shape) };
  if (tensor.datatype === "BYTES") return { ...base, string_val: tensor.data as Uint8Array[] };
  return { ...base, tensor_content: encodeRawTensor(tensor as NumericTensor) };
}

/** OVMS's `sequence_id` output: DT_UINT64, shape [1], the id in uint64_val. */
export function sequenceIdProto(id: bigint): TensorProtoToEncode {
  return { dtype: tfDtypeOf("UINT64"), tensor_shape: shapeMessage([1]), uint64_val: [id.toString()] };
}
