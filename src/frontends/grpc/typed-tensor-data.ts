import {
  allocateArray,
  arrayTypeOf,
  type DataType,
  type NumericArray,
  type NumericDataType,
} from "../../core/datatype.ts";
import { invalidArg } from "../../core/errors.ts";
import type { DecodedNumbers } from "./typed-array-fields.ts";

// A tensor's data from the typed array its protobuf field decoded into
// (typed-array-fields.ts), for KServe's InferTensorContents and TensorFlow's TensorProto
// alike: the array itself where it holds the datatype's own elements (FP32 from floats,
// INT64 from int64s…), else a copy. The narrow integer types travel widened (INT8/INT16
// in int32 fields, UINT8/UINT16 in uint32 or int32 ones), so their values are checked
// against their range instead of being silently truncated.

/** Inclusive ranges of the integer types that travel widened. */
const WIDENED_RANGES: Partial<Record<DataType, readonly [number, number]>> = {
  INT8: [-128, 127],
  INT16: [-32768, 32767],
  UINT8: [0, 255],
  UINT16: [0, 65535],
};

/**
 * `values` as `datatype`'s data. `where` names the values in a refusal (e.g. "input 'x'
 * for model 'm'"). An empty field gives an empty array.
 */
export function typedTensorData(
  where: string,
  datatype: NumericDataType,
  values: DecodedNumbers | readonly never[],
): NumericArray {
  if (values.length === 0) return allocateArray(datatype, 0);
  if (values instanceof arrayTypeOf(datatype)) return values as NumericArray;
  const range = WIDENED_RANGES[datatype];
  if (range !== undefined) {
    const [min, max] = range;
    const numbers = values as Int32Array | Uint32Array;
    for (let i = 0; i < numbers.length; i++) {
      const value = numbers[i]!;
      if (value < min || value > max) {
        throw invalidArg(
          `value ${value} at index ${i} of ${where} is out of range for ${datatype} [${min}, ${max}]`,
        );
      }
    }
  }
  const data = allocateArray(datatype, values.length);
  // Numbers into numbers (a half's bits into FP16's Uint16Array): converted element by element.
  (data as Int32Array).set(values as Int32Array);
  return data;
}
