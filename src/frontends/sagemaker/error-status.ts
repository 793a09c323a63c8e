import type { FastifyReply } from "fastify";
import { type ErrorCode, type ErrorReason, ServerError } from "../../core/errors.ts";
import type { HttpStatusTable } from "../common/http/error-reply.ts";
import { sendJsonText } from "../common/http/json-text.ts";
import { BodyTooLargeError } from "../common/http/request-body.ts";

// The one error table of the SageMaker family: the status of each seqserve error code,
// and of the answers SageMaker's API gives outside an error code; and where a status
// becomes the error type the AWS SDKs look for. Handlers never pick a status themselves.
//
// On the container's path (/invocations) an error is the container's answer: its status,
// and seqserve's body. SageMaker hands such an answer to the caller inside a ModelError
// (424, the container's status in OriginalStatusCode, its body in OriginalMessage), and
// so does the runtime API's path (/endpoints/{name}/…), where the AWS SDKs call seqserve
// as they call SageMaker: a client's code that handles ModelError works unchanged, and
// the SDKs do not retry a model's failure (they retry 500 and 503, which would run a
// session's step again). What SageMaker refuses itself, before a container sees the
// request, keeps its own type there: the refusals of the access gate and of a stopping
// server, the runtime's header checks (invocation-routes.ts), and a body whose bytes are
// over the limit.

declare module "fastify" {
  interface FastifyRequest {
    /** On the runtime API's path: past SageMaker's own checks, so its errors are the container's. */
    sageMakerForwarded: boolean;
  }
}

/**
 * SageMaker leaves a container's statuses to the container. Triton's SageMaker mode
 * answers with the statuses of its HTTP API (HttpCodeFromError), and so does seqserve: a
 * client moving between the two sees the same status for the same failure. The table is
 * the family's own, written out where it equals KServe's: a change to KServe's statuses
 * is not a change to SageMaker's. An outcome that may have happened (DEADLINE_EXCEEDED),
 * which Triton does not have, is 504 as on seqserve's HTTP API, with no Retry-After; on
 * the runtime API's path it reaches the SDKs inside a ModelError (424), which they do not
 * retry.
 */
export const SAGEMAKER_HTTP_STATUS: HttpStatusTable = {
  INVALID_ARG: 400,
  ALREADY_EXISTS: 400,
  CANCELLED: 400,
  UNKNOWN: 400,
  FAILED_PRECONDITION: 400,
  NOT_FOUND: 404,
  RESOURCE_EXHAUSTED: 429,
  UNAUTHENTICATED: 401,
  PERMISSION_DENIED: 403,
  INTERNAL: 500,
  UNSUPPORTED: 501,
  UNAVAILABLE: 503,
  DEADLINE_EXCEEDED: 504,
};

/**
 * Where the family's answer to a refusal is not its code's: a step refused for the
 * server's state budget (--max-state-bytes, RESOURCE_EXHAUSTED) is "the server is full
 * now, retry later", as a full backlog is. SageMaker's runtime has one error type that
 * says so, ServiceUnavailable ("Try your call again"), which the AWS SDKs retry (as any
 * 503), and it is 503; the code's 429 is ModelNotReadyException, which says the model is
 * still loading or being provisioned. Triton has no such budget, and so no status of its
 * own for it. A step whose state would pass its model's own limit (sequence_state_max_bytes)
 * fails the same way when sent again: 400, ValidationError, which the SDKs do not retry.
 */
const SAGEMAKER_CODES: Partial<Readonly<Record<ErrorReason, ErrorCode>>> = {
  state_budget: "UNAVAILABLE",
  state_bound: "FAILED_PRECONDITION",
};

/** `error` as this family answers it: a refusal it answers with another code carries that code. */
export function sageMakerCoded(error: ServerError): ServerError {
  const code = error.reason === undefined ? undefined : SAGEMAKER_CODES[error.reason];
  if (code === undefined || code === error.code) return error;
  return new ServerError(code, error.message, {
    cause: error,
    reason: error.reason!,
    ...(error.retryAfterSeconds === undefined ? {} : { retryAfterSeconds: error.retryAfterSeconds }),
  });
}

/**
 * The family's answers that no error code gives, as Triton's SageMaker server gives them:
 * - notReady: GET /ping while the server, or a model, is not ready (503).
 * - noAcceptableAnswer: an invocation whose Accept no answer form satisfies (406 Not
 *   Acceptable), refused before anything runs.
 * - alreadyLoaded: a multi-model endpoint's load of a name it serves already (409).
 * - outOfMemory: a multi-model endpoint's load or invocation that ran out of memory (507):
 *   SageMaker then unloads other models and tries again.
 * - loadFailed: a multi-model endpoint's load or unload that failed otherwise (400,
 *   whatever the failure).
 */
export const SAGEMAKER_HTTP_ANSWERS = {
  notReady: 503,
  noAcceptableAnswer: 406,
  alreadyLoaded: 409,
  outOfMemory: 507,
  loadFailed: 400,
} as const;

const ERROR_TYPE = "x-amzn-errortype";
/** SageMaker's status for an error answer of the model's container. */
const MODEL_ERROR_STATUS = 424;

/** The SageMaker runtime error type (`x-amzn-errortype`) of an HTTP status. */
export function awsErrorType(status: number): string {
  if (status === 429) return "ModelNotReadyException";
  if (status === 503) return "ServiceUnavailable";
  if (status >= 500) return "InternalFailure";
  return "ValidationError";
}

/** `{"error": …, "message": …}`: seqserve's error body, with the member the AWS SDKs read, and the error type's header. */
export function sageMakerError(
  status: number,
  message: string,
): { readonly headers: Readonly<Record<string, string>>; readonly body: string } {
  const text = JSON.stringify(message);
  return {
    headers: { [ERROR_TYPE]: awsErrorType(status) },
    body: `{"error":${text},"message":${text}}`,
  };
}

/**
 * The ModelError that SageMaker makes of a container's error answer (`status`, `body`),
 * member for member: the SDKs give OriginalStatusCode and OriginalMessage as fields of
 * the exception, and its Message as the exception's message.
 */
function modelError(status: number, body: string): string {
  const side = status >= 500 ? "server" : "client";
  return JSON.stringify({
    ErrorCode: status >= 500 ? "INTERNAL_FAILURE_FROM_MODEL" : "CLIENT_ERROR_FROM_MODEL",
    Message: `Received ${side} error (${status}) from primary with message "${body}".`,
    OriginalMessage: body,
    OriginalStatusCode: status,
  });
}

/**
 * Refusals past SageMaker's own checks that are still SageMaker's, not the container's: a
 * body whose bytes are over the limit, and a stopping server (which SageMaker's SDKs
 * retry as ServiceUnavailable, elsewhere or later).
 */
function isSageMakersOwn(error: unknown): boolean {
  return (
    error instanceof BodyTooLargeError || (error instanceof ServerError && error.reason === "server_stopping")
  );
}

export function sendSageMakerError(
  reply: FastifyReply,
  status: number,
  message: string,
  headers: Readonly<Record<string, string>> = {},
  error?: unknown,
): FastifyReply {
  const answer = sageMakerError(status, message);
  reply.code(status).headers(headers).headers(answer.headers);
  if (!reply.request.sageMakerForwarded || isSageMakersOwn(error)) return sendJsonText(reply, answer.body);
  return sendJsonText(
    reply.code(MODEL_ERROR_STATUS).header(ERROR_TYPE, "ModelError"),
    modelError(status, answer.body),
  );
}

/**
 * The words of an out-of-memory failure, as Triton's SageMaker server looks for them in a
 * failed load's or invocation's message (SageMakerMMECheckOOMError): SageMaker's
 * multi-model endpoint answers such a failure by unloading other models and trying again.
 */
const OUT_OF_MEMORY = [
  "CUDA out of memory",
  "CUDA_OUT_OF_MEMORY",
  "Out of memory",
  "Out Of Memory",
  "out of memory",
  "MemoryError",
  "OutOfMemory",
  "OOM",
  "Dst tensor is not initialized",
  "Src tensor is not initialized",
  "CNMEM_STATUS_OUT_OF_MEMORY",
  "CUDNN_STATUS_NOT_INITIALIZED",
  "CUBLAS_STATUS_ALLOC_FAILED",
  "CUBLAS_STATUS_NOT_INITIALIZED",
  "Failed to allocate memory",
  "failed to allocate memory",
  "No space left on device",
];

/** Whether `error` says it ran out of memory, in the words Triton's SageMaker server looks for. */
export function isOutOfMemory(error: unknown): boolean {
  const message = error instanceof Error ? error.message : String(error);
  return OUT_OF_MEMORY.some((words) => message.includes(words));
}

/** The status of a multi-model endpoint's failed load: 507 when it ran out of memory, else 400, as Triton answers. */
export function multiModelLoadStatus(error: unknown): number {
  return isOutOfMemory(error) ? SAGEMAKER_HTTP_ANSWERS.outOfMemory : SAGEMAKER_HTTP_ANSWERS.loadFailed;
}
