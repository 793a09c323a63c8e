// The clock of one run of a handler's execute() over a batch, and the compute times that
// the batch and each of its requests report. Triton's backends give a batch's four
// timestamps to TRITONBACKEND_ModelInstanceReportBatchStatistics and to each request's
// TRITONBACKEND_ModelInstanceReportStatistics alike; its Python backend, whose requests
// may complete apart (decoupled ones, after execute() returned), reports every request of
// the batch with the batch's timestamps all the same (PbMetricReporter), its responses
// sent after execute() returned left out. So here, for the batch and each of its requests:
//   compute_input:  from the batch's arrival in the worker until execute() is called
//                   (building its requests);
//   compute_infer:  while execute() runs;
//   compute_output: from execute()'s return until the answers it returned are ready to go.
// A batch of one reports the same times per request as per batch. A request its code
// completes after that (a decoupled one, later) reports the batch's times too. One its
// code completes while execute() still runs (a decoupled request's final send() or
// complete() within it) is answered at once rather than held until execute() returns: it
// reports the run until then as its compute_infer, and no compute_output.

import type { ExecutorTimings } from "../../core/executor.ts";

export class BatchClock {
  readonly #startMs: number;
  #builtMs: number;
  /** When execute() returned (or every request of the batch was done without it). */
  #returnedMs: number | undefined;
  #answeredMs: number | undefined;
  /** Answers finished while those execute() returned are made ready: posted once all are. */
  #held: (() => void)[] | undefined;

  /** `startMs`: when the batch reached the worker. */
  constructor(startMs: number) {
    this.#startMs = startMs;
    this.#builtMs = startMs;
  }

  /** Its requests are built: execute() is called now. */
  built(): void {
    this.#builtMs = performance.now();
  }

  /** execute() returned: the answers it returned are made ready from now on. */
  returned(): void {
    this.#returnedMs = performance.now();
    this.#held = [];
  }

  /** The answers execute() returned are ready: those held go, with the batch's times. */
  answered(): void {
    this.#answeredMs = performance.now();
    const held = this.#held ?? [];
    this.#held = undefined;
    for (const post of held) post();
  }

  /**
   * Runs `post` (a request's answer going to the main thread) now, or, while the answers
   * execute() returned are made ready, once they all are: then the batch's compute_output
   * is known, and the request reports it.
   */
  post(post: () => void): void {
    if (this.#held === undefined) post();
    else this.#held.push(post);
  }

  /** The compute times to report now (see the top of this file). */
  timings(): ExecutorTimings {
    const inputNs = (this.#builtMs - this.#startMs) * 1e6;
    const now = performance.now();
    if (this.#returnedMs === undefined) return { inputNs, inferNs: (now - this.#builtMs) * 1e6, outputNs: 0 };
    return {
      inputNs,
      inferNs: (this.#returnedMs - this.#builtMs) * 1e6,
      outputNs: ((this.#answeredMs ?? now) - this.#returnedMs) * 1e6,
    };
  }
}
