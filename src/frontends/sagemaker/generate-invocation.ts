import type { FastifyReply, FastifyRequest } from "fastify";
import type { SageMakerInferenceType } from "../../config/server-options.ts";
import { invalidArg } from "../../core/errors.ts";
import type { ServedModel } from "../../core/model.ts";
import { answerGenerate, type GenerateDelivery, readGenerateBody } from "../http/generate/generate-routes.ts";
import { EVENT_STREAM_TYPE, payloadPart, sendOnePart } from "./streamed-answer.ts";

// Triton's SAGEMAKER_TRITON_INFERENCE_TYPE: /invocations answered as the generate
// extension (POST /v2/models/{m}/generate or /generate_stream) is, for the model an
// invocation goes to. Triton's SageMaker server calls the same handler as its HTTP
// server, so the answer is the same: one JSON object, or Server-Sent Events
// (text/event-stream) for generate_stream; only an error keeps the SageMaker form (a
// stream its model failed on /invocations is generate_stream's: the failure's status, and
// its event).

/** What /invocations is: an inference in SageMaker's body forms, or Triton's generate extension. */
export type InferenceType = SageMakerInferenceType;

const SESSION_ID = "x-amzn-sagemaker-session-id";

/**
 * On InvokeEndpointWithResponseStream, SageMaker hands the caller what the container's
 * /invocations sends, part by part: here the generate answer (its one JSON object, or each
 * Server-Sent Event) goes as the response stream's parts.
 */
const RESPONSE_STREAM_PARTS: GenerateDelivery["parts"] = {
  one: sendOnePart,
  frame: (text) => payloadPart(text),
  headers: { "content-type": EVENT_STREAM_TYPE, "X-Amzn-SageMaker-Content-Type": "text/event-stream" },
};

/** Answers an invocation as Triton's generate extension, for `model`; `delivery`'s parts for the response stream. */
export function answerGenerateInvocation(
  type: Exclude<InferenceType, "infer">,
  model: ServedModel,
  request: FastifyRequest,
  reply: FastifyReply,
  delivery: GenerateDelivery,
  responseStream = false,
): Promise<FastifyReply | undefined> {
  if (responseStream) delivery = { ...delivery, parts: RESPONSE_STREAM_PARTS };
  // A stream its model failed before the first response is the container's answer with
  // an error status (Triton's generate_stream): on the runtime API's paths SageMaker hands
  // such an answer over as a ModelError, which the error handler makes of it.
  if (request.sageMakerForwarded) delivery = { ...delivery, failedStreamAsError: true };
  // A generate body has no session: its sequence is in its parameters (sequence_id,
  // sequence_start, sequence_end), as on the HTTP port. A session header would be ignored.
  if (request.headers[SESSION_ID] !== undefined) {
    throw invalidArg(
      `SageMaker sessions are not served when invocations are Triton's ${type} (SAGEMAKER_TRITON_INFERENCE_TYPE): give sequence_id, sequence_start and sequence_end in the body's parameters`,
    );
  }
  const body = readGenerateBody((request.body as Buffer | undefined) ?? undefined);
  return answerGenerate(model, body, type === "generate_stream", request, reply, delivery);
}
