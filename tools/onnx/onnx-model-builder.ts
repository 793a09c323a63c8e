import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import protobuf from "protobufjs";
import { arrayTypeOf, type DataType, type NumericArray } from "../../src/core/datatype.ts";

// Writes small ONNX models in code, for tests and examples. Datatypes are spelled the
// KServe way (FP32, INT64, BYTES, ...) so a test can use the same names for the model it
// builds and the requests it sends. The encoding goes through a trimmed copy of ONNX's
// own onnx.proto, so field numbers are ONNX's and the bytes load in any ONNX runtime.

const root = new protobuf.Root().loadSync(fileURLToPath(new URL("./onnx.proto", import.meta.url)), {
  keepCase: true,
});
const ModelProto = root.lookupType("onnx.ModelProto");

/** ONNX TensorProto.DataType numbers for each KServe datatype. */
const ONNX_ELEMENT_TYPES: Readonly<Record<DataType, number>> = {
  FP32: 1,
  UINT8: 2,
  INT8: 3,
  UINT16: 4,
  INT16: 5,
  INT32: 6,
  INT64: 7,
  BYTES: 8,
  BOOL: 9,
  FP16: 10,
  FP64: 11,
  UINT32: 12,
  UINT64: 13,
  BF16: 16,
};

/** A dimension: a size, -1 for an unnamed unknown size, or a name for a symbolic one. */
export type OnnxDim = number | string;

/**
 * Tensor contents: the typed array of the datatype (FP16/BF16 as Uint16Array bit
 * patterns, BOOL as Uint8Array), plain numbers / bigints / booleans, or for BYTES strings
 * (UTF-8 encoded) or byte arrays.
 */
export type OnnxTensorData =
  | NumericArray
  | readonly number[]
  | readonly bigint[]
  | readonly boolean[]
  | readonly string[]
  | readonly Uint8Array[];

interface OnnxTensorValue {
  readonly datatype: DataType;
  readonly dims: readonly number[];
  readonly data: OnnxTensorData;
}

/** An attribute whose ONNX type is spelled out (a plain `1` would be an INT). */
export type OnnxTypedAttribute =
  | { readonly kind: "float"; readonly value: number }
  | { readonly kind: "int"; readonly value: number | bigint }
  | { readonly kind: "string"; readonly value: string }
  | { readonly kind: "floats"; readonly value: readonly number[] }
  | { readonly kind: "ints"; readonly value: readonly (number | bigint)[] }
  | { readonly kind: "strings"; readonly value: readonly string[] }
  | { readonly kind: "tensor"; readonly value: OnnxTensorValue }
  | { readonly kind: "graph"; readonly value: OnnxGraphBuilder };

/**
 * An attribute value. Plain values are typed by what they hold: an integer number or a
 * bigint is INT, another number FLOAT, a string STRING, arrays INTS / FLOATS / STRINGS the
 * same way. Use `attribute.*` for anything else (a float that happens to be whole, a tensor,
 * a subgraph).
 */
export type OnnxAttributeValue =
  | number
  | bigint
  | string
  | readonly number[]
  | readonly bigint[]
  | readonly string[]
  | OnnxTypedAttribute;

export const attribute = {
  float: (value: number): OnnxTypedAttribute => ({ kind: "float", value }),
  int: (value: number | bigint): OnnxTypedAttribute => ({ kind: "int", value }),
  string: (value: string): OnnxTypedAttribute => ({ kind: "string", value }),
  floats: (value: readonly number[]): OnnxTypedAttribute => ({ kind: "floats", value }),
  ints: (value: readonly (number | bigint)[]): OnnxTypedAttribute => ({ kind: "ints", value }),
  strings: (value: readonly string[]): OnnxTypedAttribute => ({ kind: "strings", value }),
  tensor: (datatype: DataType, dims: readonly number[], data: OnnxTensorData): OnnxTypedAttribute => ({
    kind: "tensor",
    value: { datatype, dims, data },
  }),
  graph: (value: OnnxGraphBuilder): OnnxTypedAttribute => ({ kind: "graph", value }),
};

// Plain objects in onnx.proto's shape, handed to protobufjs' fromObject.
type ProtoObject = { [field: string]: unknown };

const utf8 = new TextEncoder();

function tensorProto(name: string, value: OnnxTensorValue): ProtoObject {
  const { datatype, dims, data } = value;
  const proto: ProtoObject = { name, dims: [...dims], data_type: ONNX_ELEMENT_TYPES[datatype] };
  const count = dims.reduce((a, b) => a * b, 1);
  if (data.length !== count) {
    throw new Error(`tensor '${name}': ${data.length} elements given for dims [${dims.join(",")}]`);
  }
  if (datatype === "BYTES") {
    proto.string_data = (data as readonly (string | Uint8Array)[]).map((e) =>
      typeof e === "string" ? utf8.encode(e) : e,
    );
    return proto;
  }
  // Everything numeric goes in raw_data: little-endian, fixed width, as the typed array holds it.
  const array = toTypedArray(datatype, data);
  proto.raw_data = new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
  return proto;
}

function toTypedArray(datatype: Exclude<DataType, "BYTES">, data: OnnxTensorData): NumericArray {
  const Ctor = arrayTypeOf(datatype);
  if (ArrayBuffer.isView(data)) {
    if (!(data instanceof Ctor)) throw new Error(`${datatype} data must be a ${Ctor.name}`);
    return data as NumericArray;
  }
  const out = new Ctor(data.length);
  const big = out instanceof BigInt64Array || out instanceof BigUint64Array;
  for (let i = 0; i < data.length; i++) {
    const element = data[i];
    if (typeof element === "string" || element instanceof Uint8Array || element === undefined) {
      throw new Error(`${datatype} data must be numbers`);
    }
    const n = typeof element === "boolean" ? Number(element) : element;
    out[i] = big ? BigInt(n) : Number(n);
  }
  return out;
}

function dimProto(dim: OnnxDim): ProtoObject {
  if (typeof dim === "string") return { dim_param: dim };
  if (dim === -1) return {};
  if (!Number.isInteger(dim) || dim < 0) throw new Error(`invalid dimension ${dim}`);
  return { dim_value: dim };
}

function valueInfo(name: string, datatype: DataType, dims: readonly OnnxDim[] | undefined): ProtoObject {
  const tensorType: ProtoObject = { elem_type: ONNX_ELEMENT_TYPES[datatype] };
  // Without a shape the rank itself is unknown; an empty shape is a scalar.
  if (dims !== undefined) tensorType.shape = { dim: dims.map(dimProto) };
  return { name, type: { tensor_type: tensorType } };
}

const int64 = (value: number | bigint): number | string =>
  typeof value === "bigint" ? value.toString() : value;

function attributeProto(name: string, value: OnnxAttributeValue): ProtoObject {
  const typed = typeAttribute(value);
  switch (typed.kind) {
    case "float":
      return { name, type: "FLOAT", f: typed.value };
    case "int":
      return { name, type: "INT", i: int64(typed.value) };
    case "string":
      return { name, type: "STRING", s: utf8.encode(typed.value) };
    case "floats":
      return { name, type: "FLOATS", floats: [...typed.value] };
    case "ints":
      return { name, type: "INTS", ints: typed.value.map(int64) };
    case "strings":
      return { name, type: "STRINGS", strings: typed.value.map((s) => utf8.encode(s)) };
    case "tensor":
      return { name, type: "TENSOR", t: tensorProto(name, typed.value) };
    case "graph":
      return { name, type: "GRAPH", g: typed.value.toGraphProto() };
  }
}

function typeAttribute(value: OnnxAttributeValue): OnnxTypedAttribute {
  if (typeof value === "bigint") return { kind: "int", value };
  if (typeof value === "number")
    return Number.isInteger(value) ? { kind: "int", value } : { kind: "float", value };
  if (typeof value === "string") return { kind: "string", value };
  if (Array.isArray(value)) {
    const list: readonly unknown[] = value;
    if (list.every((v) => typeof v === "string")) return { kind: "strings", value: list as string[] };
    if (list.every((v) => typeof v === "bigint" || (typeof v === "number" && Number.isInteger(v)))) {
      return { kind: "ints", value: list as (number | bigint)[] };
    }
    return { kind: "floats", value: list as number[] };
  }
  return value as OnnxTypedAttribute;
}

/** A graph: the model's main graph, or a subgraph for Loop / If / Scan bodies. */
export class OnnxGraphBuilder {
  readonly #name: string;
  readonly #inputs: ProtoObject[] = [];
  readonly #outputs: ProtoObject[] = [];
  readonly #initializers: ProtoObject[] = [];
  readonly #nodes: ProtoObject[] = [];
  #docString = "";

  constructor(name = "graph") {
    this.#name = name;
  }

  /** A graph input; `dims` undefined = unknown rank, [] = scalar. */
  input(name: string, datatype: DataType, dims: readonly OnnxDim[] | undefined): this {
    this.#inputs.push(valueInfo(name, datatype, dims));
    return this;
  }

  output(name: string, datatype: DataType, dims: readonly OnnxDim[] | undefined): this {
    this.#outputs.push(valueInfo(name, datatype, dims));
    return this;
  }

  /** The graph's description (GraphProto.doc_string). */
  description(text: string): this {
    this.#docString = text;
    return this;
  }

  /** A constant the nodes can read by name. */
  initializer(name: string, datatype: DataType, dims: readonly number[], data: OnnxTensorData): this {
    this.#initializers.push(tensorProto(name, { datatype, dims, data }));
    return this;
  }

  node(
    opType: string,
    inputs: readonly string[],
    outputs: readonly string[],
    attributes: Readonly<Record<string, OnnxAttributeValue>> = {},
    options: { readonly name?: string; readonly domain?: string } = {},
  ): this {
    this.#nodes.push({
      op_type: opType,
      name: options.name ?? `${opType}_${this.#nodes.length}`,
      domain: options.domain ?? "",
      input: [...inputs],
      output: [...outputs],
      attribute: Object.entries(attributes).map(([name, value]) => attributeProto(name, value)),
    });
    return this;
  }

  toGraphProto(): ProtoObject {
    return {
      name: this.#name,
      input: this.#inputs,
      output: this.#outputs,
      initializer: this.#initializers,
      node: this.#nodes,
      ...(this.#docString === "" ? {} : { doc_string: this.#docString }),
    };
  }
}

export interface OnnxModelOptions {
  /** Version of the default ("ai.onnx") operator set. */
  readonly opset: number;
  /** Defaults to the IR version that introduced `opset`'s era (8 for opsets 15-18, ...). */
  readonly irVersion?: number;
  /** Further operator sets, e.g. { "com.microsoft": 1 }. */
  readonly domains?: Readonly<Record<string, number>>;
  readonly graphName?: string;
}

function defaultIrVersion(opset: number): number {
  if (opset >= 21) return 10;
  if (opset >= 19) return 9;
  if (opset >= 15) return 8;
  if (opset >= 13) return 7;
  return 6;
}

/** A whole model: a graph plus the operator sets it uses. */
export class OnnxModelBuilder extends OnnxGraphBuilder {
  readonly #options: OnnxModelOptions;

  constructor(options: OnnxModelOptions) {
    super(options.graphName ?? "main");
    this.#options = options;
  }

  toBytes(): Uint8Array {
    const { opset, irVersion, domains = {} } = this.#options;
    const model = ModelProto.fromObject({
      ir_version: irVersion ?? defaultIrVersion(opset),
      producer_name: "seqserve-onnx-builder",
      opset_import: [
        { domain: "", version: opset },
        ...Object.entries(domains).map(([domain, version]) => ({ domain, version })),
      ],
      graph: this.toGraphProto(),
    });
    return ModelProto.encode(model).finish();
  }
}

export async function writeOnnxModel(path: string, bytes: Uint8Array): Promise<void> {
  await writeFile(path, bytes);
}
