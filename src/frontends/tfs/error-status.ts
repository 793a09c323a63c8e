import { status as grpcStatus } from "@grpc/grpc-js";
import { asServerError, type ErrorCode, type ErrorReason, ServerError } from "../../core/errors.ts";
import { withoutRequestLabel } from "../../core/request-label.ts";
import type { HttpStatusTable } from "../common/http/error-reply.ts";
import type { GrpcStatusTable } from "../grpc/error-status.ts";

// The one error table of the TF-Serving family (REST and gRPC, OpenVINO Model Server's
// semantics): each seqserve error code has its gRPC code and HTTP status here, and the
// sequence refusals that OVMS words its own way get OVMS's exact texts, so clients that
// match on them keep working. Handlers never pick a status or a message themselves.

interface TfsStatus {
  readonly grpc: grpcStatus;
  readonly http: number;
}

/**
 * OVMS's statuses (its http_server.cpp / grpc_utils.cpp tables) for seqserve's codes.
 * OVMS has no status for an outcome that may have happened (DEADLINE_EXCEEDED):
 * TF-Serving's own gives gRPC's DEADLINE_EXCEEDED and, over REST, 504 (http_server.cc's
 * ToHTTPStatusCode), which clients do not retry unasked as they retry UNAVAILABLE.
 */
const TFS_STATUS: Readonly<Record<ErrorCode, TfsStatus>> = {
  INVALID_ARG: { grpc: grpcStatus.INVALID_ARGUMENT, http: 400 },
  NOT_FOUND: { grpc: grpcStatus.NOT_FOUND, http: 404 },
  ALREADY_EXISTS: { grpc: grpcStatus.ALREADY_EXISTS, http: 409 },
  FAILED_PRECONDITION: { grpc: grpcStatus.FAILED_PRECONDITION, http: 412 },
  UNAVAILABLE: { grpc: grpcStatus.UNAVAILABLE, http: 503 },
  DEADLINE_EXCEEDED: { grpc: grpcStatus.DEADLINE_EXCEEDED, http: 504 },
  UNSUPPORTED: { grpc: grpcStatus.UNIMPLEMENTED, http: 501 },
  INTERNAL: { grpc: grpcStatus.INTERNAL, http: 500 },
  CANCELLED: { grpc: grpcStatus.CANCELLED, http: 400 },
  RESOURCE_EXHAUSTED: { grpc: grpcStatus.RESOURCE_EXHAUSTED, http: 429 },
  UNAUTHENTICATED: { grpc: grpcStatus.UNAUTHENTICATED, http: 401 },
  PERMISSION_DENIED: { grpc: grpcStatus.PERMISSION_DENIED, http: 403 },
  UNKNOWN: { grpc: grpcStatus.UNKNOWN, http: 500 },
};

const table = <T>(pick: (s: TfsStatus) => T): Readonly<Record<ErrorCode, T>> =>
  Object.fromEntries(Object.entries(TFS_STATUS).map(([code, s]) => [code, pick(s)])) as Record<ErrorCode, T>;

export const TFS_GRPC_STATUS: GrpcStatusTable = table((s) => s.grpc);
export const TFS_HTTP_STATUS: HttpStatusTable = table((s) => s.http);

/** Refusals OVMS has no words of its own for, which keep seqserve's: a stopping server, the state limits. */
type SeqserveWorded = "server_stopping" | "state_budget" | "state_bound";
const SEQSERVE_WORDED: ReadonlySet<ErrorReason> = new Set<SeqserveWorded>([
  "server_stopping",
  "state_budget",
  "state_bound",
]);

/** OVMS's texts (status.cpp) for the refusals and lookups it words its own way. */
export const OVMS_MESSAGES = {
  sequence_id_missing: "Sequence ID has not been provided in request inputs",
  sequence_unknown: "Sequence with provided ID does not exist",
  sequence_exists: "Sequence with provided ID already exists",
  sequence_ending: "Sequence last request is being processed and it's not available anymore",
  sequence_limit: "Max sequence number has been reached. Could not create new sequence.",
  model_unknown: "Model with requested name is not found",
  version_unknown: "Model with requested version is not found",
  version_retired: "Model with requested version is retired",
  version_loading: "Model with requested version is not loaded yet",
  control_value: "Unexpected value of sequence control input",
  id_field: "Could not find sequence id in expected tensor proto field uint64_val",
  control_field: "Could not find sequence control input in expected tensor proto field uint32_val",
  no_shape: "Special input proto does not contain tensor shape information",
  dimensions: "Invalid number of shape dimensions",
  shape: "Invalid input shape",
  rest_input: "Could not parse input content. Not valid ndarray detected",
  rest_order: "Invalid JSON structure. Could not detect row or column format",
  rest_body: "Request body should be JSON object",
} as const satisfies Readonly<Record<Exclude<ErrorReason, SeqserveWorded>, string>> &
  Readonly<Record<string, string>>;

/**
 * Where OVMS's code differs from seqserve's for the same refusal: a version not ready, or
 * a model with no version left, is NOT_FOUND to OVMS (404), where Triton answers
 * UNAVAILABLE (503, worth retrying); OVMS's text for a missing sequence goes with
 * NOT_FOUND (404) whatever seqserve's code (a sequence whose state the store lost is
 * FAILED_PRECONDITION to seqserve's other families). A step refused for the server's
 * state budget (--max-state-bytes, worded seqserve's way) is "the server is full now":
 * OVMS's only such answer is UNAVAILABLE (503, its sequence manager's full
 * max_sequence_number), which TF-Serving clients retry; RESOURCE_EXHAUSTED (429) is a
 * status neither server gives.
 */
const OVMS_CODES: Partial<Readonly<Record<ErrorReason, ErrorCode>>> = {
  sequence_unknown: "NOT_FOUND",
  version_retired: "NOT_FOUND",
  version_loading: "NOT_FOUND",
  version_unknown: "NOT_FOUND",
  state_budget: "UNAVAILABLE",
};

/** `error` as this family answers it: a refusal OVMS words its own way carries OVMS's text and code. */
export function tfsError(error: unknown): ServerError {
  const serverError = asServerError(error);
  const reason = serverError.reason;
  const retry =
    serverError.retryAfterSeconds === undefined ? {} : { retryAfterSeconds: serverError.retryAfterSeconds };
  if (reason === undefined || SEQSERVE_WORDED.has(reason)) {
    // Triton opens its request checks' messages with the request's id; TF-Serving's
    // requests have none.
    const message = withoutRequestLabel(serverError.message);
    const code = (reason === undefined ? undefined : OVMS_CODES[reason]) ?? serverError.code;
    if (message === serverError.message && code === serverError.code) return serverError;
    return new ServerError(code, message, { cause: serverError, ...retry });
  }
  return new ServerError(
    OVMS_CODES[reason] ?? serverError.code,
    OVMS_MESSAGES[reason as Exclude<ErrorReason, SeqserveWorded>],
    { cause: serverError, ...retry },
  );
}

/** OVMS's REST paths (TF-Serving's `/v1/...`). */
const REST_PATH = /^\/v1(\/|$|\?)/;
const REST_METHODS = new Set(["GET", "POST", "OPTIONS"]);

/**
 * OVMS's answer to a `/v1` request under a method it does not serve, decided before the
 * path as OVMS decides it: 406 "Unsupported method". Undefined for other requests.
 */
export function ovmsUnsupportedMethod(
  method: string,
  url: string,
): { status: 406; message: string } | undefined {
  if (!REST_PATH.test(url) || REST_METHODS.has(method)) return undefined;
  return { status: 406, message: "Unsupported method" };
}

/** An INVALID_ARG with OVMS's text, optionally followed by OVMS's " - <details>". */
export function ovmsInvalid(message: keyof typeof OVMS_MESSAGES, details?: string): ServerError {
  return new ServerError(
    "INVALID_ARG",
    details === undefined ? OVMS_MESSAGES[message] : `${OVMS_MESSAGES[message]} - ${details}`,
  );
}
