import type { FastifyReply } from "fastify";
import type { InferResponse } from "../../core/infer.ts";
import type { TensorMetadata } from "../../core/model.ts";
import { HttpError } from "../common/http/http-error.ts";
import type { OutputEncoding } from "../common/kserve/infer-request-decoder.ts";
import {
  type EncodedInferResponse,
  encodeInferResponseOffThread,
} from "../common/kserve/infer-response-encoder.ts";
import { encodeRawTensor } from "../common/raw-tensor.ts";
import { writeParts } from "../json-thread/write-parts.ts";
import { SAGEMAKER_HTTP_ANSWERS } from "./error-status.ts";
import { BINARY_JSON_TYPE, type BodyForm } from "./invocation-body.ts";

// How an invocation is answered: in the form of its request, unless Accept asks for
// another one the answer can take.
//
//   json    a KServe v2 JSON response (application/json)
//   binary  a KServe v2 JSON header and binary outputs
//           (application/vnd.sagemaker-triton.binary+json;json-header-size=N)
//   raw     the raw bytes of the only output (application/octet-stream)
//   array   the data of the only output as a bare JSON array nested to its shape
//
// A bare request (raw bytes or an array) gets a bare answer when one output comes back,
// else the KServe v2 form. The form is chosen before the model runs: a step of a session
// that ran but could not be answered would still have moved its state on. It is chosen
// from the outputs the request asks for or the config declares, and model code may
// return fewer: a bare form then gives way to the KServe v2 form, which carries any number.

export type AnswerForm = "json" | "binary" | "raw" | "array";

const JSON_TYPE = "application/json";
const OCTET_STREAM = "application/octet-stream";
/** A decoupled model's answer: one KServe v2 JSON response per line, as they come (streamed-answer.ts). */
export const JSON_LINES_TYPE = "application/jsonlines";

interface MediaRange {
  readonly type: string;
  readonly q: number;
}

function mediaRanges(accept: string): MediaRange[] {
  const ranges: MediaRange[] = [];
  for (const entry of accept.split(",")) {
    const [type = "", ...parameters] = entry.split(";").map((part) => part.trim());
    // Parameter names are case-insensitive (RFC 9110 §5.6.6): Q=0 refuses a type as q=0 does.
    const q = parameters.find((p) => p.slice(0, 2).toLowerCase() === "q=");
    const weight = q === undefined ? 1 : Number(q.slice(2));
    if (type !== "" && Number.isFinite(weight) && weight > 0)
      ranges.push({ type: type.toLowerCase(), q: weight });
  }
  // Stable: equal weights keep the client's order.
  return ranges.sort((a, b) => b.q - a.q);
}

/** Outputs that only travel as binary data. */
function binaryOnly(outputs: readonly TensorMetadata[]): TensorMetadata | undefined {
  return outputs.find((o) => o.datatype === "FP16" || o.datatype === "BF16");
}

/**
 * The answer's form, from the request's form, the outputs it will return and Accept. An
 * Accept that no form can satisfy is refused with 406, before anything runs.
 */
export function chooseAnswer(
  accept: string | undefined,
  form: BodyForm,
  outputs: readonly TensorMetadata[],
): AnswerForm {
  const single = outputs.length === 1;
  const bare = form === "raw" || form === "array";
  const jsonCapable = binaryOnly(outputs) === undefined;
  const asJson: AnswerForm = bare && single ? "array" : "json";
  let natural: AnswerForm;
  if (form === "json" || form === "binary") natural = form;
  else if (form === "raw") natural = single ? "raw" : "binary";
  else natural = jsonCapable ? asJson : "binary";
  if (accept === undefined || accept.trim() === "") return natural;
  for (const { type } of mediaRanges(accept)) {
    if (type === "*/*" || type === "application/*") return natural;
    if (type === JSON_TYPE && (jsonCapable || !bare)) return asJson;
    if (type === BINARY_JSON_TYPE) return "binary";
    if (type === OCTET_STREAM && single) return "raw";
  }
  const fp16 = binaryOnly(outputs);
  throw new HttpError(
    SAGEMAKER_HTTP_ANSWERS.noAcceptableAnswer,
    `no answer fits Accept '${accept}': seqserve answers ${JSON_TYPE}${fp16 === undefined ? "" : ` (not for ${fp16.datatype} output '${fp16.name}')`}, ${BINARY_JSON_TYPE}, or ${OCTET_STREAM} when one output comes back (this request returns ${outputs.length})`,
  );
}

/**
 * Refuses (406), before anything runs, a decoupled model's request whose Accept JSON lines
 * do not satisfy, or whose outputs JSON cannot carry.
 */
export function checkJsonLinesAnswer(accept: string | undefined, outputs: readonly TensorMetadata[]): void {
  const binary = binaryOnly(outputs);
  if (binary !== undefined) {
    throw new HttpError(
      SAGEMAKER_HTTP_ANSWERS.noAcceptableAnswer,
      `a model with several responses per request is answered in ${JSON_LINES_TYPE}, and its ${binary.datatype} output '${binary.name}' travels only as binary data`,
    );
  }
  if (accept === undefined || accept.trim() === "") return;
  const fits = ({ type }: MediaRange) =>
    type === "*/*" || type === "application/*" || type === JSON_LINES_TYPE;
  if (mediaRanges(accept).some(fits)) return;
  throw new HttpError(
    SAGEMAKER_HTTP_ANSWERS.noAcceptableAnswer,
    `no answer fits Accept '${accept}': a model with several responses per request is answered in ${JSON_LINES_TYPE}, one KServe v2 JSON response per line`,
  );
}

export interface EncodedAnswer {
  readonly type: string;
  readonly body: string | Buffer;
}

/** A body of OFF_THREAD_JSON_ELEMENTS elements or more is written on the JSON thread (a promise only then). */
export function encodeAnswer(
  response: InferResponse,
  answer: AnswerForm,
  encoding: OutputEncoding,
): EncodedAnswer | Promise<EncodedAnswer> {
  const only = response.outputs.length === 1 ? response.outputs[0] : undefined;
  if (answer === "raw" && only !== undefined) {
    const bytes = encodeRawTensor(only);
    return { type: OCTET_STREAM, body: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength) };
  }
  if (answer === "array" && only !== undefined) {
    const body = writeParts([{ form: "nested", name: only.name, tensor: only }], only.data.length);
    return body instanceof Promise
      ? body.then((bytes) => ({ type: JSON_TYPE, body: bytes }))
      : { type: JSON_TYPE, body };
  }
  // The KServe form, also when a bare form gave way (outputs a raw answer would have
  // sent as bytes then go as binary data after the JSON).
  const encoded = encodeInferResponseOffThread(response, encoding);
  return encoded instanceof Promise ? encoded.then(kserveAnswer) : kserveAnswer(encoded);
}

function kserveAnswer(encoded: EncodedInferResponse): EncodedAnswer {
  const type =
    encoded.headerLength === undefined
      ? JSON_TYPE
      : `${BINARY_JSON_TYPE};json-header-size=${encoded.headerLength}`;
  return { type, body: encoded.body };
}

/**
 * Sends `response` in `answer` form; `encoding` says which outputs a KServe form sends
 * binary. `headers` (a session's) are set only once the answer is encoded: an answer that
 * fails becomes an error that carries none of them.
 */
export function sendAnswer(
  reply: FastifyReply,
  response: InferResponse,
  answer: AnswerForm,
  encoding: OutputEncoding,
  headers: Readonly<Record<string, string>> = {},
): FastifyReply | Promise<FastifyReply> {
  const send = ({ type, body }: EncodedAnswer) =>
    reply
      .headers(headers)
      .type(type)
      .send(typeof body === "string" ? Buffer.from(body, "utf8") : body);
  const encoded = encodeAnswer(response, answer, encoding);
  return encoded instanceof Promise ? encoded.then(send) : send(encoded);
}
