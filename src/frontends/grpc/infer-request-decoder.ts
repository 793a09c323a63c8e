import { isDataType } from "../../core/datatype.ts";
import { invalidArg } from "../../core/errors.ts";
import type { InferRequest } from "../../core/infer.ts";
import { readSequenceControl } from "../../core/sequence/sequence-parameters.ts";
import { shapeInMessage, type Tensor } from "../../core/tensor.ts";
import { classificationCount } from "../common/kserve/classification.ts";
import { refuseUnsupportedExtensions } from "../common/kserve/unsupported-extensions.ts";
import { decodeRawTensor } from "../common/raw-tensor.ts";
import { readRequestParameters } from "./infer-parameters.ts";
import { type Int64, int64ToNumber } from "./int64.ts";
import type { InferInputTensorMessage, ModelInferRequestMessage } from "./messages.ts";
import { decodeTensorContents } from "./tensor-contents.ts";

// ModelInferRequest → the protocol-free InferRequest. Raw inputs stay views over the
// received message (no copies); typed contents are converted once into typed arrays.

export interface DecodedInferRequest {
  readonly modelName: string;
  /** undefined = the highest ready version. */
  readonly modelVersion: string | undefined;
  readonly request: InferRequest;
  /** Classes asked for by outputs' `classification` parameter (common/kserve/classification.ts). */
  readonly classification: ReadonlyMap<string, number> | undefined;
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

function decodeInput(
  message: InferInputTensorMessage,
  model: string,
  raw: readonly Uint8Array[],
  index: number,
): Tensor {
  const name = message.name ?? "";
  const datatype = message.datatype ?? "";
  if (!isDataType(datatype)) {
    throw invalidArg(`invalid datatype '${datatype}' for input '${name}' for model '${model}'`);
  }
  const shape = decodeShape(name, model, message.shape);
  const parameters = message.parameters;
  refuseUnsupportedExtensions("input", name, (key) => parameters?.[key] !== undefined);
  if (message.contents !== undefined && message.contents !== null) {
    if (raw.length > 0) {
      throw invalidArg(
        `contents field must not be specified when using raw_input_contents for '${name}' for model '${model}'`,
      );
    }
    return decodeTensorContents({ input: name, model }, datatype, shape, message.contents);
  }
  const bytes = raw[index];
  if (bytes === undefined) {
    throw invalidArg(`unable to find data for input tensor '${name}' for model '${model}' in request.`);
  }
  return decodeRawTensor(name, datatype, shape, bytes);
}

/**
 * Decodes a request; `signal` aborts it while it has not run (call cancelled, stream gone);
 * `principal` is the caller (its API key's name).
 */
export function decodeInferRequest(
  message: ModelInferRequestMessage,
  signal?: AbortSignal,
  principal?: string,
): DecodedInferRequest {
  const modelName = message.model_name ?? "";
  const inputMessages = message.inputs ?? [];
  const raw = message.raw_input_contents ?? [];
  if (raw.length > 0 && raw.length !== inputMessages.length) {
    throw invalidArg(
      `expected ${inputMessages.length} raw_input_contents for the ${inputMessages.length} inputs of the request to model '${modelName}', got ${raw.length}`,
    );
  }
  const inputs = new Map<string, Tensor>();
  for (let i = 0; i < inputMessages.length; i++) {
    const input = inputMessages[i] as InferInputTensorMessage;
    const tensor = decodeInput(input, modelName, raw, i);
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
    refuseUnsupportedExtensions("output", name, (key) => parameters?.[key] !== undefined);
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
    signal,
    principal,
  };
  const version = message.model_version;
  return {
    modelName,
    modelVersion: version === undefined || version === "" ? undefined : version,
    request,
    classification,
  };
}
