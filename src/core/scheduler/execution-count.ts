import type { ExecutorTimings } from "../executor.ts";
import type { ModelStatistics } from "../statistics.ts";

/**
 * A batch run on model code that takes requests, counted as Triton counts an execution:
 * once, by its rows, when some request of it succeeded. The run's timings come when the
 * instance can take another batch; a decoupled request succeeds with its last response,
 * which may be later, so the count waits for both.
 */
export class ExecutionCount {
  readonly #statistics: ModelStatistics;
  readonly #rows: number;
  #succeeded = false;
  #timings: ExecutorTimings | undefined;
  #counted = false;

  constructor(statistics: ModelStatistics, rows: number) {
    this.#statistics = statistics;
    this.#rows = rows;
  }

  /** A request of the batch is complete. */
  settled(ok: boolean): void {
    if (!ok) return;
    this.#succeeded = true;
    this.#count();
  }

  /** The instance is done with the batch, and took this long. */
  ran(timings: ExecutorTimings): void {
    this.#timings = timings;
    this.#count();
  }

  #count(): void {
    const timings = this.#timings;
    if (this.#counted || !this.#succeeded || timings === undefined) return;
    this.#counted = true;
    this.#statistics.recordExecution(this.#rows, timings.inputNs, timings.inferNs, timings.outputNs);
  }
}
