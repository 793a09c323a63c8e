import { invalidArg } from "../../core/errors.ts";
import type { HandlerLimits } from "./handler-messages.ts";

// A handler model's own parameters (config `parameters`), with their defaults. Every
// parameter also reaches the handler's initialize(); these are the ones seqserve reads.

export interface HandlerSettings {
  /** handler_timeout_ms: how long a request may go unanswered (a decoupled one: between responses). */
  readonly timeoutMs: number;
  /** handler_call_timeout_ms: how long a context.infer call may take. */
  readonly callTimeoutMs: number;
  /** handler_initialize_timeout_ms: how long loading the handler (its initialize()) may take. */
  readonly initializeTimeoutMs: number;
  /**
   * handler_max_heap_mb: the JavaScript heap an instance's worker may grow to. Past it the
   * worker ends and is replaced, as for any crash; without a limit, a worker out of
   * memory ends the whole process.
   */
  readonly maxHeapMb: number;
  readonly limits: HandlerLimits;
}

const HANDLER_DEFAULTS = {
  handler_timeout_ms: 60_000,
  handler_call_timeout_ms: 60_000,
  handler_initialize_timeout_ms: 60_000,
  handler_max_heap_mb: 2048,
  handler_max_concurrent_calls: 64,
  handler_max_unacked_responses: 16,
  handler_max_unacked_bytes: 4 * 1024 * 1024,
  sequence_state_max_bytes: 64 * 1024 * 1024,
} as const;

function positive(
  model: string,
  parameters: Readonly<Record<string, string>>,
  name: keyof typeof HANDLER_DEFAULTS,
): number {
  const text = parameters[name];
  if (text === undefined) return HANDLER_DEFAULTS[name];
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1) {
    throw invalidArg(`parameter '${name}' of model '${model}' must be a positive integer, got '${text}'`);
  }
  return value;
}

export function handlerSettings(
  model: string,
  parameters: Readonly<Record<string, string>>,
): HandlerSettings {
  return {
    timeoutMs: positive(model, parameters, "handler_timeout_ms"),
    callTimeoutMs: positive(model, parameters, "handler_call_timeout_ms"),
    initializeTimeoutMs: positive(model, parameters, "handler_initialize_timeout_ms"),
    maxHeapMb: positive(model, parameters, "handler_max_heap_mb"),
    limits: {
      maxConcurrentCalls: positive(model, parameters, "handler_max_concurrent_calls"),
      maxUnackedResponses: positive(model, parameters, "handler_max_unacked_responses"),
      maxUnackedBytes: positive(model, parameters, "handler_max_unacked_bytes"),
      maxStateBytes: positive(model, parameters, "sequence_state_max_bytes"),
    },
  };
}
