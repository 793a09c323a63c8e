import { isDataType } from "../../core/datatype.ts";
import { invalidArg } from "../../core/errors.ts";
import type { InferRequest, ReceivedAt } from "../../core/infer.ts";
import type { ServedModel } from "../../core/model.ts";
import type { ModelConfig } from "../../core/model-config.ts";
import { readSequenceControl } from "../../core/sequence/sequence-parameters.ts";
import type { SharedMemoryRegions, SharedMemorySlice } from "../../core/shared-memory.ts";
import { shapeInMessage, type Tensor } from "../../core/tensor.ts";
import { classificationCount } from "../common/kserve/classification.ts";
import { type SharedMemoryHold, SharedMemoryRequest } from "../common/kserve/shared-memory-tensors.ts";
import { refuseUnsupportedExtensions } from "../common/kserve/unsupported-extensions.ts";
import { decodeRawTensor, type RawTensorRequest } from "../common/raw-tensor.ts";
import { readRequestParameters } from "./infer-parameters.ts";
import { type Int64, int64ToNumber } from "./int64.ts";
import type { InferInputTensorMessage, ModelInferRequestMessage, ParameterMap } from "./messages.ts";
import { decodeTensorContents } from "./tensor-contents.ts";

// ModelInferRequest → the protocol-free InferRequest. Raw inputs stay views over the
// received message (no copies); typed contents are decoded into the typed arrays that
// become the tensors' data (typed-array-fields.ts).

export interface DecodedInferRequest {
  readonly modelName: string;
  /** undefined = the highest ready version. */
  readonly modelVersion: string | undefined;
  readonly request: InferRequest;
  /** Classes asked for by outputs' `classification` parameter (common/kserve/classification.ts). */
  readonly classification: ReadonlyMap<string, number> | undefined;
  /** Outputs to be written to shared memory (their `shared_memory_region` parameter). */
  /** What the request holds in shared memory; its frontend releases it once the request is answered. */
  readonly sharedMemory: SharedMemoryHold | undefined;
}

function decodeShape(input: string, model: string, shape: readonly Int64[] | undefined): number[] {
  const dims: number[] = new Array(shape?.length ?? 0);
  for (let i = 0; i < dims.length; i++) {
    const dim = int64ToNumber((shape as readonly Int64[])[i] as Int64);
    if (!Number.isSafeInteger(dim) || dim < 0) {
      throw invalidArg(
        `input '${input}' for model '${model}' has an invalid shape ${shapeInMessage((shape ?? []).map((d) => int64ToNumber(d)))}: dimensions must be non-negative integers`,
      );
    }
    dims[i] = dim;
  }
  return dims;
}

/** A `shared_memory_offset` / `shared_memory_byte_size` parameter, as Triton reads it. */
function sharedMemoryCount(parameters: ParameterMap, key: string, tensor: string): number | undefined {
  const parameter = parameters[key];
  if (parameter === undefined) return undefined;
  if (parameters.shared_memory_region === undefined) {
    throw invalidArg(
      `'${key}' can not be specified without 'shared_memory_region' parameter for tensor '${tensor}'`,
    );
  }
  if (parameter.parameter_choice !== "int64_param") {
    throw invalidArg(
      `invalid value type for '${key}' parameter for tensor '${tensor}', expected int64_param.`,
    );
  }
  const value = int64ToNumber(parameter.int64_param ?? 0);
  if (!Number.isSafeInteger(value) || value < 0) {
    throw invalidArg(
      `invalid value for '${key}' parameter for tensor '${tensor}': expected a non-negative integer below 2^53, got ${value}`,
    );
  }
  return value;
}

/** The shared-memory slice a tensor's parameters name (Triton's ParseSharedMemoryParams). */
function sharedMemorySlice(
  parameters: ParameterMap | undefined,
  tensor: string,
): SharedMemorySlice | undefined {
  if (parameters === undefined) return undefined;
  const offset = sharedMemoryCount(parameters, "shared_memory_offset", tensor);
  const byteSize = sharedMemoryCount(parameters, "shared_memory_byte_size", tensor);
  const region = parameters.shared_memory_region;
  if (region === undefined) return undefined;
  if (region.parameter_choice !== "string_param") {
    throw invalidArg(
      `invalid value type for 'shared_memory_region' parameter for tensor '${tensor}', expected string_param.`,
    );
  }
  if (byteSize === undefined) {
    throw invalidArg(
      `'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor '${tensor}'`,
    );
  }
  return { region: region.string_param ?? "", offset: offset ?? 0, byteSize };
}

/** Where a request's tensors come from besides their own contents. */
interface InputSources {
  readonly raw: readonly Uint8Array[];
  readonly sharedMemory: SharedMemoryRequest | undefined;
  /** The request, for refusals of raw contents in Triton's terms. */
  readonly request: RawTensorRequest;
}

function decodeInput(
  message: InferInputTensorMessage,
  model: string,
  sources: InputSources,
  slice: SharedMemorySlice | undefined,
  rawIndex: number,
): Tensor {
  const name = message.name ?? "";
  const datatype = message.datatype ?? "";
  if (!isDataType(datatype)) {
    throw invalidArg(`invalid datatype '${datatype}' for input '${name}' for model '${model}'`);
  }
  const shape = decodeShape(name, model, message.shape);
  const { raw } = sources;
  const hasContents = message.contents !== undefined && message.contents !== null;
  if (slice !== undefined) {
    if (hasContents) {
      throw invalidArg(
        `unexpected 'content' provided when using shared memory for input tensor '${name}' for model '${model}'`,
      );
    }
    return (sources.sharedMemory as SharedMemoryRequest).read(name, datatype, shape, slice);
  }
  if (hasContents) {
    if (raw.length > 0) {
      throw invalidArg(
        `contents field must not be specified when using raw_input_contents for '${name}' for model '${model}'`,
      );
    }
    return decodeTensorContents({ input: name, model }, datatype, shape, message.contents!);
  }
  const bytes = raw[rawIndex];
  if (bytes === undefined) {
    throw invalidArg(`unable to find data for input tensor '${name}' for model '${model}' in request.`);
  }
  return decodeRawTensor(name, datatype, shape, bytes, sources.request);
}

/** The tensor's shared-memory slice, or (where the server serves none) a refusal of any. */
function tensorSlice(
  kind: "input" | "output",
  name: string,
  parameters: ParameterMap | undefined,
  sharedMemory: SharedMemoryRequest | undefined,
): SharedMemorySlice | undefined {
  if (sharedMemory === undefined) {
    refuseUnsupportedExtensions(kind, name, (key) => parameters?.[key] !== undefined);
    return undefined;
  }
  return sharedMemorySlice(parameters, name);
}

/** What a request carries beside its message. */
export interface GrpcDecodeOptions {
  /** Aborts it while it has not run (call cancelled, stream gone). */
  readonly signal?: AbortSignal | undefined;
  /** The caller (its API key's name). */
  readonly principal?: string | undefined;
  /** Where tensors may be read from and written to shared memory (unset: such requests are refused). */
  readonly sharedMemory?: SharedMemoryRegions | undefined;
  /** When the message was read (for tracing). */
  readonly received?: ReceivedAt | undefined;
}

/**
 * Decodes a request to `model` (found first, as Triton finds it before reading the inputs:
 * the inputs' refusals are told in its terms).
 */
export function decodeInferRequest(
  message: ModelInferRequestMessage,
  model: ServedModel,
  options: GrpcDecodeOptions = {},
): DecodedInferRequest {
  const version = message.model_version;
  const modelVersion = version === undefined || version === "" ? undefined : version;
  const { sharedMemory } = options;
  const held =
    sharedMemory && new SharedMemoryRequest(sharedMemory, model.config, message.id ?? "", options.principal);
  try {
    return decodeMessage(message, model.config, modelVersion, options, held);
  } catch (error) {
    held?.release();
    throw error;
  }
}

function decodeMessage(
  message: ModelInferRequestMessage,
  config: ModelConfig,
  modelVersion: string | undefined,
  options: GrpcDecodeOptions,
  sharedMemory: SharedMemoryRequest | undefined,
): DecodedInferRequest {
  // The name the request gave (the model's, as it was found by it).
  const modelName = message.model_name ?? "";
  const inputMessages = message.inputs ?? [];
  const raw = message.raw_input_contents ?? [];
  // As in Triton, raw contents are the data of the inputs not in shared memory, in order.
  // (Slices are kept only when an input names one: this runs for every request.)
  let slices: (SharedMemorySlice | undefined)[] | undefined;
  let rawInputs = inputMessages.length;
  for (let i = 0; i < inputMessages.length; i++) {
    const input = inputMessages[i] as InferInputTensorMessage;
    const slice = tensorSlice("input", input.name ?? "", input.parameters, sharedMemory);
    if (slice === undefined) continue;
    slices ??= new Array(inputMessages.length);
    slices[i] = slice;
    rawInputs--;
  }
  if (raw.length > 0 && raw.length !== rawInputs) {
    throw invalidArg(
      `expected ${rawInputs} raw_input_contents for the ${rawInputs} inputs of the request to model '${modelName}' not in shared memory, got ${raw.length}`,
    );
  }
  const sources: InputSources = { raw, sharedMemory, request: { config, requestId: message.id ?? "" } };
  const inputs = new Map<string, Tensor>();
  let rawIndex = 0;
  for (let i = 0; i < inputMessages.length; i++) {
    const input = inputMessages[i] as InferInputTensorMessage;
    const slice = slices?.[i];
    const tensor = decodeInput(input, modelName, sources, slice, rawIndex);
    if (slice === undefined) rawIndex++;
    const name = input.name ?? "";
    if (inputs.has(name)) {
      throw invalidArg(`input '${name}' is given more than once in the request to model '${modelName}'`);
    }
    inputs.set(name, tensor);
  }
  const outputMessages = message.outputs ?? [];
  let classification: Map<string, number> | undefined;
  for (const output of outputMessages) {
    const parameters = output.parameters;
    const name = output.name ?? "";
    const slice = tensorSlice("output", name, parameters, sharedMemory);
    if (slice !== undefined) {
      if (parameters?.classification !== undefined) {
        throw invalidArg(
          `output can't set both 'shared_memory_region' and 'classification' (output '${name}')`,
        );
      }
      sharedMemory?.placeOutput(name, slice);
    }
    const asked = parameters?.classification;
    if (asked !== undefined) {
      const { classification: count } = readRequestParameters({ classification: asked });
      classification ??= new Map();
      classification.set(name, classificationCount(name, count));
    }
  }
  const outputs = outputMessages.length === 0 ? undefined : outputMessages.map((o) => o.name ?? "");
  const parameters = readRequestParameters(message.parameters);
  const request: InferRequest = {
    id: message.id ?? "",
    inputs,
    outputs,
    parameters,
    sequence: readSequenceControl(parameters),
    signal: options.signal,
    principal: options.principal,
    received: options.received,
  };
  return { modelName, modelVersion, request, classification, sharedMemory: sharedMemory?.hold() };
}
