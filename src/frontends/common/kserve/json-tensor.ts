import {
  allocateArray,
  type DataType,
  type NumericArray,
  type NumericDataType,
} from "../../../core/datatype.ts";
import { invalidArg } from "../../../core/errors.ts";
import { type BytesElements, type NumericTensor, shapeInMessage, type Tensor } from "../../../core/tensor.ts";
import { checkedElementCount } from "../../../core/tensor-size.ts";
import { exactInteger } from "../json-source-text.ts";
import { NON_FINITE_MARKS, nonFiniteText } from "../non-finite-json.ts";

// Tensor data in the KServe v2 JSON form: a flat or nested (row-major) array of JSON
// values, one per element. Reading copies flat data straight into the datatype's typed
// array (nested data is first flattened into its leaves, iteratively), checking each
// element's JSON type and range. Writing produces the text of the flat array.
//
// Exactness: INT64/UINT64 elements travel as JSON numbers, which JSON.parse reads as
// doubles; values beyond ±2^53 are read again from the request's text, exactly (as
// Triton's and TF-Serving's JSON readers do), where the caller gives it. Outgoing 64-bit
// integers are written with their exact digits. FP32 elements are written as the shortest
// decimal of their double value, which reads back as the same float32 (as Triton writes
// them), -0 as -0. Non-finite floats, which JSON proper cannot express, are written as
// Triton's rapidjson writes them (`NaN`, `Infinity`, `-Infinity`: tritonclient and
// Python's json read them) and read as it reads them (non-finite-json.ts).
// Data may also be written nested to its shape, for formats whose arrays carry the shape.

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * -0 as Triton writes it (rapidjson's dtoa). "-0", which JSON.parse reads back as -0, is
 * read as the integer 0 by Python's json and by python-rapidjson (tritonclient's reader),
 * whose clients would get +0.0.
 */
export const NEGATIVE_ZERO_TEXT = "-0.0";

function describe(value: unknown): string {
  if (typeof value === "string") {
    // A non-finite token as the client wrote it, not as it was marked.
    if (NON_FINITE_MARKS.has(value)) return value.slice(1);
    return JSON.stringify(value.length > 32 ? `${value.slice(0, 32)}…` : value);
  }
  if (Array.isArray(value)) return "an array";
  if (value === null) return "null";
  if (typeof value === "object") return "an object";
  return String(value);
}

function elementError(input: string, datatype: DataType, index: number, value: unknown, expected: string) {
  return invalidArg(
    `unable to parse 'data' for input '${input}': element ${index} is ${describe(value)}, but ${datatype} expects ${expected}`,
  );
}

// Each fill loop copies a flat array of JSON values into `target`, checking each one. It
// returns the index of the first element that is itself an array (data nested after a
// flat start, to be flattened and filled again), or -1 when done.

type Fill = (source: ArrayLike<unknown>) => number;

function fillIntegers(
  input: string,
  datatype: DataType,
  target: Record<number, number>,
  min: number,
  max: number,
): Fill {
  return (source) => {
    for (let i = 0; i < source.length; i++) {
      const value = source[i];
      if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
        if (Array.isArray(value)) return i;
        throw elementError(input, datatype, i, value, `an integer in [${min}, ${max}]`);
      }
      target[i] = value;
    }
    return -1;
  };
}

/**
 * The long number tokens of a tensor's data in its request's source text, by element
 * index (json-source-text.ts longNumberTokens): where integers past 2^53 are read exactly.
 */
export type SourceTokens = () => ReadonlyMap<number, string>;

function fillBigInts(
  input: string,
  datatype: "INT64" | "UINT64",
  target: Record<number, bigint>,
  tokens: SourceTokens | undefined,
): Fill {
  // 2^63 and 2^64 are exact doubles; every double below them converts exactly.
  const min = datatype === "INT64" ? -(2 ** 63) : 0;
  const limit = datatype === "INT64" ? 2 ** 63 : 2 ** 64;
  const expected = datatype === "INT64" ? "an integer in [-2^63, 2^63)" : "an integer in [0, 2^64)";
  const minExact = BigInt(min);
  const maxExact = BigInt(limit) - 1n;
  let read: ReadonlyMap<number, string> | undefined;
  return (source) => {
    for (let i = 0; i < source.length; i++) {
      const value = source[i];
      // Past 2^53 the double JSON.parse gave is rounded (or infinite): the digits are read again.
      if (
        typeof value === "number" &&
        tokens !== undefined &&
        !Number.isSafeInteger(value) &&
        (Number.isInteger(value) || !Number.isFinite(value))
      ) {
        read ??= tokens();
        const token = read.get(i) ?? "";
        const exact = exactInteger(token, minExact, maxExact);
        if (exact === null) {
          const shown = token.length > 32 ? `${token.slice(0, 32)}…` : token;
          throw invalidArg(
            `unable to parse 'data' for input '${input}': element ${i} is ${shown}, but ${datatype} expects ${expected}`,
          );
        }
        if (exact !== undefined) {
          target[i] = exact;
          continue;
        }
      }
      if (typeof value !== "number" || !Number.isInteger(value) || value < min || value >= limit) {
        if (Array.isArray(value)) return i;
        throw elementError(input, datatype, i, value, expected);
      }
      target[i] = BigInt(value);
    }
    return -1;
  };
}

function fillFloats(input: string, datatype: DataType, target: Record<number, number>): Fill {
  return (source) => {
    for (let i = 0; i < source.length; i++) {
      const value = source[i];
      if (typeof value !== "number") {
        if (Array.isArray(value)) return i;
        const marked = typeof value === "string" ? NON_FINITE_MARKS.get(value) : undefined;
        if (marked === undefined) throw elementError(input, datatype, i, value, "a number");
        target[i] = marked;
        continue;
      }
      target[i] = value;
    }
    return -1;
  };
}

function fillBools(input: string, target: Uint8Array): Fill {
  return (source) => {
    for (let i = 0; i < source.length; i++) {
      const value = source[i];
      if (value === true) target[i] = 1;
      else if (value === false) target[i] = 0;
      else if (Array.isArray(value)) return i;
      else throw elementError(input, "BOOL", i, value, "true or false");
    }
    return -1;
  };
}

/**
 * Why `text` cannot be a BYTES element, or undefined: a lone surrogate (a "\ud800" escape
 * with no pair), which UTF-8 cannot carry; encoded, it would reach the model as U+FFFD
 * (ef bf bd). Triton's rapidjson refuses it ("The surrogate pair in string is invalid").
 */
export function notUtf8Element(text: string): string | undefined {
  if ((text as WellFormedCheck).isWellFormed()) return undefined;
  let lone = 0;
  for (const character of text) {
    const code = character.charCodeAt(0);
    if (character.length === 1 && code >= 0xd800 && code <= 0xdfff) {
      lone = code;
      break;
    }
  }
  return `holds a lone surrogate (\\u${lone.toString(16)}), which UTF-8 cannot carry`;
}

function fillStrings(input: string, target: Uint8Array[]): Fill {
  return (source) => {
    for (let i = 0; i < source.length; i++) {
      const value = source[i];
      if (typeof value !== "string") {
        if (Array.isArray(value)) return i;
        throw elementError(input, "BYTES", i, value, "a string");
      }
      const fault = notUtf8Element(value);
      if (fault !== undefined)
        throw invalidArg(`unable to parse 'data' for input '${input}': element ${i} ${fault}`);
      target[i] = encoder.encode(value);
    }
    return -1;
  };
}

function numericFill(
  input: string,
  datatype: NumericDataType,
  target: NumericArray,
  tokens: SourceTokens | undefined,
): Fill {
  switch (datatype) {
    case "BOOL":
      return fillBools(input, target as Uint8Array);
    case "UINT8":
      return fillIntegers(input, datatype, target as Uint8Array, 0, 0xff);
    case "UINT16":
      return fillIntegers(input, datatype, target as Uint16Array, 0, 0xffff);
    case "UINT32":
      return fillIntegers(input, datatype, target as Uint32Array, 0, 0xffffffff);
    case "INT8":
      return fillIntegers(input, datatype, target as Int8Array, -0x80, 0x7f);
    case "INT16":
      return fillIntegers(input, datatype, target as Int16Array, -0x8000, 0x7fff);
    case "INT32":
      return fillIntegers(input, datatype, target as Int32Array, -0x80000000, 0x7fffffff);
    case "INT64":
    case "UINT64":
      return fillBigInts(input, datatype, target as BigInt64Array, tokens);
    case "FP32":
    case "FP64":
      return fillFloats(input, datatype, target as Float32Array);
    default:
      // FP16 / BF16: refused before reaching here.
      throw invalidArg(`invalid datatype for input ${input}`);
  }
}

/** The leaves of nested arrays in row-major order. Iterative: nesting depth costs no stack. */
export function flattenLeaves(data: readonly unknown[]): unknown[] {
  const leaves: unknown[] = [];
  const arrays: (readonly unknown[])[] = [data];
  const positions: number[] = [0];
  outer: while (arrays.length > 0) {
    const top = arrays.length - 1;
    const array = arrays[top] as readonly unknown[];
    let i = positions[top] as number;
    while (i < array.length) {
      const value = array[i++];
      if (Array.isArray(value)) {
        positions[top] = i;
        arrays.push(value);
        positions.push(0);
        continue outer;
      }
      leaves.push(value);
    }
    arrays.pop();
    positions.pop();
  }
  return leaves;
}

/**
 * The leaves of an all-string `data` as the JSON thread sends them: their UTF-8 bytes in
 * one buffer, element i from `ends[i - 1]` (0 for the first) to `ends[i]`. No JSON value
 * parses to typed arrays, so no client's data can take this form.
 */
export interface StringLeaves {
  readonly utf8: Uint8Array;
  readonly ends: Uint32Array;
}

export function isStringLeaves(value: unknown): value is StringLeaves {
  return (
    typeof value === "object" &&
    value !== null &&
    (value as StringLeaves).utf8 instanceof Uint8Array &&
    (value as StringLeaves).ends instanceof Uint32Array
  );
}

/** ES2024's String#isWellFormed, which Node 20 has and the type library here does not. */
type WellFormedCheck = string & { isWellFormed(): boolean };

/** Strings as StringLeaves; undefined when one is not well-formed UTF-16 (it would not read back the same). */
export function packStrings(strings: readonly string[]): StringLeaves | undefined {
  const ends = new Uint32Array(strings.length);
  let total = 0;
  for (let i = 0; i < strings.length; i++) {
    const text = strings[i]!;
    if (!(text as WellFormedCheck).isWellFormed()) return undefined;
    total += Buffer.byteLength(text, "utf8");
    ends[i] = total;
  }
  const utf8 = Buffer.allocUnsafeSlow(total);
  let offset = 0;
  for (const text of strings) offset += utf8.write(text, offset, "utf8");
  return { utf8: new Uint8Array(utf8.buffer, 0, total), ends };
}

/** A BYTES tensor of StringLeaves: views of the one buffer, no copy. */
function bytesOfStringLeaves(shape: readonly number[], { utf8, ends }: StringLeaves): Tensor {
  const elements: Uint8Array[] = new Array(ends.length);
  let start = 0;
  for (let i = 0; i < ends.length; i++) {
    const end = ends[i]!;
    elements[i] = utf8.subarray(start, end);
    start = end;
  }
  return { datatype: "BYTES", shape, data: elements };
}

function unpackStrings({ utf8, ends }: StringLeaves): string[] {
  const strings: string[] = new Array(ends.length);
  let start = 0;
  for (let i = 0; i < ends.length; i++) {
    const end = ends[i]!;
    strings[i] = decoder.decode(utf8.subarray(start, end));
    start = end;
  }
  return strings;
}

function countError(input: string, shape: readonly number[], count: number, found: number) {
  return invalidArg(
    `unable to parse 'data' for input '${input}': shape ${shapeInMessage(shape)} has ${count} elements, but 'data' holds ${found}`,
  );
}

/**
 * Reads the JSON `data` of input `input` into a tensor of `datatype` and `shape`;
 * `tokens`, where the request's text is at hand, reads 64-bit integers past 2^53 exactly.
 * `data` may also be a Float64Array (the leaves of an all-number array, each a double
 * JSON.parse read exactly) or StringLeaves, as a body parsed on the JSON thread gives them.
 */
export function decodeJsonTensor(
  input: string,
  datatype: DataType,
  shape: readonly number[],
  data: unknown,
  tokens?: SourceTokens,
): Tensor {
  const doubles = data instanceof Float64Array;
  if (datatype === "FP16" || datatype === "BF16") {
    // Triton's wording, which clients and their tests look for.
    throw invalidArg(
      `receiving ${datatype} data via JSON is not supported. Please use the binary data format for input ${input}`,
    );
  }
  // Arrays first: the JSON thread's forms come only with large bodies.
  if (!Array.isArray(data) && isStringLeaves(data)) {
    const count = checkedElementCount(input, datatype, shape);
    if (datatype === "BYTES" && data.ends.length === count) return bytesOfStringLeaves(shape, data);
    // Any other case is refused, or rare: read as the strings the client sent.
    return decodeJsonTensor(input, datatype, shape, unpackStrings(data), tokens);
  }
  if (!Array.isArray(data) && !doubles) {
    throw invalidArg(`unable to parse 'data' for input '${input}': expected an array, got ${describe(data)}`);
  }
  const count = checkedElementCount(input, datatype, shape);
  // Flat data (the common case) is read in place; nested data is flattened first. The
  // element count is checked against the data before the tensor is allocated.
  let source: ArrayLike<unknown>;
  if (doubles) source = data;
  else {
    source = Array.isArray(data[0]) ? flattenLeaves(data) : data;
    if (source.length !== count && source === data) source = flattenLeaves(data);
  }
  if (source.length !== count) throw countError(input, shape, count, source.length);
  let tensorData: NumericArray | BytesElements;
  let fill: Fill;
  if (datatype === "BYTES") {
    const elements: Uint8Array[] = new Array(count);
    fill = fillStrings(input, elements);
    tensorData = elements;
  } else {
    const array = allocateArray(datatype, count);
    if (doubles && (datatype === "FP32" || datatype === "FP64")) {
      // Numbers all, and any double is a float: one native conversion.
      (array as Float32Array | Float64Array).set(data);
      return { datatype, shape, data: array };
    }
    fill = numericFill(input, datatype, array, tokens);
    tensorData = array;
  }
  if (fill(source) !== -1) {
    source = flattenLeaves(source as readonly unknown[]);
    if (source.length !== count) throw countError(input, shape, count, source.length);
    fill(source);
  }
  return { datatype, shape, data: tensorData };
}

/**
 * The text for a value JSON.stringify cannot write as Triton does (-0, which it writes as
 * 0; NaN and the infinities, which it writes as null), or undefined.
 */
function specialText(v: number): string | undefined {
  if (v - v !== 0) return nonFiniteText(v);
  if (v === 0 && 1 / v < 0) return NEGATIVE_ZERO_TEXT;
  return undefined;
}

/**
 * Finite floats, comma-separated, each as its shortest round-trip decimal (Number#toString).
 * JSON.stringify of a plain array writes them so, straight into its output, where
 * TypedArray#join makes a string per element through V8's number cache: for values not
 * seen before, 120 against 300 ns an element (`bench/json-floats.ts`). The array is filled
 * by a loop, which keeps it an array of unboxed doubles: Array.from goes through the typed
 * array's iterator and boxes every element that is not a small integer.
 */
function finiteFloatsText(array: Float32Array | Float64Array): string {
  const values: number[] = [];
  for (let i = 0; i < array.length; i++) values.push(array[i] as number);
  return JSON.stringify(values).slice(1, -1);
}

function floatText(array: Float32Array | Float64Array): string {
  // Only the elements that cannot be written as plain numbers are written one by one, and
  // the runs between them still go in one piece. String() writes -0 as "0", and models do
  // produce -0 (Silero VAD's state does), so it is written as Triton writes it: "-0.0".
  let text = "";
  let from = 0;
  for (let i = 0; i < array.length; i++) {
    const special = specialText(array[i] as number);
    if (special === undefined) continue;
    if (i > from) text += `${finiteFloatsText(array.subarray(from, i))},`;
    text += i === array.length - 1 ? special : `${special},`;
    from = i + 1;
  }
  if (from === 0) return finiteFloatsText(array);
  return from < array.length ? text + finiteFloatsText(array.subarray(from)) : text;
}

/** Whether an output of `datatype` can be sent as JSON: FP16 and BF16 cannot, as in Triton. */
export const sentAsJson = (datatype: DataType): boolean => datatype !== "FP16" && datatype !== "BF16";

/** The refusal of an output of `datatype` asked for as JSON, in Triton's words. */
export function notSentAsJson(datatype: DataType) {
  return invalidArg(
    `sending ${datatype} data via JSON is not supported. Please use the binary data format for output`,
  );
}

/** The JSON text of a tensor's data as a flat array, e.g. `[1,2,3]`. */
export function jsonTensorData(tensor: Tensor): string {
  switch (tensor.datatype) {
    case "BYTES": {
      const elements = tensor.data as BytesElements;
      const parts = new Array<string>(elements.length);
      for (let i = 0; i < elements.length; i++) parts[i] = JSON.stringify(decoder.decode(elements[i]));
      return `[${parts.join(",")}]`;
    }
    case "BOOL": {
      const array = (tensor as NumericTensor).data as Uint8Array;
      const parts = new Array<string>(array.length);
      for (let i = 0; i < array.length; i++) parts[i] = array[i] === 0 ? "false" : "true";
      return `[${parts.join(",")}]`;
    }
    case "FP32":
    case "FP64":
      return `[${floatText((tensor as NumericTensor).data as Float32Array | Float64Array)}]`;
    case "FP16":
    case "BF16":
      throw notSentAsJson(tensor.datatype);
    default:
      // Integer arrays (BigInt64Array included) join to their exact decimal digits.
      return `[${((tensor as NumericTensor).data as Int32Array).join(",")}]`;
  }
}

/** The JSON text of a tensor's data nested to its shape, e.g. `[[1,2],[3,4]]`; a scalar is bare. */
export function nestedJsonTensorData(tensor: Tensor): string {
  const flat = jsonTensorData(tensor);
  const shape = tensor.shape;
  if (shape.length === 1) return flat;
  // Element texts, re-read from the flat text: strings are the only elements that may hold
  // commas, and JSON.parse + stringify gives them back exactly.
  const elements =
    tensor.datatype === "BYTES"
      ? (JSON.parse(flat) as string[]).map((e) => JSON.stringify(e))
      : flat.slice(1, -1).split(",");
  if (shape.length === 0) return elements[0] ?? "null";
  let position = 0;
  const nest = (axis: number): string => {
    const parts = new Array<string>(shape[axis]!);
    for (let i = 0; i < parts.length; i++)
      parts[i] = axis === shape.length - 1 ? elements[position++]! : nest(axis + 1);
    return `[${parts.join(",")}]`;
  };
  return nest(0);
}
