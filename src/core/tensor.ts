import { allocateArray, type DataType, type NumericArray, type NumericDataType } from "./datatype.ts";

/** BYTES tensors: one byte string per element, in row-major order. */
export type BytesElements = readonly Uint8Array[];

export type TensorData = NumericArray | BytesElements;

/**
 * A tensor as every layer of seqserve sees it: protocol-free, row-major, with data in
 * the typed array of its datatype (see datatype.ts). `data` may be a view over a larger
 * buffer (a request body, a worker's output); code that keeps a tensor beyond the
 * request that brought it must copy it.
 */
export interface Tensor {
  readonly datatype: DataType;
  readonly shape: readonly number[];
  readonly data: TensorData;
}

export interface NumericTensor extends Tensor {
  readonly datatype: NumericDataType;
  readonly data: NumericArray;
}

export function elementCount(shape: readonly number[]): number {
  let count = 1;
  for (const dim of shape) count *= dim;
  return count;
}

/**
 * "[1,512]": the spelling Triton uses (and JSON's): every dimension, no spaces (the
 * configuration's messages write "[1, 512]": config-node.ts's formatShapeSpaced).
 */
export function formatShape(shape: readonly number[]): string {
  return `[${shape.join(",")}]`;
}

/**
 * A shape as an error message names it. A client's shape can have any number of
 * dimensions: past 16, the middle ones are left out, so the message stays short.
 */
export function shapeInMessage(shape: readonly number[]): string {
  if (shape.length <= 16) return formatShape(shape);
  return `[${shape.slice(0, 8).join(",")},...(${shape.length} dimensions)...,${shape.slice(-2).join(",")}]`;
}

export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Bytes the tensor's data occupies (BYTES: the sum of element lengths). */
export function tensorByteLength(tensor: Tensor): number {
  if (tensor.datatype === "BYTES") {
    let total = 0;
    for (const element of tensor.data as BytesElements) total += element.byteLength;
    return total;
  }
  return (tensor.data as NumericArray).byteLength;
}

export function zeroTensor(datatype: DataType, shape: readonly number[]): Tensor {
  const count = elementCount(shape);
  if (datatype === "BYTES") {
    return { datatype, shape, data: Array.from({ length: count }, () => new Uint8Array(0)) };
  }
  return { datatype, shape, data: allocateArray(datatype, count) };
}

/** A copy that owns its memory (for tensors kept beyond the request that brought them). */
export function cloneTensor(tensor: Tensor): Tensor {
  if (tensor.datatype === "BYTES") {
    return {
      datatype: tensor.datatype,
      shape: [...tensor.shape],
      data: (tensor.data as BytesElements).map((e) => e.slice()),
    };
  }
  return { datatype: tensor.datatype, shape: [...tensor.shape], data: (tensor.data as NumericArray).slice() };
}
