import type { InferRequest } from "../infer.ts";

/**
 * Whether a cancelled request leaves its sequence going on. Triton ends the sequence of a
 * cancelled request; OVMS (the "exclusive" admission) and SageMaker sessions have no
 * cancellation: their client's giving up (a deadline, a closed connection) only drops the
 * request, if it has not run, and one already running completes, its step applied. A
 * numbered step is kept too: its client retries it by its number, and the retry finds its
 * sequence, and its answer if it ran.
 */
export function keepsSequenceOnCancel(request: InferRequest): boolean {
  const control = request.sequence;
  return control?.admission === "exclusive" || control?.keepOnCancel === true || control?.step !== undefined;
}
