import type { StatusObject } from "@grpc/grpc-js";
import { Metadata, status } from "@grpc/grpc-js";
import { asServerError, type ErrorCode, type ServerError } from "../../core/errors.ts";
import { cutToBytes } from "../common/cut-text.ts";

// The one place where seqserve's error codes become gRPC status codes. Each gRPC service
// family has its own table (KServe v2 here; a TF-Serving PredictionService gets its own
// beside it), and every handler goes through `statusOf` rather than picking codes itself.

export type GrpcStatusTable = Readonly<Record<ErrorCode, status>>;

/** Triton's table (GrpcStatusUtil), plus the codes Triton does not produce. */
export const KSERVE_GRPC_STATUS: GrpcStatusTable = {
  INVALID_ARG: status.INVALID_ARGUMENT,
  NOT_FOUND: status.NOT_FOUND,
  ALREADY_EXISTS: status.ALREADY_EXISTS,
  FAILED_PRECONDITION: status.FAILED_PRECONDITION,
  UNAVAILABLE: status.UNAVAILABLE,
  UNSUPPORTED: status.UNIMPLEMENTED,
  INTERNAL: status.INTERNAL,
  CANCELLED: status.CANCELLED,
  RESOURCE_EXHAUSTED: status.RESOURCE_EXHAUSTED,
  UNAUTHENTICATED: status.UNAUTHENTICATED,
  PERMISSION_DENIED: status.PERMISSION_DENIED,
  UNKNOWN: status.UNKNOWN,
};

/** The trailer gRPC clients read as "retry after this many milliseconds" (gRFC A6). */
const RETRY_PUSHBACK = "grpc-retry-pushback-ms";

export type GrpcErrorStatus = Pick<StatusObject, "code" | "details" | "metadata">;

/**
 * The longest status message sent, in UTF-8 bytes. It travels in a trailer, percent-encoded
 * (up to 3 bytes a byte), and clients drop a call whose metadata passes their limit (8 KiB
 * by default in grpc-js): the call then ends with no status at all. Messages may echo a
 * client's model name, input names or shape.
 */
const MAX_DETAILS_BYTES = 2048;

/** Any thrown value as the gRPC status to end a call with; the details carry the message. */
export function statusOf(error: unknown, table: GrpcStatusTable = KSERVE_GRPC_STATUS): GrpcErrorStatus {
  const serverError: ServerError = asServerError(error);
  const metadata = new Metadata();
  if (serverError.retryAfterSeconds !== undefined) {
    metadata.set(RETRY_PUSHBACK, String(Math.round(serverError.retryAfterSeconds * 1000)));
  }
  return {
    code: table[serverError.code],
    details: cutToBytes(serverError.message, MAX_DETAILS_BYTES),
    metadata,
  };
}
