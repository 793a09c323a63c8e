import { invalidArg } from "../../../core/errors.ts";
import type { InferRequest, InferResponse, ParameterValue } from "../../../core/infer.ts";
import type { ServedModel, TensorMetadata } from "../../../core/model.ts";
import { readSequenceControl } from "../../../core/sequence/sequence-parameters.ts";
import type { Tensor } from "../../../core/tensor.ts";
import { isJsonObject, type JsonObject } from "../../common/http/json-body.ts";
import { longNumberTokens, memberSourceText } from "../../common/json-source-text.ts";
import { numberParameter, sequenceIdNumber } from "../../common/kserve/infer-request-decoder.ts";
import { parameterValueText } from "../../common/kserve/infer-response-encoder.ts";
import { decodeJsonTensor, jsonTensorData } from "../../common/kserve/json-tensor.ts";
import { nonFiniteValue } from "../../common/non-finite-json.ts";

// Triton's generate extension (POST /v2/models/{m}/generate and /generate_stream): a flat
// JSON object instead of KServe's tensor list. A member named like a model input is that
// input (a value, or a 1-D array, shaped by the model's metadata as Triton shapes it);
// any other member, and every member of `parameters` that names no input, is a request
// parameter (sequence_id, sequence_start and sequence_end included). The response is
// flat too: id, model_name, model_version, the response's parameters, and each output
// (a bare value when it has one element).

/** Triton's two passes: fixed dims take their share of the elements, the innermost -1 the rest, other -1s 1. */
function shapeFor(input: TensorMetadata, count: number): number[] {
  const shape = [...input.shape];
  let remaining = count;
  for (let i = shape.length - 1; i >= 0; i--) {
    const dim = shape[i]!;
    if (dim === -1) continue;
    if (dim === 0 || remaining % dim !== 0) throw unshapeable(input.name);
    remaining /= dim;
  }
  for (let i = shape.length - 1; i >= 0; i--) {
    if (shape[i] !== -1) continue;
    shape[i] = remaining;
    remaining = 1;
  }
  if (remaining !== 1) throw unshapeable(input.name);
  return shape;
}

function unshapeable(name: string) {
  return invalidArg(`The schema can not convert input '${name}' to tensor with proper shape`);
}

/** Where a member is in the body: at the top, or in `parameters`. */
const memberPath = (key: string, nested: boolean): string[] => (nested ? ["parameters", key] : [key]);

function readMembers(
  object: JsonObject,
  model: ServedModel,
  inputs: Map<string, Tensor>,
  parameters: Record<string, ParameterValue>,
  nested: boolean,
  text: () => string,
): void {
  for (const [key, member] of Object.entries(object)) {
    // `NaN` or an infinity (non-finite-json.ts) is a number, as rapidjson reads it.
    const value = nonFiniteValue(member) ?? member;
    if (!nested && key === "id") continue;
    if (!nested && key === "parameters") {
      if (!isJsonObject(value)) throw invalidArg("Expected JSON object for keyword: 'parameters'");
      readMembers(value, model, inputs, parameters, true, text);
      continue;
    }
    const input = model.inputs.find((i) => i.name === key);
    if (input !== undefined) {
      const data = Array.isArray(value) ? value : [value];
      if (data.some((element) => Array.isArray(element))) {
        throw invalidArg(`input '${key}' of a generate request must be a value or a flat array`);
      }
      // Called only for an integer past 2^53, whose double JSON.parse rounded: the digits
      // are read again from this member's source text (a scalar is its own element 0).
      const tokens = () => longNumberTokens(memberSourceText(text(), memberPath(key, nested)) ?? "");
      inputs.set(key, decodeJsonTensor(key, input.datatype, shapeFor(input, data.length), data, tokens));
      continue;
    }
    if (typeof value === "number" && key === "sequence_id") {
      // A server-assigned id (from 2^62) or a client's uint64 past 2^53, as KServe reads it.
      parameters[key] = sequenceIdNumber({ text: text() }, value, memberPath(key, nested));
      continue;
    }
    if (typeof value === "number") {
      parameters[key] = numberParameter({ text: text() }, memberPath(key, nested), value);
      continue;
    }
    if (typeof value === "string" || typeof value === "boolean") {
      parameters[key] = value;
      continue;
    }
    throw invalidArg(`parameter '${key}' has invalid type. It should be either 'int', 'bool', or 'string'.`);
  }
}

/**
 * `text` gives the body's JSON text, asked for when a number is not a safe integer (a
 * 64-bit input element or `sequence_id` past 2^53, read exactly from its digits) and for
 * a number `sequence_id` (refused when written as `1.0` or `1e3`).
 */
export function decodeGenerateRequest(
  body: JsonObject,
  model: ServedModel,
  signal: AbortSignal,
  principal?: string,
  text: () => string = () => "",
): InferRequest {
  const id = body.id;
  if (id !== undefined && typeof id !== "string") {
    throw invalidArg("Unable to parse 'id': expected a string");
  }
  const inputs = new Map<string, Tensor>();
  const parameters: Record<string, ParameterValue> = {};
  readMembers(body, model, inputs, parameters, false, text);
  return {
    id: id ?? "",
    inputs,
    outputs: undefined,
    parameters,
    sequence: readSequenceControl(parameters),
    signal,
    principal,
  };
}

/** The generate response object, as JSON text (bigints exact). */
export function encodeGenerateResponse(response: InferResponse): string {
  const members: string[] = [];
  if (response.id !== "") members.push(`"id":${JSON.stringify(response.id)}`);
  members.push(`"model_name":${JSON.stringify(response.modelName)}`);
  members.push(`"model_version":${JSON.stringify(response.modelVersion)}`);
  for (const [name, value] of Object.entries(response.parameters)) {
    members.push(`${JSON.stringify(name)}:${parameterValueText(value)}`);
  }
  for (const output of response.outputs) {
    const data = jsonTensorData(output);
    const single = output.shape.reduce((n, d) => n * d, 1) === 1;
    members.push(`${JSON.stringify(output.name)}:${single ? data.slice(1, -1) : data}`);
  }
  return `{${members.join(",")}}`;
}
