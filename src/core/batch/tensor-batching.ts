import { allocateArray, type NumericArray } from "../datatype.ts";
import { type BytesElements, elementCount, type Tensor } from "../tensor.ts";

// Concatenating tensors into a batch and splitting a batch back, along any axis. Requests
// batch along axis 0; implicit state may carry its batch on another axis (Silero VAD's
// state is [2, batch, 128]), so both directions work on an arbitrary axis: a tensor is seen
// as [outer, rows, inner] around that axis and moved in contiguous runs of rows*inner.

function layout(shape: readonly number[], axis: number): { outer: number; inner: number } {
  let outer = 1;
  for (let i = 0; i < axis; i++) outer *= shape[i]!;
  let inner = 1;
  for (let i = axis + 1; i < shape.length; i++) inner *= shape[i]!;
  return { outer, inner };
}

/**
 * Concatenates `parts` along `axis` (all parts share every other dim and the datatype).
 * `padRows` zero rows are appended after the parts (Direct strategy's empty slots).
 * The result owns a fresh buffer, so it may be handed to an executor.
 */
export function concatAlongAxis(parts: readonly Tensor[], axis: number, padRows = 0): Tensor {
  const first = parts[0]!;
  const rowsOf = parts.map((p) => p.shape[axis]!);
  const totalRows = rowsOf.reduce((a, b) => a + b, 0) + padRows;
  const shape = [...first.shape];
  shape[axis] = totalRows;
  const { outer, inner } = layout(first.shape, axis);

  if (first.datatype === "BYTES") {
    const out: Uint8Array[] = new Array(elementCount(shape));
    const empty = new Uint8Array(0);
    for (let o = 0; o < outer; o++) {
      let row = 0;
      for (let p = 0; p < parts.length; p++) {
        const src = parts[p]!.data as BytesElements;
        const run = rowsOf[p]! * inner;
        const dst = (o * totalRows + row) * inner;
        for (let i = 0; i < run; i++) out[dst + i] = src[o * run + i]!;
        row += rowsOf[p]!;
      }
      for (let i = (o * totalRows + row) * inner; i < (o + 1) * totalRows * inner; i++) out[i] = empty;
    }
    return { datatype: first.datatype, shape, data: out };
  }

  const out = allocateArray(first.datatype, elementCount(shape));
  if (outer === 1) {
    // The common case (batch on axis 0): one copy per part.
    let offset = 0;
    for (const part of parts) {
      (out as Float32Array).set(part.data as Float32Array, offset);
      offset += (part.data as NumericArray).length;
    }
    return { datatype: first.datatype, shape, data: out };
  }
  for (let p = 0, row = 0; p < parts.length; p++) {
    const src = parts[p]!.data as Float32Array;
    const run = rowsOf[p]! * inner;
    for (let o = 0; o < outer; o++) {
      (out as Float32Array).set(src.subarray(o * run, (o + 1) * run), (o * totalRows + row) * inner);
    }
    row += rowsOf[p]!;
  }
  return { datatype: first.datatype, shape, data: out };
}

/**
 * Splits `tensor` along `axis` into pieces of `rows[i]` rows (their sum may be less than
 * the axis length: trailing padding rows are dropped). On axis 0 the pieces are views of
 * the batch (no copy) unless `copy` is set; on other axes they are always copies.
 */
export function splitAlongAxis(
  tensor: Tensor,
  axis: number,
  rows: readonly number[],
  copy = false,
): Tensor[] {
  const totalRows = tensor.shape[axis]!;
  const { outer, inner } = layout(tensor.shape, axis);
  const pieces: Tensor[] = [];
  let start = 0;
  for (const n of rows) {
    const shape = [...tensor.shape];
    shape[axis] = n;
    if (tensor.datatype === "BYTES") {
      const src = tensor.data as BytesElements;
      const out: Uint8Array[] = [];
      for (let o = 0; o < outer; o++) {
        const from = (o * totalRows + start) * inner;
        for (let i = 0; i < n * inner; i++) out.push(src[from + i]!);
      }
      pieces.push({ datatype: tensor.datatype, shape, data: out });
    } else if (outer === 1) {
      const src = tensor.data as Float32Array;
      const view = src.subarray(start * inner, (start + n) * inner);
      pieces.push({ datatype: tensor.datatype, shape, data: copy ? view.slice() : view });
    } else {
      const src = tensor.data as Float32Array;
      const out = allocateArray(tensor.datatype, outer * n * inner) as Float32Array;
      for (let o = 0; o < outer; o++) {
        const from = (o * totalRows + start) * inner;
        out.set(src.subarray(from, from + n * inner), o * n * inner);
      }
      pieces.push({ datatype: tensor.datatype, shape, data: out });
    }
    start += n;
  }
  return pieces;
}
