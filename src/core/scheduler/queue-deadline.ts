import type { QueueTimeoutConfig } from "../model-config.ts";
import type { PendingRequest } from "./pending-request.ts";

// Triton's queue policy timeouts for the dynamic batcher: a request may wait in the queue
// for default_timeout_microseconds; with allow_timeout_override its own `timeout` may
// shorten that wait, never lengthen it (so without a default there is no timeout at all,
// as in Triton). What happens once the wait is over is the batcher's (timeout_action).

/** When `pending` has waited too long, on the clock of its `arrivalNs`. */
export function queueDeadlineNs(policy: QueueTimeoutConfig, pending: PendingRequest): number {
  let timeoutUs = policy.defaultUs;
  const asked = pending.request.sequence?.timeoutUs;
  if (policy.allowOverride && asked !== undefined && asked !== 0 && asked < timeoutUs) timeoutUs = asked;
  return pending.arrivalNs + timeoutUs * 1000;
}
