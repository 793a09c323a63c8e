import type { DataType } from "../../core/datatype.ts";
import { invalidArg, ServerError } from "../../core/errors.ts";
import { fromFloat16Array, toFloat16Array } from "../../core/float16.ts";
import { type BytesElements, elementCount, type NumericTensor, type Tensor } from "../../core/tensor.ts";
import { checkedElementCount } from "../../core/tensor-size.ts";
import { isJsonObject, type JsonObject } from "../common/http/json-body.ts";
import { checkJsonDepth } from "../common/json-depth.ts";
import { jsonPreview } from "../common/json-preview.ts";
import { matchesAfter } from "../common/json-source-text.ts";
import { jsonSyntaxFault } from "../common/json-syntax.ts";
import {
  decodeJsonTensor,
  jsonTensorData,
  notUtf8Element,
  type SourceTokens,
} from "../common/kserve/json-tensor.ts";
import { parseJsonWithNonFinite } from "../common/non-finite-json.ts";
import { firstNotUtf8Byte, notUtf8Description } from "../common/utf8-body.ts";
import {
  isPackedArray,
  ndarray,
  type PackedLeaves,
  packNested,
  packRows,
} from "../json-thread/packed-json.ts";
import { decimalsText } from "./decimal-text.ts";
import { SPECIAL_INPUTS } from "./special-inputs.ts";

// Tensors in TF-Serving's REST JSON: a value is a (nested) list whose nesting gives the
// shape, or a bare scalar; bytes travel as strings or as {"b64": "…"}. A row-format
// request stacks its instances on a new first axis. Outputs are written as nested lists
// (exact digits for 64-bit integers); string outputs whose name ends in `_bytes`, or
// that are not UTF-8, as {"b64": "…"}.

const decoder = new TextDecoder("utf-8", { fatal: true });

/** TensorFlow's limit on a tensor's rank; it also bounds how deep the lists are walked. */
const MAX_RANK = 254;

const isB64 = (value: unknown): value is { b64: string } =>
  typeof value === "object" &&
  value !== null &&
  !Array.isArray(value) &&
  Object.keys(value).length === 1 &&
  typeof (value as { b64?: unknown }).b64 === "string";

/**
 * The shape of a nested list and its leaves in row-major order; refuses ragged lists (a
 * list whose items differ in length or depth). A list the JSON thread packed is taken as
 * it is (packed only when it was an ndarray).
 */
function shapeAndLeaves(
  input: string,
  value: unknown,
): { shape: number[]; leaves: unknown[] | PackedLeaves } {
  if (isPackedArray(value)) return { shape: [...value.shape], leaves: value.leaves };
  const found = ndarray(value, MAX_RANK);
  if (!("fault" in found)) return found;
  const { shape } = found;
  throw invalidArg(
    found.fault === "deep"
      ? `input '${input}' nests its lists ${shape.length} deep: a tensor has at most ${MAX_RANK} dimensions`
      : `input '${input}' is not a valid ndarray: its lists differ in length or depth (shape from the first items: [${shape.join(",")}])`,
  );
}

function bytesOf(input: string, leaf: unknown, index: number): Uint8Array {
  if (typeof leaf === "string") {
    const fault = notUtf8Element(leaf);
    if (fault !== undefined) throw invalidArg(`element ${index} of input '${input}' ${fault}`);
    return Buffer.from(leaf, "utf8");
  }
  if (isB64(leaf)) return Buffer.from(leaf.b64, "base64");
  throw invalidArg(
    `element ${index} of input '${input}' must be a string or {"b64": "..."}, got ${jsonPreview(leaf, 40)}`,
  );
}

/**
 * A REST body's JSON, read as TF-Serving reads it (with `NaN` and the infinities as
 * values, which Python's json writes: non-finite-json.ts), with the text as parsed, for
 * exact 64-bit integers; or, for text that does not parse, OVMS's JSON_INVALID (412, "The
 * file is not valid json - Error: … Offset: N", its rapidjson's words).
 */
export function parseRestJsonBody(text: string): { readonly json: unknown; readonly text: string } {
  checkJsonDepth(text);
  try {
    return parseJsonWithNonFinite(text);
  } catch (error) {
    const { description, byteOffset } = jsonSyntaxFault(text, error);
    throw new ServerError(
      "FAILED_PRECONDITION",
      `The file is not valid json - Error: ${description}${byteOffset === undefined ? "" : ` Offset: ${byteOffset}`}`,
    );
  }
}

/**
 * The first `length` bytes of a REST body as text; for bytes that are not UTF-8, OVMS's
 * JSON_INVALID, as for text that does not parse, with the byte offset.
 */
export function restJsonText(body: Buffer, length: number): string {
  const bytes = body.subarray(0, length);
  const offset = firstNotUtf8Byte(bytes);
  if (offset !== undefined) {
    throw new ServerError(
      "FAILED_PRECONDITION",
      `The file is not valid json - Error: ${notUtf8Description(bytes, offset)} Offset: ${offset}`,
    );
  }
  return bytes.toString("utf8");
}

/**
 * A map of input names: not a list, and not a value that is not one: `{"b64": …}` is one
 * element of a bytes input, and a packed list (packed-json.ts) a list.
 */
export const isNamedMap = (value: unknown): value is JsonObject =>
  isJsonObject(value) && !isB64(value) && !isPackedArray(value);

/**
 * On the JSON thread: a predict request's tensor data packed in place (packed-json.ts),
 * `packed` told of each. The column form's value, or each of its named values but the
 * special inputs (read from the lists); the row form's instances, stacked by name when
 * every instance is an object. Anything that does not pack stays as parsed.
 */
export function packRestTensors(json: unknown, packed: (leaves: PackedLeaves) => void): void {
  if (!isJsonObject(json)) return;
  const body = json;
  const pack = <T extends { leaves: PackedLeaves }>(found: T | undefined): T | undefined => {
    if (found !== undefined) packed(found.leaves);
    return found;
  };
  const { inputs, instances } = body;
  if (Array.isArray(inputs)) body.inputs = pack(packNested(inputs, MAX_RANK)) ?? inputs;
  else if (isNamedMap(inputs)) {
    for (const name in inputs) {
      if (SPECIAL_INPUTS.has(name) || !Array.isArray(inputs[name])) continue;
      inputs[name] = pack(packNested(inputs[name], MAX_RANK)) ?? inputs[name];
    }
  }
  if (!Array.isArray(instances) || instances.length === 0) return;
  if (instances.every(isNamedMap)) {
    const rows = packRows(instances, MAX_RANK);
    if (rows === undefined) return;
    for (const column of rows.named.values()) packed(column.leaves);
    body.instances = rows;
  } else if (!instances.some(isNamedMap)) {
    body.instances = pack(packNested(instances, MAX_RANK)) ?? instances;
  }
}

/**
 * A JSON value as a tensor of `datatype` (the model input's); `tokens` reads 64-bit
 * integers past 2^53 exactly from the request's text.
 */
export function decodeRestTensor(
  input: string,
  datatype: DataType,
  value: unknown,
  tokens?: SourceTokens,
): Tensor {
  const { shape, leaves } = shapeAndLeaves(input, value);
  if (datatype === "BYTES") {
    checkedElementCount(input, datatype, shape);
    // Packed strings are their UTF-8 bytes already; packed numbers are refused as numbers are.
    if (!Array.isArray(leaves) && !(leaves instanceof Float64Array)) {
      return decodeJsonTensor(input, datatype, shape, leaves);
    }
    return { datatype, shape, data: Array.from(leaves, (leaf: unknown, i) => bytesOf(input, leaf, i)) };
  }
  if (datatype === "BF16") {
    throw invalidArg(
      `input '${input}' is BF16, which the REST API does not carry: use gRPC (half_val or tensor_content)`,
    );
  }
  if (datatype === "FP16") {
    // Each number rounded to half once, from its double: through float32 it could be
    // rounded twice, to another half than numpy's float16.
    const wide = decodeJsonTensor(input, "FP64", shape, leaves) as NumericTensor;
    return { datatype, shape, data: toFloat16Array(wide.data as Float64Array) };
  }
  return decodeJsonTensor(input, datatype, shape, leaves, tokens);
}

function bytesText(name: string, element: Uint8Array): string {
  if (!name.endsWith("_bytes")) {
    try {
      return JSON.stringify(decoder.decode(element));
    } catch {}
  }
  return `{"b64":${JSON.stringify(Buffer.from(element).toString("base64"))}}`;
}

/** The texts of a tensor's innermost rows (or of its one element, for a scalar). */
function rowTexts(name: string, tensor: Tensor): string[] {
  const width = tensor.shape.length === 0 ? 1 : tensor.shape[tensor.shape.length - 1]!;
  const count = elementCount(tensor.shape);
  const rows = width === 0 ? elementCount(tensor.shape.slice(0, -1)) : count / width;
  const texts = new Array<string>(rows);
  if (tensor.datatype === "BYTES") {
    const elements = tensor.data as BytesElements;
    for (let r = 0; r < rows; r++) {
      const row = elements.slice(r * width, (r + 1) * width).map((e) => bytesText(name, e));
      texts[r] = `[${row.join(",")}]`;
    }
  } else {
    let data = (tensor as NumericTensor).data;
    let datatype = tensor.datatype;
    if (datatype === "FP16") {
      data = fromFloat16Array(data as Uint16Array);
      datatype = "FP32";
    } else if (datatype === "BF16") {
      const wide = new Float32Array(data.length);
      new Uint32Array(wide.buffer).set(Array.from(data as Uint16Array, (bits) => bits << 16));
      data = wide;
      datatype = "FP32";
    }
    for (let r = 0; r < rows; r++) {
      const row = (data as Float32Array).subarray(r * width, (r + 1) * width);
      // Floats as TF-Serving writes them (1.0, not KServe's 1; NaN, not null).
      texts[r] =
        datatype === "FP32" || datatype === "FP64"
          ? `[${decimalsText(row)}]`
          : jsonTensorData({ datatype, shape: [row.length], data: row });
    }
  }
  return tensor.shape.length === 0 ? [texts[0]!.slice(1, -1)] : texts;
}

/** The tensor as a nested JSON list (a bare value for a scalar). */
export function restTensorText(name: string, tensor: Tensor): string {
  let level = rowTexts(name, tensor);
  for (let d = tensor.shape.length - 2; d >= 0; d--) {
    const size = tensor.shape[d]!;
    if (size === 0) {
      level = new Array<string>(elementCount(tensor.shape.slice(0, d))).fill("[]");
      continue;
    }
    const grouped: string[] = [];
    for (let i = 0; i < level.length; i += size) grouped.push(`[${level.slice(i, i + size).join(",")}]`);
    level = grouped;
  }
  return level[0] ?? "[]";
}

/** Row `row` of a tensor batched on its first axis, as its own tensor. */
export function tensorRow(tensor: Tensor, row: number): Tensor {
  const shape = tensor.shape.slice(1);
  const per = elementCount(shape);
  const data =
    tensor.datatype === "BYTES"
      ? (tensor.data as BytesElements).slice(row * per, (row + 1) * per)
      : (tensor as NumericTensor).data.subarray(row * per, (row + 1) * per);
  return { datatype: tensor.datatype, shape, data } as Tensor;
}

/** The rest of a special input's name after `"sequence_`, then a number written with a fraction or an exponent. */
const SPECIAL_INPUT_NOT_INTEGER = /(?:id|control_input|step)"\s*:\s*\[?(?:\s*-?\d+\s*,)*\s*-?\d+[.eE]/y;

/**
 * Whether a special input (`sequence_id`, `sequence_control_input`, `sequence_step`) may
 * be written with a fraction or an exponent (`[5.0]`, `[1e3]`): OVMS's rapidjson reads
 * those as doubles and refuses them, where JSON.parse gives integers. One string search,
 * made where the body is parsed (on the JSON thread for a large one): false, and the
 * special inputs are read from the parsed value alone.
 */
export function mayHaveSpecialInputNotInteger(text: string): boolean {
  return matchesAfter(text, '"sequence_', SPECIAL_INPUT_NOT_INTEGER);
}
