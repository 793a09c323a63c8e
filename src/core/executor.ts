import type { ServerError } from "./errors.ts";
import type { InferRequest, Parameters, SequenceId } from "./infer.ts";
import type { SequenceEndReason } from "./model.ts";
import type { BudgetedStep } from "./sequence/state-budget.ts";
import type { SequenceState } from "./sequence/state-store.ts";
import type { Tensor } from "./tensor.ts";

// What a scheduler runs batches on: one model instance (for ONNX models, one
// onnxruntime session in its own worker thread). Backends implement it; the core
// never knows which backend it talks to.

export interface ExecutorTimings {
  /** Time spent by the instance feeding inputs (copies into the runtime), ns. */
  readonly inputNs: number;
  /** Time spent in the model itself, ns. */
  readonly inferNs: number;
  /** Time spent by the instance collecting outputs, ns. */
  readonly outputNs: number;
  /**
   * Time the batch waited with the instance before its run began, behind the runs handed
   * to it earlier, ns: queue time, as much as the wait in the scheduler's queue.
   */
  readonly waitNs?: number;
}

export interface ExecutionResult {
  readonly outputs: Map<string, Tensor>;
  readonly timings: ExecutorTimings;
}

export interface ModelExecutor {
  /** e.g. "silero_vad_0" (Triton's instance naming). */
  readonly name: string;
  /**
   * Runs one batch. Ownership of the input tensors' buffers passes to the executor:
   * they may be transferred to another thread and detached, so callers must pass
   * buffers they own and not touch them afterwards. Output tensors belong to the caller.
   */
  run(inputs: ReadonlyMap<string, Tensor>, outputNames: readonly string[]): Promise<ExecutionResult>;
  close(): Promise<void>;
}

// ── Request-level execution ─────────────────────────────────────────────────────────
// Model code (a TypeScript handler) takes a batch of *requests*, each with its own inputs,
// parameters, sequence and state, rather than tensors concatenated into one batch; it
// answers each request on its own, possibly with several responses (decoupled models),
// and keeps per-sequence values. Schedulers hand such an executor requests instead of
// tensors; everything else (admission, batching, slots, ends) stays the core's.

/** The sequence a request belongs to, as model code sees it. */
export interface ExecutionSequence {
  readonly id: SequenceId;
  /** Unique to this life of the sequence (a restarted id gets a new key). */
  readonly key: string;
  /** The first step of this life: the state is fresh. */
  readonly start: boolean;
  readonly end: boolean;
  /**
   * What the sequence keeps, lent to the executor for the step (undefined on the first
   * step): its buffers may be transferred away; the outcome brings the state back.
   */
  readonly state: SequenceState | undefined;
  /**
   * The server's --max-state-bytes, for a step that may grow the state (not an END):
   * `roomBytes` is the most the state may hold after the step (what it holds now and
   * what the budget has left). A step past it fails, with the reason "state_budget", and
   * gives the state back as it was. Undefined: no bound but the model's own.
   */
  readonly stateBudget?: {
    readonly roomBytes: number;
    readonly maxBytes: number;
    /** The step as a refusal names it. */
    readonly step: BudgetedStep;
  };
}

/** Where a decoupled model's responses go as they are produced (see response-stream.ts). */
export interface ResponseSink {
  /** One response of the request; `bytes` is what it occupies (for flow control). */
  push(response: PartialResponse, bytes: number): void;
  /** `listener(bytes)` runs as the consumer takes each response off the sink. */
  onConsumed(listener: (bytes: number) => void): void;
}

export interface PartialResponse {
  readonly outputs: ReadonlyMap<string, Tensor>;
  readonly parameters: Parameters;
  /** The model marked this response as the request's last. */
  readonly final: boolean;
}

export interface ExecutionRequest {
  readonly request: InferRequest;
  /** The inputs as validated against the model's config. */
  readonly inputs: ReadonlyMap<string, Tensor>;
  readonly outputNames: readonly string[];
  readonly sequence: ExecutionSequence | undefined;
  /** Present for decoupled models: responses go here, and the outcome only says the request is complete. */
  readonly responses: ResponseSink | undefined;
}

interface OutcomeCommon {
  /** The sequence's state after the step (undefined: it has none, or it was lost). */
  readonly state: SequenceState | undefined;
  readonly timings: ExecutorTimings;
}

export type ExecutionOutcome =
  | (OutcomeCommon & {
      readonly ok: true;
      /** The response (empty for a decoupled request: its responses went to its sink). */
      readonly outputs: ReadonlyMap<string, Tensor>;
      readonly parameters: Parameters;
    })
  | (OutcomeCommon & { readonly ok: false; readonly error: ServerError });

/** A sequence whose life ended, as its instance is told (after its last step). */
export interface EndedSequence {
  readonly id: SequenceId;
  readonly key: string;
  readonly reason: SequenceEndReason;
  /** Its state, handed over with the notice: the core frees its own copy right after. */
  readonly state: SequenceState | undefined;
}

export interface RequestExecutor extends ModelExecutor {
  /**
   * Runs `requests` as one batch. Resolves, with the batch's timings, when the instance
   * can take another batch (a failure to run it at all settles its requests instead);
   * `settle(i, outcome)` is called exactly once per request, when it is complete (for a
   * decoupled request that may be after the promise resolved).
   */
  execute(
    requests: readonly ExecutionRequest[],
    settle: (index: number, outcome: ExecutionOutcome) => void,
  ): Promise<ExecutorTimings>;
  /** A sequence this instance has run ended, and why; its state comes along. */
  sequenceEnded(ended: EndedSequence): void;
  /**
   * `listener(why)` runs when the instance was replaced (its thread died and a new one
   * started): whatever it held for its sequences is gone, so they must end.
   */
  onReplaced(listener: (why: string) => void): void;
}

export function isRequestExecutor(executor: ModelExecutor): executor is RequestExecutor {
  return typeof (executor as Partial<RequestExecutor>).execute === "function";
}
