// The KServe v2 / Triton tensor datatypes and their in-memory representation.
//
// Every numeric datatype is held in the TypedArray that matches its element width, so
// tensors can be viewed over wire buffers and moved between threads without conversion.
// FP16 and BF16 have no JavaScript element type: they are kept as their raw 16-bit
// patterns in a Uint16Array. BOOL is one byte per element (0 or 1), as on the wire.
// BYTES elements are variable-length byte strings (see tensor.ts).

export const DATATYPES = [
  "BOOL",
  "UINT8",
  "UINT16",
  "UINT32",
  "UINT64",
  "INT8",
  "INT16",
  "INT32",
  "INT64",
  "FP16",
  "FP32",
  "FP64",
  "BYTES",
  "BF16",
] as const;

export type DataType = (typeof DATATYPES)[number];
export type NumericDataType = Exclude<DataType, "BYTES">;

export type NumericArray =
  | Uint8Array
  | Uint16Array
  | Uint32Array
  | BigUint64Array
  | Int8Array
  | Int16Array
  | Int32Array
  | BigInt64Array
  | Float32Array
  | Float64Array;

export interface TypedArrayConstructorOf<T extends NumericArray> {
  new (length: number): T;
  new (buffer: ArrayBufferLike, byteOffset?: number, length?: number): T;
  readonly BYTES_PER_ELEMENT: number;
}

const ARRAY_TYPES: Record<NumericDataType, TypedArrayConstructorOf<NumericArray>> = {
  BOOL: Uint8Array,
  UINT8: Uint8Array,
  UINT16: Uint16Array,
  UINT32: Uint32Array,
  UINT64: BigUint64Array,
  INT8: Int8Array,
  INT16: Int16Array,
  INT32: Int32Array,
  INT64: BigInt64Array,
  FP16: Uint16Array,
  FP32: Float32Array,
  FP64: Float64Array,
  BF16: Uint16Array,
};

const DATATYPE_SET: ReadonlySet<string> = new Set(DATATYPES);

export function isDataType(value: unknown): value is DataType {
  return typeof value === "string" && DATATYPE_SET.has(value);
}

/** Bytes per element; undefined for BYTES, whose elements vary in length. */
export function elementByteSize(datatype: DataType): number | undefined {
  return datatype === "BYTES" ? undefined : ARRAY_TYPES[datatype].BYTES_PER_ELEMENT;
}

export function arrayTypeOf(datatype: NumericDataType): TypedArrayConstructorOf<NumericArray> {
  return ARRAY_TYPES[datatype];
}

/** A zero-filled array of `length` elements of `datatype`. */
export function allocateArray(datatype: NumericDataType, length: number): NumericArray {
  return new ARRAY_TYPES[datatype](length);
}

/**
 * A view of `byteLength` bytes at `byteOffset` of `buffer` as `datatype`, without copying
 * when the offset is aligned to the element size, with one copy when it is not (a typed
 * array cannot start at a misaligned offset).
 */
export function viewArray(
  datatype: NumericDataType,
  buffer: ArrayBufferLike,
  byteOffset: number,
  byteLength: number,
): NumericArray {
  const Ctor = ARRAY_TYPES[datatype];
  const width = Ctor.BYTES_PER_ELEMENT;
  const length = byteLength / width;
  if (byteOffset % width === 0) return new Ctor(buffer, byteOffset, length);
  const aligned = new Uint8Array(byteLength);
  aligned.set(new Uint8Array(buffer, byteOffset, byteLength));
  return new Ctor(aligned.buffer, 0, length);
}

/** Triton's model-config spelling (TYPE_FP32) ⇄ the protocol spelling (FP32). */
const CONFIG_NAMES: Record<DataType, string> = {
  BOOL: "TYPE_BOOL",
  UINT8: "TYPE_UINT8",
  UINT16: "TYPE_UINT16",
  UINT32: "TYPE_UINT32",
  UINT64: "TYPE_UINT64",
  INT8: "TYPE_INT8",
  INT16: "TYPE_INT16",
  INT32: "TYPE_INT32",
  INT64: "TYPE_INT64",
  FP16: "TYPE_FP16",
  FP32: "TYPE_FP32",
  FP64: "TYPE_FP64",
  BYTES: "TYPE_STRING",
  BF16: "TYPE_BF16",
};

const FROM_CONFIG_NAME = new Map<string, DataType>(
  Object.entries(CONFIG_NAMES).map(([dt, name]) => [name, dt as DataType]),
);

export function configTypeName(datatype: DataType): string {
  return CONFIG_NAMES[datatype];
}

export function fromConfigTypeName(name: string): DataType | undefined {
  return FROM_CONFIG_NAME.get(name);
}
