import type { ServerError } from "./errors.ts";

// Whether a request failed after its model took it (its run failed, its wait ran out, it
// was cancelled) or was refused before (a check, a full queue, a stopping server). Triton's
// stream answers the two differently: a failure after admission comes back, like a
// response, with the model's name and version and `triton_final_response`.

const admitted = new WeakSet<ServerError>();

/** `failure` came after the model took its request. */
export function markAdmitted(failure: ServerError): void {
  admitted.add(failure);
}

export function failedAfterAdmission(error: unknown): boolean {
  return typeof error === "object" && error !== null && admitted.has(error as ServerError);
}
