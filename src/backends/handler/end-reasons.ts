import type { SequenceEndReason as CoreEndReason } from "../../core/model.ts";
import type { SequenceEndReason } from "../../handler-api.ts";

// Why a sequence ended, as a handler is told. The core's reasons map one to one, except:
// - `backlog_timeout` (the sequence waited too long for a slot) is `timeout`; a handler
//   never sees it in practice, since such a sequence never ran;
// - `reloaded` (a model reload whose state the sequence did not fit) is `unloaded`: the
//   version that ran it is gone;
// - `instance_failed` is told to nobody: the instance that ran the sequence died with
//   whatever it knew of it; `state_lost` neither (the shared state store lost it).
// Keyed by string so that reasons the core adds later fail loudly in review, not in type
// errors of unrelated branches: an unknown reason is not told.

const HANDLER_REASONS: Readonly<Record<string, SequenceEndReason | undefined>> = {
  end: "end",
  timeout: "timeout",
  backlog_timeout: "timeout",
  restart: "restart",
  cancelled: "cancelled",
  forced: "forced",
  expired: "expired",
  evicted: "evicted",
  unloaded: "unloaded",
  reloaded: "unloaded",
  shutdown: "shutdown",
  instance_failed: undefined,
  // The shared state store lost it: the instance that ran it may not even be this one.
  state_lost: undefined,
};

export function handlerEndReason(reason: CoreEndReason): SequenceEndReason | undefined {
  return HANDLER_REASONS[reason];
}
