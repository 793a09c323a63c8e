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
