import type { StatusObject } from "@grpc/grpc-js";
import { Metadata, type status } from "@grpc/grpc-js";
import { asServerError, type ErrorCode, type ServerError } from "../../core/errors.ts";
import { cutToBytes } from "../common/cut-text.ts";
import { KSERVE_GRPC_STATUS } from "../common/kserve/error-status.ts";

// How a seqserve error ends a gRPC call: its code through the family's table (KServe v2's
// in common/kserve/error-status.ts, TF-Serving's in tfs/error-status.ts), its message as
// the details. Every handler goes through `statusOf` rather than picking codes itself.

/** A protocol family's table from seqserve's error codes to gRPC status codes. */
export type GrpcStatusTable = Readonly<Record<ErrorCode, status>>;

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
