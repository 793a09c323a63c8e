import { invalidArg } from "../../../core/errors.ts";
import { ENABLE_EMPTY_FINAL } from "./decoupled-responses.ts";

// Request parameters whose names start with `triton_` are Triton's own, as in Triton: a
// stream (gRPC, WebSocket) accepts the ones it gives meaning to, an HTTP request none.

const PREFIX = "triton_";

/** The `triton_` parameters a stream request may set. */
export const STREAM_RESERVED_PARAMETERS: readonly string[] = [ENABLE_EMPTY_FINAL];

/** Refuses `name` when it is Triton's and not among `allowed`, with Triton's message. */
export function checkReservedParameter(name: string, allowed: readonly string[]): void {
  if (!name.startsWith(PREFIX) || allowed.includes(name)) return;
  throw invalidArg(
    allowed.length === 0
      ? "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."
      : `parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: ${allowed.join(" ")}`,
  );
}
