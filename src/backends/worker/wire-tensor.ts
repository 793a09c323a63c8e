import type { DataType, NumericArray } from "../../core/datatype.ts";
import { internal, invalidArg } from "../../core/errors.ts";
import { type BytesElements, elementCount, formatShape, type Tensor } from "../../core/tensor.ts";

// How tensors cross between threads. postMessage copies a typed array's *whole* buffer
// unless that buffer is transferred, so numeric data is sent by transferring a buffer the
// tensor owns entirely (no copy), or a one-copy buffer of its own when the data is a view
// into something larger (a request body, a pooled Buffer) or shared memory. BYTES
// elements are packed into one byte buffer plus offsets, so a batch of strings is two
// transfers rather than one clone per element.

/** BYTES data in transit: element i is bytes[offsets[i] .. offsets[i + 1]). */
export interface PackedBytes {
  readonly offsets: Uint32Array;
  readonly bytes: Uint8Array;
}

export interface WireTensor {
  readonly name: string;
  readonly datatype: DataType;
  readonly shape: readonly number[];
  readonly data: NumericArray | PackedBytes;
}

/** True when transferring `array`'s buffer moves exactly its data and nothing else. */
function ownsWholeBuffer(array: NumericArray): boolean {
  const buffer = array.buffer;
  return buffer instanceof ArrayBuffer && array.byteOffset === 0 && array.byteLength === buffer.byteLength;
}

function addTransfer(transfer: ArrayBuffer[], buffer: ArrayBuffer): void {
  // The same buffer may back two tensors; listing it twice makes postMessage throw.
  if (!transfer.includes(buffer)) transfer.push(buffer);
}

/** Numeric data ready to transfer: the array itself when it owns its buffer, else a copy. */
export function transferableArray(array: NumericArray, transfer: ArrayBuffer[]): NumericArray {
  const owned = ownsWholeBuffer(array) ? array : array.slice();
  addTransfer(transfer, owned.buffer as ArrayBuffer);
  return owned;
}

function packBytes(elements: BytesElements | readonly Uint8Array[], transfer: ArrayBuffer[]): PackedBytes {
  const offsets = new Uint32Array(elements.length + 1);
  let total = 0;
  for (let i = 0; i < elements.length; i++) {
    total += elements[i]!.byteLength;
    offsets[i + 1] = total;
  }
  const bytes = new Uint8Array(total);
  for (let i = 0; i < elements.length; i++) bytes.set(elements[i]!, offsets[i]!);
  transfer.push(offsets.buffer, bytes.buffer);
  return { offsets, bytes };
}

function unpackBytes(packed: PackedBytes): Uint8Array[] {
  const { offsets, bytes } = packed;
  const count = offsets.length - 1;
  const elements: Uint8Array[] = new Array(count);
  for (let i = 0; i < count; i++) elements[i] = bytes.subarray(offsets[i]!, offsets[i + 1]!);
  return elements;
}

/**
 * A tensor as it is posted to another thread; its buffers are added to `transfer`. Its
 * data must hold as many elements as its shape says: besides a malformed tensor
 * (INVALID_ARG), this refuses data whose buffer was already transferred (detached, so
 * empty: the server handed one tensor over twice, INTERNAL), which postMessage would drop
 * without a word, leaving the run unanswered.
 */
export function toWire(name: string, tensor: Tensor, transfer: ArrayBuffer[]): WireTensor {
  const elements = elementCount(tensor.shape);
  const held = tensor.data;
  if (held.length !== elements) {
    const detached = held.length === 0 && ArrayBuffer.isView(held) && held.buffer.byteLength === 0;
    const message = `tensor '${name}' holds ${held.length} elements where its shape ${formatShape(tensor.shape)} needs ${elements}`;
    throw detached
      ? internal(`${message}: its buffer was already handed to another thread`)
      : invalidArg(message);
  }
  const data =
    tensor.datatype === "BYTES"
      ? packBytes(tensor.data as BytesElements, transfer)
      : transferableArray(tensor.data as NumericArray, transfer);
  return { name, datatype: tensor.datatype, shape: tensor.shape, data };
}

/** The tensor a WireTensor carries (numeric tensors are used as they arrive, without copying). */
export function fromWire(wire: WireTensor): Tensor {
  if (wire.datatype !== "BYTES") return wire as Tensor;
  return { datatype: wire.datatype, shape: wire.shape, data: unpackBytes(wire.data as PackedBytes) };
}
