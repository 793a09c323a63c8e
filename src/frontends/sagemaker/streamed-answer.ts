import { EventStreamCodec } from "@smithy/eventstream-codec";
import type { FastifyReply } from "fastify";
import type { ServerError } from "../../core/errors.ts";
import type { InferRequest, InferResponse } from "../../core/infer.ts";
import type { ServedModel } from "../../core/model.ts";
import { inferStream, type StreamedInferResponse } from "../../core/response-stream.ts";
import { writeStreamedReply } from "../common/http/streamed-reply.ts";
import type { OutputEncoding } from "../common/kserve/infer-request-decoder.ts";
import { encodeInferResponse } from "../common/kserve/infer-response-encoder.ts";
import type { ResponseBudgets } from "../common/response-budget.ts";
import { type AnswerForm, encodeAnswer, JSON_LINES_TYPE } from "./invocation-response.ts";

// Answers that go out as they are produced.
//
// - The container's `/invocations` (and `/endpoints/{name}/invocations`) answers a
//   decoupled model (any number of responses per request) with JSON lines
//   (application/jsonlines): each response a KServe v2 JSON object on a line of its own,
//   written when the model sends it. Behind SageMaker, a streamed body is what
//   InvokeEndpointWithResponseStream hands the caller part by part.
// - `/endpoints/{name}/invocations-response-stream` is that API as the AWS SDKs call it:
//   an AWS event stream (application/vnd.amazon.eventstream) of PayloadPart events, one
//   per response of a decoupled model (a JSON line each), or one holding a model's only
//   answer in the form an invocation would get; the payload's type is in
//   X-Amzn-SageMaker-Content-Type.
//
// The status goes out with the first response: a request that fails before it gets the
// usual error answer, which the SDKs raise by its type; a failure after it is a last line
// `{"error": …}`, or a ModelStreamError event (its ErrorCode is seqserve's error code).

export const EVENT_STREAM_TYPE = "application/vnd.amazon.eventstream";

/** How a route delivers answers: the container's contract, or the runtime's response stream. */
export type Delivery = "container" | "response-stream";

/** A request on its way: its one answer, or a decoupled model's responses, the first one taken. */
export type Started =
  | { readonly kind: "one"; readonly response: InferResponse }
  | {
      readonly kind: "streamed";
      /** Undefined: the request completed without a response. */
      readonly first: StreamedInferResponse | undefined;
      readonly rest: AsyncIterator<StreamedInferResponse>;
    };

/** Runs `request`; a failure before its first response is the request's (nothing has gone out). */
export async function start(model: ServedModel, request: InferRequest): Promise<Started> {
  if (model.decoupled !== true) return { kind: "one", response: await model.infer(request) };
  const rest = inferStream(model, request)[Symbol.asyncIterator]();
  const first = await rest.next();
  return { kind: "streamed", first: first.done === true ? undefined : first.value, rest };
}

/** Every output as JSON, whatever the request asked: a line holds no binary data. */
const asJson = (encoding: OutputEncoding): OutputEncoding => ({
  ...encoding,
  binaryByDefault: false,
  binary: new Map(),
});

/** A response as a JSON line, in an encoding `asJson` made. */
const jsonLine = (response: InferResponse, encoding: OutputEncoding): string =>
  `${encodeInferResponse(response, encoding).body}\n`;

const failureLine = (error: ServerError): string => `${JSON.stringify({ error: error.message })}\n`;

// The AWS SDKs' own event-stream codec (@smithy): it encodes the answers, and reads them
// back for the benchmark's client; its UTF-8 helpers are Node's.
const codec = new EventStreamCodec(
  (bytes) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8"),
  (text) => Buffer.from(text, "utf8"),
);

const header = (value: string) => ({ type: "string" as const, value });

/** A PayloadPart event: `bytes` are its Bytes. */
export function payloadPart(bytes: string | Uint8Array): Uint8Array {
  return codec.encode({
    headers: {
      ":message-type": header("event"),
      ":event-type": header("PayloadPart"),
      ":content-type": header("application/octet-stream"),
    },
    body: typeof bytes === "string" ? Buffer.from(bytes, "utf8") : bytes,
  });
}

/** A ModelStreamError exception event: the SDKs raise it from the stream's iteration. */
function modelStreamError(error: ServerError): Uint8Array {
  return codec.encode({
    headers: {
      ":message-type": header("exception"),
      ":exception-type": header("ModelStreamError"),
      ":content-type": header("application/json"),
    },
    body: Buffer.from(JSON.stringify({ Message: error.message, ErrorCode: error.code }), "utf8"),
  });
}

/** What an event stream holds: its PayloadParts' bytes, and the exception that ended it, if one did. */
export interface EventStreamContent {
  readonly parts: Uint8Array[];
  readonly exception: { readonly type: string; readonly message: string } | undefined;
}

/** Reads a whole AWS event stream (a client's view, for the benchmark). */
export function readEventStream(bytes: Uint8Array): EventStreamContent {
  const parts: Uint8Array[] = [];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let offset = 0; offset + 4 <= bytes.byteLength; ) {
    const length = view.getUint32(offset, false);
    const { headers, body } = codec.decode(bytes.subarray(offset, offset + length));
    offset += length;
    const kind = headers[":message-type"]?.value;
    if (kind === "event" && headers[":event-type"]?.value === "PayloadPart") parts.push(body);
    else if (kind === "exception") {
      const text = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString("utf8");
      return { parts, exception: { type: String(headers[":exception-type"]?.value), message: text } };
    }
  }
  return { parts, exception: undefined };
}

/**
 * Sends `body` (of type `type`) as a response stream's only part: what the stream answers
 * without a model's answer (a CLOSE without inputs), which the SDKs read as an event
 * stream like any other.
 */
export function sendOnePart(reply: FastifyReply, type: string, body: string | Uint8Array): FastifyReply {
  const part = payloadPart(body);
  return reply
    .header("X-Amzn-SageMaker-Content-Type", type)
    .type(EVENT_STREAM_TYPE)
    .send(Buffer.from(part.buffer, part.byteOffset, part.byteLength));
}

export interface DeliverOptions {
  readonly delivery: Delivery;
  readonly answer: AnswerForm;
  readonly encoding: OutputEncoding;
  /** A session's headers. */
  readonly headers: Readonly<Record<string, string>>;
  readonly budgets?: ResponseBudgets | undefined;
  readonly idleTimeoutMs?: number | undefined;
}

/**
 * Sends a started request's answer as it streams: a decoupled model's responses (JSON lines
 * on the container's path, parts on the response stream), or one answer as the response
 * stream's only part. One answer on the container's path goes as `sendAnswer` sends it.
 */
export async function deliverStreamed(
  reply: FastifyReply,
  started: Started,
  options: DeliverOptions,
): Promise<undefined> {
  const { delivery, encoding, headers } = options;
  if (started.kind === "one") {
    // The response stream of a model with one answer: one part, in the form an invocation gets.
    const { type, body } = await encodeAnswer(started.response, options.answer, encoding);
    sendOnePart(reply.headers(headers), type, body);
    return undefined;
  }
  const lines = asJson(encoding);
  const streamHeaders =
    delivery === "container"
      ? { ...headers, "content-type": JSON_LINES_TYPE }
      : { ...headers, "content-type": EVENT_STREAM_TYPE, "X-Amzn-SageMaker-Content-Type": JSON_LINES_TYPE };
  await writeStreamedReply(reply, {
    headers: streamHeaders,
    first: started.first,
    rest: started.rest,
    frame:
      delivery === "container"
        ? (response) => jsonLine(response, lines)
        : (response) => payloadPart(jsonLine(response, lines)),
    failure: delivery === "container" ? failureLine : modelStreamError,
    budgets: options.budgets,
    idleTimeoutMs: options.idleTimeoutMs,
  });
  return undefined;
}
