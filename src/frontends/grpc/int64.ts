// 64-bit protobuf integers as they reach the frontend: Long objects from the hot-path
// decoder (proto-definitions.ts), decimal strings from proto-loader, or plain numbers.
// Converted exactly: to bigint for values (sequence ids, INT64/UINT64 tensors), to number
// where a safe integer is required (shapes).

/** The fields of a long.js Long that matter here. */
export interface LongLike {
  readonly low: number;
  readonly high: number;
  readonly unsigned: boolean;
}

export type Int64 = string | number | LongLike;

const TWO_32 = 2 ** 32;

/** The value's 64 bits read as unsigned (`unsigned`) or two's-complement signed. */
export function int64ToBigInt(value: Int64, unsigned: boolean): bigint {
  let bits: bigint;
  if (typeof value === "object") {
    bits = (BigInt(value.high >>> 0) << 32n) | BigInt(value.low >>> 0);
  } else {
    bits = BigInt(value);
  }
  return unsigned ? BigInt.asUintN(64, bits) : BigInt.asIntN(64, bits);
}

/** The value as a number; not exact beyond 2^53 (callers that need exactness check Number.isSafeInteger). */
export function int64ToNumber(value: Int64, unsigned = false): number {
  if (typeof value === "number") return value;
  if (typeof value === "string") return Number(value);
  const high = unsigned || value.unsigned ? value.high >>> 0 : value.high;
  return high * TWO_32 + (value.low >>> 0);
}

/** A number when it is a safe integer, otherwise the exact bigint. */
export function int64ToInteger(value: Int64, unsigned: boolean): number | bigint {
  const number = int64ToNumber(value, unsigned);
  return Number.isSafeInteger(number) ? number : int64ToBigInt(value, unsigned);
}
