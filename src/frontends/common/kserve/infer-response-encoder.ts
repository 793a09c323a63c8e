import type { InferResponse, Parameters, ParameterValue } from "../../../core/infer.ts";
import { formatShape } from "../../../core/tensor.ts";
import {
  OFF_THREAD_JSON_ELEMENTS,
  type WritePart,
  writeJsonOffThread,
} from "../../json-thread/json-thread.ts";
import { partsText } from "../../json-thread/write-parts.ts";
import { nonFiniteText } from "../non-finite-json.ts";
import { encodeRawTensor } from "../raw-tensor.ts";
import { binaryBody } from "./binary-tensor.ts";
import { classifyOutputs } from "./classification.ts";
import { isBinaryOutput, type OutputEncoding } from "./infer-request-decoder.ts";
import { NEGATIVE_ZERO_TEXT, notSentAsJson, sentAsJson } from "./json-tensor.ts";
import type { SharedMemoryHold } from "./shared-memory-tensors.ts";

// InferResponse → the KServe v2 HTTP response body. The JSON is written by hand: it is
// the hot path, the shape is fixed, typed arrays print themselves, and bigints (uint64
// sequence ids, INT64 data) must come out as exact digits, which JSON.stringify cannot do.

export interface EncodedInferResponse {
  readonly body: string | Buffer;
  readonly contentType: "application/json" | "application/octet-stream";
  /** Inference-Header-Content-Length, when binary outputs follow the JSON. */
  readonly headerLength: number | undefined;
}

/** A response parameter's JSON text: a bigint exact; -0, NaN and the infinities as Triton writes them. */
export function parameterValueText(value: ParameterValue): string {
  switch (typeof value) {
    case "bigint":
      return value.toString();
    case "number":
      if (!Number.isFinite(value)) return nonFiniteText(value);
      return value === 0 && 1 / value < 0 ? NEGATIVE_ZERO_TEXT : String(value);
    default:
      return JSON.stringify(value);
  }
}

function parameterText(parameters: Parameters): string | undefined {
  const members: string[] = [];
  for (const name in parameters)
    members.push(`${JSON.stringify(name)}:${parameterValueText(parameters[name]!)}`);
  return members.length === 0 ? undefined : `{${members.join(",")}}`;
}

/** A response's JSON in parts (tensors to write as JSON data in between), and its binary outputs. */
interface ResponseParts {
  readonly parts: WritePart[];
  readonly binaryParts: Uint8Array[];
  /** Elements of the outputs written as JSON. */
  readonly jsonElements: number;
}

function responseParts(answer: InferResponse, encoding: OutputEncoding): ResponseParts {
  const response = classifyOutputs(answer, encoding.classification);
  const parts: WritePart[] = [];
  let json = `{"model_name":${JSON.stringify(response.modelName)},"model_version":${JSON.stringify(response.modelVersion)}`;
  // As Triton, a request without an id gets an answer without one.
  if (response.id !== "") json += `,"id":${JSON.stringify(response.id)}`;
  const parameters = parameterText(response.parameters);
  if (parameters !== undefined) json += `,"parameters":${parameters}`;
  json += ',"outputs":[';
  const binaryParts: Uint8Array[] = [];
  let jsonElements = 0;
  const outputs = response.outputs;
  for (let i = 0; i < outputs.length; i++) {
    const output = outputs[i]!;
    if (i > 0) json += ",";
    json += `{"name":${JSON.stringify(output.name)},"datatype":"${output.datatype}","shape":${formatShape(output.shape)}`;
    const slice = encoding.sharedMemory?.outputs.get(output.name);
    if (slice !== undefined) {
      // Written where the client asked; the answer says only what was written.
      (encoding.sharedMemory as SharedMemoryHold).use.write(slice, output.name, encodeRawTensor(output));
      json += "}";
    } else if (isBinaryOutput(encoding, output.name)) {
      const bytes = encodeRawTensor(output);
      binaryParts.push(bytes);
      json += `,"parameters":{"binary_data_size":${bytes.byteLength}}}`;
    } else if (!sentAsJson(output.datatype)) {
      // Caught before inference for declared outputs; this is for undeclared ones.
      throw notSentAsJson(output.datatype);
    } else {
      parts.push(`${json},"data":`, output);
      jsonElements += output.data.length;
      json = "}";
    }
  }
  parts.push(`${json}]}`);
  return { parts, binaryParts, jsonElements };
}

function encoded(json: string, binaryParts: Uint8Array[], reserve: number): EncodedInferResponse {
  if (binaryParts.length === 0)
    return { body: json, contentType: "application/json", headerLength: undefined };
  const { body, headerLength } = binaryBody(json, binaryParts, reserve);
  return { body, contentType: "application/octet-stream", headerLength };
}

/**
 * Encodes a response. A binary body starts with `reserve` free bytes (see binaryBody); a
 * JSON body, which is text, has none.
 */
export function encodeInferResponse(
  answer: InferResponse,
  encoding: OutputEncoding,
  reserve = 0,
): EncodedInferResponse {
  const { parts, binaryParts } = responseParts(answer, encoding);
  return encoded(partsText(parts), binaryParts, reserve);
}

/**
 * As encodeInferResponse (`reserve` as there); a JSON body of OFF_THREAD_JSON_ELEMENTS elements or more is
 * written on the JSON thread (json-thread/), so that the event loop goes on serving
 * other requests meanwhile. A promise only then (see decodeInferRequestOffThread).
 */
export function encodeInferResponseOffThread(
  answer: InferResponse,
  encoding: OutputEncoding,
  reserve = 0,
): EncodedInferResponse | Promise<EncodedInferResponse> {
  const { parts, binaryParts, jsonElements } = responseParts(answer, encoding);
  if (jsonElements < OFF_THREAD_JSON_ELEMENTS || binaryParts.length > 0) {
    return encoded(partsText(parts), binaryParts, reserve);
  }
  return writeJsonOffThread(parts).then((body) => ({
    body,
    contentType: "application/json" as const,
    headerLength: undefined,
  }));
}
