import type { FastifyReply, FastifyRequest } from "fastify";
import { asServerError, type ErrorCode, ServerError } from "../../../core/errors.ts";
import { HttpError } from "./http-error.ts";

// Every error leaves the server in its protocol family's error body (`{"error": "<message>"}`
// unless the family says otherwise): ServerErrors with the status their code has in the
// family's table, HttpErrors with the status they carry, and fastify's own errors (bad
// media type, body limits, bad URLs) reshaped with a precise message.

/** The HTTP status of each of seqserve's error codes, from a protocol family's one error table. */
export type HttpStatusTable = Readonly<Record<ErrorCode, number>>;

interface ErrorReply {
  readonly status: number;
  readonly message: string;
  readonly headers: Readonly<Record<string, string>>;
}

interface FastifyLikeError {
  readonly code?: unknown;
  readonly statusCode?: unknown;
  readonly message: string;
}

function fastifyMessage(error: FastifyLikeError, request: FastifyRequest, bodyLimitBytes: number): string {
  switch (error.code) {
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return `unsupported Content-Type '${request.headers["content-type"] ?? ""}': expected a media type of the form type/subtype`;
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return `request body is larger than the limit of ${bodyLimitBytes} bytes`;
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
      return "request body size did not match its Content-Length header";
    default:
      return error.message;
  }
}

function retryHeaders(error: ServerError): Readonly<Record<string, string>> {
  if (error.retryAfterSeconds === undefined) return {};
  // Retry-After takes whole seconds; round up so a client never retries too early.
  return { "retry-after": String(Math.max(0, Math.ceil(error.retryAfterSeconds))) };
}

/** The status, message and headers that answer `error`. */
function describeError(
  error: unknown,
  table: HttpStatusTable,
  request: FastifyRequest,
  bodyLimitBytes: number,
): ErrorReply {
  if (error instanceof ServerError) {
    return { status: table[error.code], message: error.message, headers: retryHeaders(error) };
  }
  if (error instanceof HttpError) {
    return { status: error.status, message: error.message, headers: error.headers };
  }
  if (error instanceof Error) {
    const status = (error as FastifyLikeError).statusCode;
    if (typeof status === "number" && status >= 400 && status < 500) {
      return { status, message: fastifyMessage(error, request, bodyLimitBytes), headers: {} };
    }
  }
  const internal = asServerError(error);
  return { status: table[internal.code], message: internal.message, headers: {} };
}

/** An error answer's JSON body and headers of its own, in an API family's form. */
export type ErrorBody = (
  status: number,
  message: string,
) => { readonly headers: Readonly<Record<string, string>>; readonly body: string };

/** seqserve's (and Triton's) error body: `{"error": "<message>"}`. */
export const KSERVE_ERROR_BODY: ErrorBody = (_status, message) => ({
  headers: {},
  body: `{"error":${JSON.stringify(message)}}`,
});

export function sendError(
  reply: FastifyReply,
  status: number,
  message: string,
  headers: Readonly<Record<string, string>> = {},
  _error?: unknown,
): FastifyReply {
  return reply
    .code(status)
    .headers(headers)
    .type("application/json")
    .send(KSERVE_ERROR_BODY(status, message).body);
}

/**
 * How a protocol family writes an error (seqserve's `{"error": …}` unless it says
 * otherwise); `error` is what was thrown, where there was something.
 */
export type SendError = typeof sendError;

/** A fastify error handler answering with `table`'s statuses. */
export function createErrorHandler(
  table: HttpStatusTable,
  bodyLimitBytes: number,
  send: SendError = sendError,
): (error: Error, request: FastifyRequest, reply: FastifyReply) => void {
  return (error, request, reply) => {
    const { status, message, headers } = describeError(error, table, request, bodyLimitBytes);
    // A fault of the server's is an error; a refusal (a 503 for a version not ready, a full
    // queue) is the client's to handle, and at thousands a second would flood the log.
    if (status === 500) request.log.error({ err: error, url: request.url }, message);
    else request.log.debug({ url: request.url, status }, message);
    send(reply, status, message, headers, error);
  };
}
