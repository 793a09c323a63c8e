import { isDataType } from "../../../core/datatype.ts";
import { invalidArg } from "../../../core/errors.ts";
import type { InferRequest, ParameterValue, ReceivedAt } from "../../../core/infer.ts";
import type { ServedModel } from "../../../core/model.ts";
import {
  isTritonSequenceParameter,
  readSequenceControl,
  unparsableSequenceParameter,
} from "../../../core/sequence/sequence-parameters.ts";
import type { SharedMemoryRegions, SharedMemorySlice } from "../../../core/shared-memory.ts";
import type { Tensor } from "../../../core/tensor.ts";
import { OFF_THREAD_JSON_BYTES, parseJsonOffThread } from "../../json-thread/json-thread.ts";
import { isJsonObject, type JsonObject } from "../http/json-body.ts";
import { jsonPreview } from "../json-preview.ts";
import {
  elementSourceTexts,
  exactInteger,
  longNumberTokens,
  mayHaveSequenceIdNotInteger,
  memberSourceText,
} from "../json-source-text.ts";
import { parseRequestJson, requestJsonText } from "../json-syntax.ts";
import { nonFiniteValue } from "../non-finite-json.ts";
import { decodeRawTensor, type RawTensorRequest } from "../raw-tensor.ts";
import { BinaryInputs, rawInputTensor } from "./binary-tensor.ts";
import { type Classification, classificationCount, classificationFor } from "./classification.ts";
import { decodeJsonTensor, notSentAsJson, sentAsJson } from "./json-tensor.ts";
import { checkReservedParameter } from "./reserved-parameters.ts";
import { type SharedMemoryHold, SharedMemoryRequest } from "./shared-memory-tensors.ts";
import { refuseUnsupportedExtensions } from "./unsupported-extensions.ts";

// A KServe v2 HTTP inference body → the protocol-free InferRequest, plus how the client
// wants the outputs back (JSON or binary). Only the wire format is checked here (types,
// shapes, element counts, binary sizes); whether the inputs suit the model is the core's
// business. Binary inputs stay views over the body buffer.

export interface OutputEncoding {
  /** Outputs not named in `binary` are sent binary when true. */
  readonly binaryByDefault: boolean;
  /** Per-output choices from `outputs[i].parameters.binary_data`. */
  readonly binary: ReadonlyMap<string, boolean>;
  /** Outputs asked for as classes (`outputs[i].parameters.classification`), of `model`. */
  readonly classification?: Classification;
  /**
   * What the request holds in shared memory: its regions, and the outputs to be written
   * there (`outputs[i].parameters.shared_memory_region`). Its frontend releases it once the
   * request is answered.
   */
  readonly sharedMemory?: SharedMemoryHold | undefined;
}

export interface DecodedInferRequest {
  readonly request: InferRequest;
  readonly encoding: OutputEncoding;
}

export interface DecodeOptions {
  /** Aborts the request while it has not run (client gone). */
  readonly signal?: AbortSignal | undefined;
  /**
   * How outputs go back when the request does not choose with `binary_data_output`.
   * Unset, HTTP's rule: JSON for a JSON request, binary for a raw body (which has nowhere
   * to ask for JSON). A stream sets it once for the whole connection.
   */
  readonly binaryOutputByDefault?: boolean | undefined;
  /** The caller (its API key's name), for the sequences it starts. */
  readonly principal?: string | undefined;
  /** The `triton_` parameters the request may set (reserved-parameters.ts); none over HTTP. */
  readonly reservedParameters?: readonly string[] | undefined;
  /** Where tensors may be read from and written to shared memory; unset, such requests are refused. */
  readonly sharedMemory?: SharedMemoryRegions | undefined;
  /** When the request was read (for tracing). */
  readonly received?: ReceivedAt | undefined;
}

/**
 * A request's JSON source, where what JSON.parse cannot say is read again: 64-bit
 * integers exactly, and whether a `sequence_id` is written as a fraction. `text` may be
 * decoded only when first read (a body parsed on another thread, json-thread/).
 */
export interface JsonSource {
  readonly text: string;
  /** Set when a first look has already found every `sequence_id` written as an integer. */
  readonly sequenceIdsAreIntegers?: boolean;
}

/** The JSON part of an inference request, parsed once, with its source. */
export interface InferJson extends JsonSource {
  readonly object: JsonObject;
}

const NO_CHOICES: ReadonlyMap<string, boolean> = new Map();

function kindOf(value: unknown): string {
  if (value === undefined) return "nothing";
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") return "an object";
  return `${typeof value} ${jsonPreview(value)}`;
}

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

function readShape(input: string, value: unknown): number[] {
  if (!Array.isArray(value) || !value.every(isCount)) {
    throw invalidArg(
      `Unable to parse 'shape' for input '${input}': expected an array of non-negative integers, got ${value === undefined ? "nothing" : jsonPreview(value)}`,
    );
  }
  return value;
}

interface ReadParameters {
  readonly parameters: Record<string, ParameterValue>;
  /** undefined when the request does not say. */
  readonly binaryOutput: boolean | undefined;
}

const UINT64_MAX = (1n << 64n) - 1n;

/**
 * `timeout` or `priority` written as Triton's reader takes it, an unsigned integer of at
 * most 64 bits: `5.0`, `1e6` or 2^64 are doubles to rapidjson, which Triton refuses. Read
 * from the source text, which only a request with one of them pays for.
 */
function checkUnsignedText(source: JsonSource, name: "timeout" | "priority"): void {
  const member = memberSourceText(source.text, ["parameters", name]);
  if (member !== undefined && typeof exactInteger(member, 0n, UINT64_MAX) !== "bigint") {
    throw unparsableSequenceParameter(name);
  }
}

/**
 * A number `sequence_id` at `path` in the request's JSON `source`, read as Triton reads it:
 * a uint64 above 2^53 again from its source digits (JSON.parse rounded it), and one
 * written as a fraction or with an exponent (`1.0`, `1e3`) refused, as rapidjson reads
 * those as doubles, which Triton does not take as an id. Anything else keeps its parsed
 * value, which the sequence fields' reader checks.
 */
export function sequenceIdNumber(
  source: JsonSource,
  parsed: number,
  path: readonly string[] = ["parameters", "sequence_id"],
): ParameterValue {
  if (Number.isSafeInteger(parsed)) {
    // Most requests: one search of the text finds no such token.
    if (source.sequenceIdsAreIntegers ?? !mayHaveSequenceIdNotInteger(source.text)) return parsed;
    const member = memberSourceText(source.text, path);
    if (member !== undefined && !/^-?\d+$/.test(member)) throw unparsableSequenceParameter("sequence_id");
    return parsed;
  }
  const member = memberSourceText(source.text, path);
  return (member === undefined ? undefined : exactInteger(member, 0n, UINT64_MAX)) ?? parsed;
}

const INT64_MIN = -(1n << 63n);
const INT64_MAX = (1n << 63n) - 1n;

/**
 * A number parameter (at `path` in the request's JSON) as Triton reads it: an integer
 * that fits in 64 bits exactly (past 2^53 a bigint, read again from its source digits:
 * JSON.parse rounded it), anything else as the double it is.
 */
export function numberParameter(source: JsonSource, path: readonly string[], parsed: number): ParameterValue {
  if (Number.isSafeInteger(parsed) || !Number.isInteger(parsed)) return parsed;
  const member = memberSourceText(source.text, path);
  const exact = member === undefined ? undefined : exactInteger(member, INT64_MIN, INT64_MAX);
  return typeof exact === "bigint" ? exact : parsed;
}

function readParameters(value: unknown, source: JsonSource, reserved: readonly string[]): ReadParameters {
  const parameters: Record<string, ParameterValue> = {};
  let binaryOutput: boolean | undefined;
  if (value === undefined) return { parameters, binaryOutput };
  if (!isJsonObject(value))
    throw invalidArg(`Unable to parse 'parameters': expected an object, got ${kindOf(value)}`);
  for (const name in value) {
    // `NaN` or an infinity (non-finite-json.ts) is a number, as rapidjson reads it.
    const parameter = nonFiniteValue(value[name]) ?? value[name];
    checkReservedParameter(name, reserved);
    if (name === "binary_data_output") {
      if (typeof parameter !== "boolean") {
        throw invalidArg(`Unable to parse 'binary_data_output': expected a bool, got ${kindOf(parameter)}`);
      }
      binaryOutput = parameter;
      continue;
    }
    switch (typeof parameter) {
      case "boolean":
      case "string":
        // Read where it is used, but for `priority`, which the batcher reads as it queues.
        if (name === "priority") throw unparsableSequenceParameter(name);
        parameters[name] = parameter;
        break;
      case "number":
        if (name === "sequence_id") parameters[name] = sequenceIdNumber(source, parameter);
        else {
          if (name === "timeout" || name === "priority") checkUnsignedText(source, name);
          parameters[name] = numberParameter(source, ["parameters", name], parameter);
        }
        break;
      default:
        if (isTritonSequenceParameter(name)) throw unparsableSequenceParameter(name);
        throw invalidArg(
          `Unable to parse parameter '${name}': expected a bool, number or string, got ${kindOf(parameter)}`,
        );
    }
  }
  return { parameters, binaryOutput };
}

/** A whole number of bytes from a `shared_memory_*` parameter (Triton reads them as uint64). */
function sharedMemoryCount(key: string, value: unknown): number {
  if (value === undefined) return 0;
  if (!isCount(value)) {
    throw invalidArg(`Unable to parse '${key}': expected a non-negative integer, got ${kindOf(value)}`);
  }
  return value;
}

/**
 * The shared-memory slice a tensor's parameters name, or undefined when they name no
 * region. As in Triton, an offset or size without a region is not read.
 */
function sharedMemorySlice(parameters: JsonObject | undefined): SharedMemorySlice | undefined {
  const region = parameters?.shared_memory_region;
  if (region === undefined) return undefined;
  if (typeof region !== "string") {
    throw invalidArg(`Unable to parse 'shared_memory_region': expected a string, got ${kindOf(region)}`);
  }
  return {
    region,
    offset: sharedMemoryCount("shared_memory_offset", parameters?.shared_memory_offset),
    byteSize: sharedMemoryCount("shared_memory_byte_size", parameters?.shared_memory_byte_size),
  };
}

/** Where a request's tensors come from besides its JSON: the binary part, shared memory. */
interface InputSources {
  readonly binary: BinaryInputs | undefined;
  readonly sharedMemory: SharedMemoryRequest | undefined;
  /** The request, for refusals of binary data in Triton's terms. */
  readonly request: RawTensorRequest;
}

function readInput(
  value: unknown,
  index: number,
  model: string,
  sources: InputSources,
  inputTexts: () => readonly string[],
): [string, Tensor] {
  if (!isJsonObject(value))
    throw invalidArg(`Unable to parse 'inputs': input ${index} is ${kindOf(value)}, not an object`);
  const name = value.name;
  if (typeof name !== "string") {
    throw invalidArg(`Unable to parse 'name' of input ${index}: expected a string, got ${kindOf(name)}`);
  }
  const datatype = value.datatype;
  if (!isDataType(datatype)) {
    const shown = typeof datatype === "string" ? `'${datatype.slice(0, 64)}'` : kindOf(datatype);
    throw invalidArg(`invalid datatype ${shown} for input '${name}' for model '${model}'`);
  }
  const shape = readShape(name, value.shape);
  const parameters = value.parameters;
  if (parameters !== undefined && !isJsonObject(parameters)) {
    throw invalidArg(
      `Unable to parse 'parameters' for input '${name}': expected an object, got ${kindOf(parameters)}`,
    );
  }
  const { binary, sharedMemory } = sources;
  if (sharedMemory === undefined) {
    refuseUnsupportedExtensions("input", name, (key) => parameters?.[key] !== undefined);
  }
  const size = parameters?.binary_data_size;
  const hasData = value.data !== undefined;
  const slice = sharedMemorySlice(parameters);
  // Counted without a list: this runs for every input of every request.
  if (Number(hasData) + Number(size !== undefined) + Number(slice !== undefined) !== 1) {
    const given = [
      hasData ? "'data'" : undefined,
      size !== undefined ? "'binary_data_size'" : undefined,
      slice !== undefined ? "'shared_memory_region'" : undefined,
    ].filter((member) => member !== undefined);
    throw invalidArg(
      sharedMemory === undefined
        ? `input '${name}' must set exactly one of 'data' and 'binary_data_size' in 'parameters', but sets ${hasData ? "both" : "neither"}`
        : `input '${name}' must set exactly one of 'data', 'binary_data_size' in 'parameters' and 'shared_memory_region' in 'parameters', but sets ${given.length === 0 ? "none" : given.join(" and ")}`,
    );
  }
  if (slice !== undefined) {
    return [name, (sharedMemory as SharedMemoryRequest).read(name, datatype, shape, slice)];
  }
  if (hasData) {
    const tokens = () => longNumberTokens(memberSourceText(inputTexts()[index] ?? "", ["data"]) ?? "");
    return [name, decodeJsonTensor(name, datatype, shape, value.data, tokens)];
  }
  if (!isCount(size)) {
    throw invalidArg(
      `Unable to parse 'binary_data_size' for input '${name}': expected a non-negative integer, got ${kindOf(size)}`,
    );
  }
  if (binary === undefined) {
    throw invalidArg(
      `must specify a valid 'Inference-Header-Content-Length' header when passing inputs in binary data format (input '${name}' sets 'binary_data_size')`,
    );
  }
  return [name, decodeRawTensor(name, datatype, shape, binary.take(name, size), sources.request)];
}

function readInputs(
  value: unknown,
  model: string,
  sources: InputSources,
  source: JsonSource,
): Map<string, Tensor> {
  if (!Array.isArray(value)) {
    throw invalidArg(
      value === undefined
        ? "Unable to parse 'inputs': the request has no 'inputs' member"
        : `Unable to parse 'inputs': expected an array, got ${kindOf(value)}`,
    );
  }
  // The inputs' source texts, found once for the request when an input needs its digits
  // read again: found per input, a body of many inputs was scanned once per input.
  let texts: string[] | undefined;
  const inputTexts = (): readonly string[] => {
    texts ??= elementSourceTexts(memberSourceText(source.text, ["inputs"]) ?? "");
    return texts;
  };
  const inputs = new Map<string, Tensor>();
  for (let i = 0; i < value.length; i++) {
    const [name, tensor] = readInput(value[i], i, model, sources, inputTexts);
    if (inputs.has(name)) {
      throw invalidArg(`input '${name}' is given more than once in the request to model '${model}'`);
    }
    inputs.set(name, tensor);
  }
  sources.binary?.finish();
  return inputs;
}

interface ReadOutputs {
  readonly names: string[] | undefined;
  readonly binary: ReadonlyMap<string, boolean>;
  readonly classification?: ReadonlyMap<string, number> | undefined;
}

/**
 * Output `name`'s shared-memory slice, checked against its region before the model runs
 * (a step that ran but could not be returned would still have advanced its sequence).
 */
function readOutputSlice(name: string, parameters: JsonObject, sharedMemory: SharedMemoryRequest): void {
  const slice = sharedMemorySlice(parameters);
  if (slice === undefined) return;
  // Triton's checks: classes are computed from the output, and binary data is where it goes.
  if (parameters.classification !== undefined) {
    throw invalidArg(`Output can't set both 'shared_memory_region' and 'classification' (output '${name}')`);
  }
  if (parameters.binary_data === true) {
    throw invalidArg(`Output can't set both 'shared_memory_region' and 'binary_data' (output '${name}')`);
  }
  sharedMemory.placeOutput(name, slice);
}

function readOutputs(value: unknown, sharedMemory: SharedMemoryRequest | undefined): ReadOutputs {
  if (value === undefined) return { names: undefined, binary: NO_CHOICES };
  if (!Array.isArray(value))
    throw invalidArg(`Unable to parse 'outputs': expected an array, got ${kindOf(value)}`);
  const names: string[] = [];
  const binary = new Map<string, boolean>();
  let classification: Map<string, number> | undefined;
  for (let i = 0; i < value.length; i++) {
    const output: unknown = value[i];
    if (!isJsonObject(output))
      throw invalidArg(`Unable to parse 'outputs': output ${i} is ${kindOf(output)}, not an object`);
    const name = output.name;
    if (typeof name !== "string") {
      throw invalidArg(`Unable to parse 'name' of output ${i}: expected a string, got ${kindOf(name)}`);
    }
    names.push(name);
    const parameters = output.parameters;
    if (parameters === undefined) continue;
    if (!isJsonObject(parameters)) {
      throw invalidArg(
        `Unable to parse 'parameters' for output '${name}': expected an object, got ${kindOf(parameters)}`,
      );
    }
    if (sharedMemory === undefined) {
      refuseUnsupportedExtensions("output", name, (key) => parameters[key] !== undefined);
    } else {
      readOutputSlice(name, parameters, sharedMemory);
    }
    if (parameters.classification !== undefined) {
      classification ??= new Map();
      classification.set(name, classificationCount(name, parameters.classification));
    }
    const choice = parameters.binary_data;
    if (choice === undefined) continue;
    if (typeof choice !== "boolean") {
      throw invalidArg(
        `Unable to parse 'binary_data' for output '${name}': expected a bool, got ${kindOf(choice)}`,
      );
    }
    binary.set(name, choice);
  }
  // An empty list asks for nothing in particular: every output, as Triton reads it.
  return { names: names.length === 0 ? undefined : names, binary, classification };
}

/** Whether output `name` goes back as binary data. */
export function isBinaryOutput(encoding: OutputEncoding, name: string): boolean {
  return encoding.binary.get(name) ?? encoding.binaryByDefault;
}

/**
 * FP16 and BF16 outputs can only travel as binary data. Refusing before the model runs
 * matters for sequences: a step that ran but could not be returned would still have
 * advanced the sequence's state.
 */
function checkJsonOutputs(
  model: ServedModel,
  names: readonly string[] | undefined,
  encoding: OutputEncoding,
): void {
  for (const output of model.outputs) {
    if (sentAsJson(output.datatype)) continue;
    if (names !== undefined && !names.includes(output.name)) continue;
    if (isBinaryOutput(encoding, output.name) || encoding.sharedMemory?.outputs.has(output.name)) continue;
    throw notSentAsJson(output.datatype);
  }
}

/** A body that is the raw bytes of the model's only input (header length 0). */
export function decodeRawBody(body: Buffer, model: ServedModel, options: DecodeOptions): DecodedInferRequest {
  const { name, tensor } = rawInputTensor(model.config, body);
  const request: InferRequest = {
    id: "",
    inputs: new Map([[name, tensor]]),
    outputs: undefined,
    parameters: {},
    sequence: undefined,
    signal: options.signal,
    principal: options.principal,
    received: options.received,
  };
  // Over HTTP a raw request has nowhere to ask for JSON: its outputs come back binary, as in Triton.
  const binaryByDefault = options.binaryOutputByDefault ?? true;
  return { request, encoding: { binaryByDefault, binary: NO_CHOICES } };
}

/** Parses the first `jsonLength` bytes of `body` as an inference request object. */
export function parseInferJson(body: Buffer, jsonLength: number): InferJson {
  if (jsonLength === 0)
    throw invalidArg("the request body is empty: expected an inference request JSON object");
  const text = requestJsonText(body, jsonLength);
  return { object: inferJsonObject(parseRequestJson(text)), text };
}

/**
 * As parseInferJson, on the JSON thread (json-thread/), with the body, whose memory went
 * there and back, in place of `body` (emptied). `body` must own its memory.
 */
export async function parseInferJsonOffThread(
  body: Buffer,
  jsonLength: number,
): Promise<InferJson & { readonly body: Buffer }> {
  const parsed = await parseJsonOffThread(body, jsonLength, "kserve");
  return {
    object: inferJsonObject(parsed.value),
    sequenceIdsAreIntegers: parsed.sequenceIdsAreIntegers,
    get text() {
      return parsed.text;
    },
    body: parsed.body,
  };
}

/** The parsed JSON of an inference request, checked to be an object. */
function inferJsonObject(json: unknown): JsonObject {
  if (!isJsonObject(json)) {
    throw invalidArg(`failed to parse the request JSON buffer: expected an object, got ${kindOf(json)}`);
  }
  return json;
}

/**
 * Decodes a parsed inference request. `headerLength` as for decodeInferRequest: when set,
 * the binary inputs follow the JSON in `body`.
 */
export function decodeInferJson(
  parsed: InferJson,
  body: Buffer,
  headerLength: number | undefined,
  model: ServedModel,
  options: DecodeOptions = {},
): DecodedInferRequest {
  const json = parsed.object;
  if (json.id !== undefined && typeof json.id !== "string") {
    throw invalidArg(`Unable to parse 'id': expected a string, got ${kindOf(json.id)}`);
  }
  const { parameters, binaryOutput } = readParameters(
    json.parameters,
    parsed,
    options.reservedParameters ?? [],
  );
  const sequence = readSequenceControl(parameters);
  const access = options.sharedMemory;
  const sharedMemory =
    access && new SharedMemoryRequest(access, model.config, json.id ?? "", options.principal);
  try {
    const fields = { parameters, binaryOutput, sequence, sharedMemory };
    return decodeTensors(json, body, headerLength, model, options, fields, parsed);
  } catch (error) {
    sharedMemory?.release();
    throw error;
  }
}

interface RequestFields extends ReadParameters {
  readonly sequence: InferRequest["sequence"];
  readonly sharedMemory: SharedMemoryRequest | undefined;
}

/** The inputs and outputs of a request whose parameters are read. */
function decodeTensors(
  json: JsonObject,
  body: Buffer,
  headerLength: number | undefined,
  model: ServedModel,
  options: DecodeOptions,
  fields: RequestFields,
  source: JsonSource,
): DecodedInferRequest {
  const { parameters, binaryOutput, sequence, sharedMemory } = fields;
  const sources: InputSources = {
    binary: headerLength === undefined ? undefined : new BinaryInputs(body, headerLength, model.name),
    sharedMemory,
    request: { config: model.config, requestId: typeof json.id === "string" ? json.id : "" },
  };
  const inputs = readInputs(json.inputs, model.name, sources, source);
  const outputs = readOutputs(json.outputs, sharedMemory);
  // As Triton's HTTP reads it: `binary_data_output` chooses for the outputs a request does
  // not list (it lists none: all come back); a listed output is binary only if it says so.
  // A frontend with a default of its own (WebSocket binary frames, SageMaker) lets the
  // request's choice apply to every output.
  const own = options.binaryOutputByDefault;
  const encoding: OutputEncoding = {
    binaryByDefault:
      own === undefined
        ? outputs.names === undefined
          ? (binaryOutput ?? false)
          : false
        : (binaryOutput ?? own),
    binary: outputs.binary,
    classification: classificationFor(model, outputs.classification),
    sharedMemory: sharedMemory?.hold(),
  };
  checkJsonOutputs(model, outputs.names, encoding);
  const request: InferRequest = {
    // Checked to be a string by decodeInferJson.
    id: (json.id as string | undefined) ?? "",
    inputs,
    outputs: outputs.names,
    parameters,
    sequence,
    signal: options.signal,
    principal: options.principal,
    received: options.received,
  };
  return { request, encoding };
}

/**
 * As decodeInferRequest, for a body that owns its memory (readRequestBody's): a JSON part
 * of OFF_THREAD_JSON_BYTES or more is parsed on the JSON thread, so that the event loop
 * goes on serving other requests meanwhile. `body` is then emptied (its memory moved there
 * and back); the request's binary inputs are views over the memory returned. A promise
 * only then: awaited on every request, one cost stateless binary requests at 64 clients
 * about a fifth of their throughput (2935 against 2185/s, medians of 4 interleaved runs).
 */
export function decodeInferRequestOffThread(
  body: Buffer,
  headerLength: number | undefined,
  model: ServedModel,
  options: DecodeOptions = {},
): DecodedInferRequest | Promise<DecodedInferRequest> {
  const jsonLength = headerLength ?? body.byteLength;
  if (headerLength === 0 || jsonLength < OFF_THREAD_JSON_BYTES) {
    return decodeInferRequest(body, headerLength, model, options);
  }
  return decodeOffThread(body, jsonLength, headerLength, model, options);
}

async function decodeOffThread(
  body: Buffer,
  jsonLength: number,
  headerLength: number | undefined,
  model: ServedModel,
  options: DecodeOptions,
): Promise<DecodedInferRequest> {
  const parsed = await parseInferJsonOffThread(body, jsonLength);
  return decodeInferJson(parsed, parsed.body, headerLength, model, options);
}

/**
 * Decodes an inference body. `headerLength` is the Inference-Header-Content-Length
 * (undefined when absent: the whole body is JSON; 0: the body is the raw input).
 */
export function decodeInferRequest(
  body: Buffer,
  headerLength: number | undefined,
  model: ServedModel,
  options: DecodeOptions = {},
): DecodedInferRequest {
  if (headerLength === 0) return decodeRawBody(body, model, options);
  const parsed = parseInferJson(body, headerLength ?? body.byteLength);
  return decodeInferJson(parsed, body, headerLength, model, options);
}
