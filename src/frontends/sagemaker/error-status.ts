import type { FastifyReply } from "fastify";
import type { HttpStatusTable } from "../common/http/error-reply.ts";
import { KSERVE_HTTP_STATUS } from "../http/error-status.ts";

// The one place where seqserve's error codes become the statuses of the SageMaker
// family, and where a status becomes the error type the AWS SDKs look for. Behind
// SageMaker, the container's status and body reach the caller inside a ModelError; called
// directly (the runtime API path), the SDKs read the type from `x-amzn-errortype` and the
// message from the body's `message`, so a seqserve error arrives as, e.g., a
// ValidationError whose message is seqserve's.

/**
 * SageMaker leaves a container's statuses to the container. Triton's SageMaker mode
 * answers with the statuses of its HTTP API, and so does seqserve: a client moving
 * between the two sees the same status for the same failure.
 */
export const SAGEMAKER_HTTP_STATUS: HttpStatusTable = KSERVE_HTTP_STATUS;

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
    headers: { "x-amzn-errortype": awsErrorType(status) },
    body: `{"error":${text},"message":${text}}`,
  };
}

export function sendSageMakerError(
  reply: FastifyReply,
  status: number,
  message: string,
  headers: Readonly<Record<string, string>> = {},
): FastifyReply {
  const error = sageMakerError(status, message);
  return reply.code(status).headers(headers).headers(error.headers).type("application/json").send(error.body);
}
