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

/**
 * What a BYTES element costs held in memory beyond its bytes. Each is a Uint8Array: a view
 * of a buffer it shares with its neighbours (BYTES from a request body, a worker or a
 * tier's record) takes 104 bytes of V8's heap with its array slot, one with an ArrayBuffer
 * of its own (a copy, as a kept answer holds) 88 more, 192: measured with
 * process.memoryUsage() around 1e6 of each, Node 20. Counted at their lengths alone, 40
 * sequences keeping 262,144 empty strings each counted nothing and held 1.4 GB.
 */
const BYTES_ELEMENT_OVERHEAD = 104;
const BYTES_OWN_BUFFER_OVERHEAD = 88;

/**
 * Bytes the tensor holds in memory: what every budget of bytes the server holds counts
 * (sequence state, STARTs waiting for a slot, answers kept, responses not yet taken).
 * Numeric data at its size; BYTES at its elements' lengths plus what each costs as the
 * Uint8Array it is held in (an empty string is not free to hold).
 */
export function tensorHeldBytes(tensor: Tensor): number {
  if (tensor.datatype !== "BYTES") return (tensor.data as NumericArray).byteLength;
  const elements = tensor.data as BytesElements;
  let total = elements.length * BYTES_ELEMENT_OVERHEAD;
  let previous: ArrayBufferLike | undefined;
  for (const element of elements) {
    total += element.byteLength;
    if (element.buffer !== previous) total += BYTES_OWN_BUFFER_OVERHEAD;
    previous = element.buffer;
  }
  return total;
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
