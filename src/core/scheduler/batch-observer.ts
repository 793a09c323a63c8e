import type { SequenceId } from "../infer.ts";

// What a scheduler tells whoever watches a model's batches (the model runner's log).
// Kept to plain numbers, so watching costs the scheduler nothing it would not compute anyway.

export interface BatchEvent {
  /** Instance name, e.g. "accumulate_fp32_0". */
  readonly instance: string;
  /** Requests in the batch. */
  readonly rows: number;
  /** Rows the model ran, padding included. */
  readonly executedRows: number;
  /** Sequences that started (their state was reset) in this batch. */
  readonly resets: readonly SequenceId[];
  /** Time the batch's requests waited before it ran, summed over them. */
  readonly queueNs: number;
  /** From assembling the batch to splitting its outputs. */
  readonly computeNs: number;
}

export interface BatchObserver {
  batchRan(event: BatchEvent): void;
}
