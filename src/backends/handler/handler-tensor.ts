import { arrayTypeOf, isDataType, type NumericDataType } from "../../core/datatype.ts";
import { elementCount, formatShape, type Tensor } from "../../core/tensor.ts";

// Whether a value a handler hands back is a tensor seqserve can carry, and the tensor it
// is: the typed array of its datatype and as many elements as its shape says. BYTES
// elements may be given as strings (sent as UTF-8).

const encoder = new TextEncoder();

export function looksLikeTensor(value: unknown): boolean {
  if (typeof value !== "object" || value === null) return false;
  const v = value as Partial<Tensor>;
  return isDataType(v.datatype) && Array.isArray(v.shape) && v.data !== undefined;
}

/** The tensor `value` is, or an error naming `what` and the problem. */
export function checkTensor(what: string, value: unknown): Tensor {
  if (!looksLikeTensor(value)) {
    throw new Error(`${what} is not a tensor: expected { datatype, shape, data }`);
  }
  const { datatype, shape, data } = value as Tensor;
  if (!shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw new Error(`${what} has shape ${formatShape(shape)}: dimensions must be non-negative integers`);
  }
  const count = elementCount(shape);
  if (datatype === "BYTES") {
    if (!Array.isArray(data))
      throw new Error(`${what} is BYTES: its data must be an array of Uint8Array or string`);
    const elements = (data as unknown[]).map((e) => {
      if (typeof e === "string") return encoder.encode(e);
      if (e instanceof Uint8Array) return e;
      throw new Error(`${what} is BYTES: each element must be a Uint8Array or a string`);
    });
    if (elements.length !== count) {
      throw new Error(
        `${what} has ${elements.length} elements, but its shape ${formatShape(shape)} needs ${count}`,
      );
    }
    return { datatype, shape, data: elements };
  }
  const type = arrayTypeOf(datatype as NumericDataType);
  if (!(data instanceof type)) {
    throw new Error(`${what} is ${datatype}: its data must be a ${type.name}`);
  }
  if (data.length !== count) {
    throw new Error(
      `${what} has ${data.length} elements, but its shape ${formatShape(shape)} needs ${count}`,
    );
  }
  return { datatype, shape, data };
}
