// One error type for the whole server. `code` is the status class (Triton's
// TRITONSERVER_Error codes plus FAILED_PRECONDITION); each protocol family maps it to its
// protocol's statuses with its one table (KServe v2: frontends/common/kserve/error-status.ts,
// for HTTP and gRPC; TF-Serving: frontends/tfs/error-status.ts; SageMaker:
// frontends/sagemaker/error-status.ts). Messages are written for the client: they name the
// model, input, sequence or field at fault, and keep Triton's wording where Triton has one.

export const ERROR_CODES = [
  "INVALID_ARG",
  "NOT_FOUND",
  "ALREADY_EXISTS",
  "FAILED_PRECONDITION",
  "UNAVAILABLE",
  /**
   * The outcome is unknown: what was asked may have been done, or may be done yet (a step
   * whose state write the store was sent and did not answer). gRPC's DEADLINE_EXCEEDED,
   * which "may be returned even if the operation has completed successfully": unlike
   * UNAVAILABLE, no client or gateway retries it by default, and it carries no Retry-After.
   */
  "DEADLINE_EXCEEDED",
  "UNSUPPORTED",
  "INTERNAL",
  "CANCELLED",
  "RESOURCE_EXHAUSTED",
  /** The caller did not say who it is (no credential, or one the server does not know). */
  "UNAUTHENTICATED",
  /** The caller is known and may not do this (an API its key does not open, another caller's sequence). */
  "PERMISSION_DENIED",
  "UNKNOWN",
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

/**
 * Stable names for refusals that protocol families word differently (OpenVINO Model
 * Server's sequence errors have fixed texts, Triton's are about flags). A frontend that
 * must use its protocol's wording looks at `reason`; the others send the message.
 */
const ERROR_REASONS = [
  /** A request that is not a START names no sequence id. */
  "sequence_id_missing",
  /** The id names no live sequence (never started, or ended). */
  "sequence_unknown",
  /** A START names an id whose sequence is live. */
  "sequence_exists",
  /** A START names an id whose sequence has its END still to run. */
  "sequence_ending",
  /** A START finds every sequence slot taken (and no room to wait). */
  "sequence_limit",
  /** No model of the name is in the repository. */
  "model_unknown",
  /** The model has no such version. */
  "version_unknown",
  /** The version was served, and is no longer (replaced or unloaded). */
  "version_retired",
  /** The version is being loaded and has not served yet. */
  "version_loading",
  /** The server is stopping: it takes no new work here (another replica, or a restart, may). */
  "server_stopping",
  /** A step's state would take every sequence's state past --max-state-bytes. */
  "state_budget",
  /** A step's state would pass its model's own bound on one sequence's state (sequence_state_max_bytes). */
  "state_bound",
] as const;

export type ErrorReason = (typeof ERROR_REASONS)[number];

export interface ServerErrorOptions {
  /**
   * For UNAVAILABLE, and a RESOURCE_EXHAUSTED whose room comes back by itself (the state
   * budget): when the client may retry (HTTP Retry-After, gRPC grpc-retry-pushback-ms).
   * Never for an outcome that may have happened (DEADLINE_EXCEEDED).
   */
  readonly retryAfterSeconds?: number;
  readonly cause?: unknown;
  readonly reason?: ErrorReason;
}

export class ServerError extends Error {
  readonly code: ErrorCode;
  readonly retryAfterSeconds: number | undefined;
  readonly reason: ErrorReason | undefined;

  constructor(code: ErrorCode, message: string, options: ServerErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "ServerError";
    this.code = code;
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.reason = options.reason;
  }
}

export const invalidArg = (message: string): ServerError => new ServerError("INVALID_ARG", message);
export const notFound = (message: string): ServerError => new ServerError("NOT_FOUND", message);
export const unavailable = (message: string, retryAfterSeconds?: number): ServerError =>
  new ServerError("UNAVAILABLE", message, retryAfterSeconds === undefined ? {} : { retryAfterSeconds });
export const internal = (message: string, cause?: unknown): ServerError =>
  new ServerError("INTERNAL", message, { cause });
/** Triton's answer to a health check of a stopping server. */
export const SERVER_EXITING = "Server exiting";
/** Triton's answer to a model readiness check, or a repository call, while the server is not READY (stopping). */
export const SERVER_NOT_READY = "Server not ready";
/**
 * A refusal because the server is stopping (reason "server_stopping"): UNAVAILABLE, to be
 * retried elsewhere or later, and said so with a Retry-After (grpc-retry-pushback-ms) in
 * every family, as a client behind a load balancer should send it to another replica.
 */
export const stopping = (message: string): ServerError =>
  new ServerError("UNAVAILABLE", message, { reason: "server_stopping", retryAfterSeconds: 1 });
export const cancelled = (message = "request cancelled"): ServerError =>
  new ServerError("CANCELLED", message);

/**
 * What a client is told of a failure that is not a ServerError: a bug, or a runtime's own
 * error, whose message is written for whoever reads the server's code ("Invalid typed array
 * length: 4294967296", a stack's file names). The original travels as the cause, for the log.
 */
export const INTERNAL_ERROR_MESSAGE =
  "internal error: the server failed to handle the request (the server log has the details)";

/** Any thrown value as a ServerError; unknown failures become INTERNAL, with a message for clients. */
export function asServerError(error: unknown): ServerError {
  if (error instanceof ServerError) return error;
  return new ServerError("INTERNAL", INTERNAL_ERROR_MESSAGE, { cause: error });
}
