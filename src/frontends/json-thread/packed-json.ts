import { isJsonObject } from "../common/http/json-body.ts";
import { isStringLeaves, packStrings, type StringLeaves } from "../common/kserve/json-tensor.ts";

// The forms in which the JSON thread sends a request's tensor data back to the main
// thread. Structured cloning a parsed array of numbers costs the main thread about half
// of what parsing it did (a double made per element again); one typed array of them is
// moved at no cost. No JSON value parses to a typed array, so no client's data can take
// these forms: a value holding one came from the thread.

/** Smaller arrays are sent as they are: copying them costs less than the typed array. */
const MIN_PACKED_LEAVES = 256;

/** Leaves packed for the move: all numbers as doubles, or all strings as UTF-8 bytes. */
export type PackedLeaves = Float64Array | StringLeaves;

/** A nested list of equal-length lists (an ndarray), by its shape and row-major leaves. */
export interface PackedArray {
  readonly shape: readonly number[];
  readonly leaves: PackedLeaves;
}

/** Rows of named values (TF-Serving's row form), each name's values stacked on a first axis. */
export interface PackedRows {
  readonly rows: number;
  /** By name, in the first row's order. A Map: no JSON value parses to one. */
  readonly named: ReadonlyMap<string, PackedArray>;
}

/** The memory of packed leaves, to move with the message that carries them. */
export function packedBuffers(leaves: PackedLeaves): ArrayBuffer[] {
  return leaves instanceof Float64Array
    ? [leaves.buffer as ArrayBuffer]
    : [leaves.utf8.buffer as ArrayBuffer, leaves.ends.buffer as ArrayBuffer];
}

const isPackedLeaves = (value: unknown): value is PackedLeaves =>
  value instanceof Float64Array || isStringLeaves(value);

export function isPackedArray(value: unknown): value is PackedArray {
  return typeof value === "object" && value !== null && isPackedLeaves((value as PackedArray).leaves);
}

export function isPackedRows(value: unknown): value is PackedRows {
  return typeof value === "object" && value !== null && (value as PackedRows).named instanceof Map;
}

/**
 * `leaves` packed: all numbers that JSON.parse read exactly as one Float64Array (integers
 * past 2^53 are left to be read again from the text), all strings as their UTF-8 bytes
 * in one buffer; undefined for fewer than MIN_PACKED_LEAVES, or any other mix.
 */
export function packLeaves(leaves: readonly unknown[]): PackedLeaves | undefined {
  if (leaves.length < MIN_PACKED_LEAVES) return undefined;
  if (typeof leaves[0] === "string") {
    return leaves.every((value) => typeof value === "string") ? packStrings(leaves as string[]) : undefined;
  }
  for (const value of leaves) {
    if (typeof value !== "number" || (Number.isInteger(value) && !Number.isSafeInteger(value)))
      return undefined;
  }
  return Float64Array.from(leaves as readonly number[]);
}

/** A nested list as a tensor: its shape (read along the first items) and row-major leaves. */
export interface Ndarray {
  readonly shape: number[];
  readonly leaves: unknown[];
}

/** Why a nested list is no tensor: deeper than allowed, or lists that differ in length or depth. */
export type NdarrayFault = { readonly fault: "deep" } | { readonly fault: "ragged" };

/**
 * `value` as a tensor of nested lists (TF-Serving's form; a bare value is a scalar), its
 * shape read along the first items, or why it is none: `shape` is then as far as read.
 * Lists `maxRank` deep at most are walked (recursion bounded by it).
 */
export function ndarray(value: unknown, maxRank: number): Ndarray | (NdarrayFault & { shape: number[] }) {
  const shape: number[] = [];
  for (let v: unknown = value; Array.isArray(v); v = v[0]) {
    shape.push(v.length);
    if (v.length === 0) break;
  }
  if (shape.length > maxRank) return { fault: "deep", shape };
  const leaves: unknown[] = [];
  const walk = (v: unknown, depth: number): boolean => {
    if (depth === shape.length) {
      if (Array.isArray(v)) return false;
      leaves.push(v);
      return true;
    }
    if (!Array.isArray(v) || v.length !== shape[depth]) return false;
    for (const item of v) if (!walk(item, depth + 1)) return false;
    return true;
  };
  return walk(value, 0) ? { shape, leaves } : { fault: "ragged", shape };
}

/** `value` as a PackedArray, when it is an ndarray (see ndarray) whose leaves pack. */
export function packNested(value: unknown, maxRank: number): PackedArray | undefined {
  if (!Array.isArray(value)) return undefined;
  const found = ndarray(value, maxRank);
  const leaves = "fault" in found ? undefined : packLeaves(found.leaves);
  return leaves === undefined ? undefined : { shape: found.shape, leaves };
}

/**
 * `rows` (objects) as PackedRows, when every row names the same members, in any order,
 * and each member's values are ndarrays (or bare values) of one shape whose leaves pack
 * together; undefined otherwise. `maxRank` bounds a stacked value's rank.
 */
export function packRows(rows: readonly unknown[], maxRank: number): PackedRows | undefined {
  const first = rows[0];
  if (!isJsonObject(first)) return undefined;
  const names = Object.keys(first);
  if (names.length === 0) return undefined;
  for (const row of rows) {
    if (!isJsonObject(row)) return undefined;
    const keys = Object.keys(row);
    if (keys.length !== names.length || keys.some((key) => !Object.hasOwn(first, key))) return undefined;
  }
  const named = new Map<string, PackedArray>();
  for (const name of names) {
    let shape: number[] | undefined;
    const leaves: unknown[] = [];
    for (const row of rows as Record<string, unknown>[]) {
      // A bare value is a row's scalar: stacked, a vector.
      const found = ndarray(row[name], maxRank - 1);
      if ("fault" in found) return undefined;
      if (shape === undefined) shape = found.shape;
      else if (found.shape.length !== shape.length || found.shape.some((n, d) => n !== shape![d]))
        return undefined;
      for (const leaf of found.leaves) leaves.push(leaf);
    }
    const packed = packLeaves(leaves);
    if (packed === undefined) return undefined;
    named.set(name, { shape: [rows.length, ...shape!], leaves: packed });
  }
  return { rows: rows.length, named };
}
