import { invalidArg, ServerError } from "../../core/errors.ts";
import type { InferRequest } from "../../core/infer.ts";
import type { ServedModel } from "../../core/model.ts";
import type { Tensor } from "../../core/tensor.ts";
import { jsonPreview } from "../common/json-preview.ts";
import { longNumberTokens } from "../common/json-source-text.ts";
import {
  type DecodedInferRequest,
  decodeInferJson,
  decodeRawBody,
  type InferJson,
  parseInferJson,
  parseInferJsonOffThread,
} from "../common/kserve/infer-request-decoder.ts";
import { decodeJsonTensor } from "../common/kserve/json-tensor.ts";
import { OFF_THREAD_JSON_BYTES, parseJson, RefusedJson } from "../json-thread/json-thread.ts";
import { isPackedArray, type PackedArray } from "../json-thread/packed-json.ts";

// What a SageMaker invocation body is, by its Content-Type:
//
//   application/vnd.sagemaker-triton.binary+json;json-header-size=N
//                      a KServe v2 JSON header of N bytes, then the binary inputs (as
//                      Triton's SageMaker mode)
//   application/json   a KServe v2 inference request object, or a bare array: the data of
//                      a model's only input, nested to its shape
//   application/octet-stream, or none
//                      JSON when it is a JSON object or array ({…} or […], and it
//                      parses), as Triton reads every body not in its binary form (and
//                      the AWS SDK for JavaScript sends application/octet-stream when its
//                      caller gives no ContentType); else the raw bytes of a model's only
//                      input
//   anything else      the raw bytes of a model's only input (image/jpeg, audio/wav…,
//                      which callers send as they are); text (text/csv, text/plain) only
//                      into a BYTES input: read as numbers' bytes, "1000" would be the
//                      int32 808464433
//
// A JSON object may carry SageMaker's session convention, `"requestType": "NEW_SESSION"`
// or `"CLOSE"`, with or without inputs. The body is read in two steps: its form and
// session fields first (they decide which model serves it), then its tensors, against
// that model.

export const BINARY_JSON_TYPE = "application/vnd.sagemaker-triton.binary+json";

export type BodyForm = "json" | "binary" | "raw" | "array";
export type RequestType = "NEW_SESSION" | "CLOSE";

export interface InvocationBody {
  readonly form: BodyForm;
  readonly bytes: Buffer;
  /** The KServe v2 object of a JSON or binary body. */
  readonly json: InferJson | undefined;
  /** Bytes of the JSON header in a binary body. */
  readonly headerLength: number | undefined;
  /** The bare array of an array body (packed, when the JSON thread read it). */
  readonly array: readonly unknown[] | PackedArray | undefined;
  /** An array body's text, where 64-bit integers past 2^53 are read exactly (decoded when first read). */
  readonly arraySource: { readonly text: string } | undefined;
  readonly requestType: RequestType | undefined;
  /** False for a session request that carries no inputs: nothing to run. */
  readonly hasInputs: boolean;
  /** A raw body that looks like JSON: why it was not read as JSON (added to its errors). */
  readonly jsonHint: string | undefined;
  /** The text/* media type of a raw body, which only a BYTES input takes. */
  readonly textType?: string;
}

const JSON_TYPES = new Set(["application/json", "text/json"]);
const OCTET_STREAM = "application/octet-stream";

const isBlank = (byte: number): boolean => byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;

/** The first byte that is not blank, looking from the start (`step` 1) or the end (-1). */
function edgeByte(bytes: Buffer, step: 1 | -1): number | undefined {
  for (let i = step === 1 ? 0 : bytes.byteLength - 1; i >= 0 && i < bytes.byteLength; i += step) {
    if (!isBlank(bytes[i]!)) return bytes[i];
  }
  return undefined;
}

const firstByte = (bytes: Buffer): number | undefined => edgeByte(bytes, 1);
const lastByte = (bytes: Buffer): number | undefined => edgeByte(bytes, -1);

const startsLikeJson = (bytes: Buffer): boolean => {
  const first = firstByte(bytes);
  return first === 0x7b || first === 0x5b; // { or [
};

/**
 * Whether a body is framed as a JSON object or array: {…} or […] (blanks aside). A look
 * at two bytes, before any parse: few raw bodies pass it (about 1 in 30,000 of random
 * bytes), so audio is not decoded as text to find that it is not JSON.
 */
function framedLikeJson(bytes: Buffer): boolean {
  const first = firstByte(bytes);
  if (first === 0x7b) return lastByte(bytes) === 0x7d; // { }
  return first === 0x5b && lastByte(bytes) === 0x5d; // [ ]
}

/** json-header-size from the binary media type's parameters, with Triton's messages. */
function headerSize(parameters: readonly string[], contentType: string, bodyLength: number): number {
  const parameter = parameters.find((p) => p.toLowerCase().startsWith("json-header-size="));
  if (parameter === undefined) {
    throw invalidArg(
      `expect MIME type for binary data starts with '${BINARY_JSON_TYPE};json-header-size=', got: ${contentType}`,
    );
  }
  const text = parameter.slice("json-header-size=".length);
  if (!/^\d+$/.test(text)) throw invalidArg(`Unable to parse inference header size, got: ${text}`);
  const size = Number(text);
  if (size > bodyLength) {
    throw invalidArg(`inference header size should be in range (0, ${bodyLength}), got: ${text}`);
  }
  return size;
}

function readRequestType(value: unknown): RequestType | undefined {
  if (value === undefined || value === "NEW_SESSION" || value === "CLOSE") return value;
  throw invalidArg(
    `Unable to parse 'requestType': expected "NEW_SESSION" or "CLOSE", got ${jsonPreview(value)}`,
  );
}

function objectInvocation(
  form: "json" | "binary",
  bytes: Buffer,
  json: InferJson,
  headerLength: number | undefined,
): InvocationBody {
  const requestType = readRequestType(json.object.requestType);
  return {
    form,
    bytes,
    json,
    headerLength,
    array: undefined,
    arraySource: undefined,
    requestType,
    // A session request may be only that; any other body is an inference and needs inputs.
    hasInputs: requestType === undefined || json.object.inputs !== undefined,
    jsonHint: undefined,
  };
}

/** What a body that is not JSON is read as instead (a sniffed body), given why it is not. */
type NotJson = (error: unknown) => InvocationBody;

/**
 * `parse`, then `build` from what it gave. A parse that fails goes to `notJson` when it is
 * given, else throws; what `build` throws is always thrown (the body was JSON).
 */
function parsedThen<T>(
  parse: () => T | Promise<T>,
  build: (parsed: T) => InvocationBody,
  notJson: NotJson | undefined,
): InvocationBody | Promise<InvocationBody> {
  let parsed: T | Promise<T>;
  try {
    parsed = parse();
  } catch (error) {
    if (notJson === undefined) throw error;
    return notJson(error);
  }
  if (!(parsed instanceof Promise)) return build(parsed);
  return notJson === undefined ? parsed.then(build) : parsed.then(build, notJson);
}

/** A JSON part of OFF_THREAD_JSON_BYTES or more is parsed on the JSON thread (a promise only then). */
function objectBody(
  form: "json" | "binary",
  bytes: Buffer,
  headerLength: number | undefined,
  notJson?: NotJson,
): InvocationBody | Promise<InvocationBody> {
  const jsonLength = headerLength ?? bytes.byteLength;
  if (jsonLength < OFF_THREAD_JSON_BYTES) {
    return parsedThen(
      () => parseInferJson(bytes, jsonLength),
      (json) => objectInvocation(form, bytes, json, headerLength),
      notJson,
    );
  }
  return parsedThen(
    () => parseInferJsonOffThread(bytes, jsonLength),
    (json) => objectInvocation(form, json.body, json, headerLength),
    notJson,
  );
}

function arrayInvocation(bytes: Buffer, array: unknown, source: { readonly text: string }): InvocationBody {
  return {
    form: "array",
    bytes,
    json: undefined,
    headerLength: undefined,
    array: array as InvocationBody["array"],
    arraySource: source,
    requestType: undefined,
    hasInputs: true,
    jsonHint: undefined,
  };
}

function jsonBody(bytes: Buffer, notJson?: NotJson): InvocationBody | Promise<InvocationBody> {
  if (firstByte(bytes) !== 0x5b) return objectBody("json", bytes, undefined, notJson);
  return parsedThen(
    () => parseJson(bytes, bytes.byteLength, "array"),
    (parsed) => arrayInvocation(parsed.body, parsed.value, parsed),
    notJson,
  );
}

function rawBody(bytes: Buffer, jsonHint: string | undefined, textType?: string): InvocationBody {
  return {
    ...(textType === undefined ? {} : { textType }),
    form: "raw",
    bytes,
    json: undefined,
    headerLength: undefined,
    array: undefined,
    arraySource: undefined,
    requestType: undefined,
    hasInputs: true,
    jsonHint,
  };
}

/**
 * A body whose type does not say what it is (application/octet-stream, or none): JSON when
 * it is a JSON object or array, as Triton's SageMaker server reads it; else the raw bytes
 * of the only input, seqserve's own reading. Only a body framed as JSON is parsed (on the
 * JSON thread when large, as any JSON body); one that does not parse is raw bytes, its
 * memory back from the thread if it went there.
 */
function sniffedBody(bytes: Buffer): InvocationBody | Promise<InvocationBody> {
  if (!framedLikeJson(bytes)) return rawBody(bytes, undefined);
  return jsonBody(bytes, (error) => {
    // Only the client's malformed JSON; the thread's own failures are errors as for any JSON body.
    if (!(error instanceof ServerError) || error.code !== "INVALID_ARG") throw error;
    return rawBody(
      error instanceof RefusedJson ? error.body : bytes,
      `the body was read as raw input bytes: it looks like JSON, but is not (${error.message})`,
    );
  });
}

/**
 * The body's form and session fields; its tensors are read later by `decodeInvocation`.
 * `bytes` must own its memory: a JSON body of OFF_THREAD_JSON_BYTES or more is parsed on
 * the JSON thread, its memory moved there and back (a promise only then).
 */
export function readInvocationBody(
  bytes: Buffer,
  contentType: string | undefined,
): InvocationBody | Promise<InvocationBody> {
  if (contentType === undefined || contentType.trim() === "") return sniffedBody(bytes);
  const [mediaType = "", ...parameters] = contentType.split(";").map((part) => part.trim());
  const type = mediaType.toLowerCase();
  if (type === BINARY_JSON_TYPE) {
    const size = headerSize(parameters, contentType, bytes.byteLength);
    // As with Inference-Header-Content-Length: 0, the whole body is the only input's bytes.
    return size === 0 ? rawBody(bytes, undefined) : objectBody("binary", bytes, size);
  }
  if (JSON_TYPES.has(type) || type.endsWith("+json")) return jsonBody(bytes);
  if (type === OCTET_STREAM) return sniffedBody(bytes);
  const hint = startsLikeJson(bytes)
    ? "the body was read as raw input bytes because of its Content-Type; it looks like JSON: send it with Content-Type: application/json"
    : undefined;
  return rawBody(bytes, hint, type.startsWith("text/") ? type : undefined);
}

/** The shape of nested arrays, read along their first elements (ragged data fails the count check later). */
function nestedShape(data: readonly unknown[]): number[] {
  const shape: number[] = [];
  let level: unknown = data;
  while (Array.isArray(level)) {
    shape.push(level.length);
    level = level[0];
  }
  return shape;
}

function onlyInput(model: ServedModel, form: string) {
  const input = model.config.inputs[0];
  if (input === undefined || model.config.inputs.length !== 1) {
    throw invalidArg(
      `${form} can only feed a model with one input, but model '${model.name}' has ${model.config.inputs.length}: send a KServe v2 inference request (Content-Type: application/json) naming each input`,
    );
  }
  return input;
}

function arrayRequest(
  array: readonly unknown[] | PackedArray,
  source: { readonly text: string },
  model: ServedModel,
  signal: AbortSignal | undefined,
  principal: string | undefined,
) {
  const input = onlyInput(model, "a bare JSON array");
  const packed = isPackedArray(array);
  let shape = packed ? [...array.shape] : nestedShape(array);
  // The batch dimension may be left out: the array is then one row.
  if (model.config.maxBatchSize > 0 && !input.shared && shape.length === input.dims.length)
    shape = [1, ...shape];
  // 64-bit integers past 2^53 are read from their digits (a packed array holds none).
  const tokens = () => longNumberTokens(source.text);
  const tensor: Tensor = decodeJsonTensor(
    input.name,
    input.datatype,
    shape,
    packed ? array.leaves : array,
    tokens,
  );
  const request: InferRequest = {
    id: "",
    inputs: new Map([[input.name, tensor]]),
    outputs: undefined,
    parameters: {},
    sequence: undefined,
    signal,
    principal,
  };
  return request;
}

export interface DecodeInvocationOptions {
  readonly signal: AbortSignal | undefined;
  /** Outputs go back as binary data unless the request says otherwise. */
  readonly binaryOutput: boolean;
  /** The caller (its API key's name), for the sessions it opens. */
  readonly principal?: string | undefined;
}

/** The body's inference request for `model`, and how its outputs are to be encoded. */
export function decodeInvocation(
  body: InvocationBody,
  model: ServedModel,
  options: DecodeInvocationOptions,
): DecodedInferRequest {
  const decodeOptions = {
    signal: options.signal,
    binaryOutputByDefault: options.binaryOutput,
    principal: options.principal,
  };
  switch (body.form) {
    case "json":
    case "binary":
      return decodeInferJson(body.json!, body.bytes, body.headerLength, model, decodeOptions);
    case "array":
      return {
        request: arrayRequest(body.array!, body.arraySource!, model, options.signal, options.principal),
        encoding: { binaryByDefault: options.binaryOutput, binary: new Map() },
      };
    case "raw":
      try {
        const input = onlyInput(model, "a raw body");
        if (body.textType !== undefined && input.datatype !== "BYTES") {
          throw invalidArg(
            `a ${body.textType} body cannot feed input '${input.name}' (${input.datatype}) of model '${model.name}': its text is not the input's bytes; send JSON (Content-Type: application/json, a KServe v2 inference request or a bare array of the input's data), or the input's raw bytes as application/octet-stream`,
          );
        }
        return decodeRawBody(body.bytes, model, decodeOptions);
      } catch (error) {
        if (body.jsonHint === undefined || !(error instanceof Error)) throw error;
        // The usual cause: JSON sent as another type (text/plain), or JSON that is not quite.
        throw invalidArg(`${error.message} (${body.jsonHint})`);
      }
  }
}
