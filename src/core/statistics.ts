// Per model-version inference statistics in the shape of Triton's ModelStatistics
// (the `/v2/models/{m}/stats` body and the gRPC ModelStatistics reply). They are the one
// source of truth: the Prometheus metrics read them at scrape time.

import { ResponseStatistics, type ResponseStats } from "./response-statistics.ts";

export interface StatDuration {
  count: number;
  ns: number;
}

export interface BatchStats {
  readonly batch_size: number;
  readonly compute_input: StatDuration;
  readonly compute_infer: StatDuration;
  readonly compute_output: StatDuration;
}

export interface InferenceStats {
  readonly success: StatDuration;
  readonly fail: StatDuration;
  readonly queue: StatDuration;
  readonly compute_input: StatDuration;
  readonly compute_infer: StatDuration;
  readonly compute_output: StatDuration;
  readonly cache_hit: StatDuration;
  readonly cache_miss: StatDuration;
}

export interface ModelStatisticsSnapshot {
  readonly name: string;
  readonly version: string;
  /** Milliseconds since the epoch of the last inference; 0 when none. */
  readonly last_inference: number;
  /** Rows inferred over all requests (padding rows excluded), as Triton counts it. */
  readonly inference_count: number;
  /** Model executions (a batch counts once). */
  readonly execution_count: number;
  readonly inference_stats: InferenceStats;
  /** Decoupled models' responses by their index in their request (response-statistics.ts). */
  readonly response_stats: Readonly<Record<string, ResponseStats>>;
  readonly batch_stats: readonly BatchStats[];
  /** Memory the model holds by device: not measured, so always empty. */
  readonly memory_usage: readonly never[];
}

/** Timings of one request's life, in nanoseconds. */
export interface RequestTimings {
  readonly queueNs: number;
  readonly computeInputNs: number;
  readonly computeInferNs: number;
  readonly computeOutputNs: number;
  readonly totalNs: number;
  /** Rows of the model execution the request ran in (0 when it needed none). */
  readonly batchSize: number;
}

const duration = (): StatDuration => ({ count: 0, ns: 0 });

function add(stat: StatDuration, ns: number): void {
  stat.count++;
  stat.ns += Math.round(ns);
}

export class ModelStatistics {
  readonly name: string;
  readonly version: string;
  #lastInference = 0;
  #inferenceCount = 0;
  #executionCount = 0;
  readonly #inference: InferenceStats = {
    success: duration(),
    fail: duration(),
    queue: duration(),
    compute_input: duration(),
    compute_infer: duration(),
    compute_output: duration(),
    cache_hit: duration(),
    cache_miss: duration(),
  };
  readonly #batches = new Map<number, BatchStats>();
  /** Filled for decoupled models only, as Triton's backends report them. */
  readonly responses = new ResponseStatistics();

  constructor(name: string, version: string) {
    this.name = name;
    this.version = version;
  }

  /**
   * A request of `rows` batch rows answered with outputs (Triton counts inferences by row).
   * One answered without a run (a numbered step retried, its kept answer sent again; an
   * END the model is not run for) is a success with its queue time, and no inference, as
   * Triton counts an answer from its response cache.
   */
  recordSuccess(timings: RequestTimings, rows: number): void {
    const s = this.#inference;
    add(s.success, timings.totalNs);
    add(s.queue, timings.queueNs);
    this.#lastInference = Date.now();
    if (timings.batchSize === 0) return;
    add(s.compute_input, timings.computeInputNs);
    add(s.compute_infer, timings.computeInferNs);
    add(s.compute_output, timings.computeOutputNs);
    this.#inferenceCount += rows;
  }

  /** A request answered with an error after it reached the model's scheduler. */
  recordFailure(totalNs: number): void {
    add(this.#inference.fail, totalNs);
  }

  /** One model execution of `batchSize` rows (padding included, as Triton counts it). */
  recordExecution(
    batchSize: number,
    computeInputNs: number,
    computeInferNs: number,
    computeOutputNs: number,
  ): void {
    this.#executionCount++;
    let batch = this.#batches.get(batchSize);
    if (batch === undefined) {
      batch = {
        batch_size: batchSize,
        compute_input: duration(),
        compute_infer: duration(),
        compute_output: duration(),
      };
      this.#batches.set(batchSize, batch);
    }
    add(batch.compute_input, computeInputNs);
    add(batch.compute_infer, computeInferNs);
    add(batch.compute_output, computeOutputNs);
  }

  snapshot(): ModelStatisticsSnapshot {
    const copy = (d: StatDuration): StatDuration => ({ count: d.count, ns: d.ns });
    const s = this.#inference;
    return {
      name: this.name,
      version: this.version,
      last_inference: this.#lastInference,
      inference_count: this.#inferenceCount,
      execution_count: this.#executionCount,
      inference_stats: {
        success: copy(s.success),
        fail: copy(s.fail),
        queue: copy(s.queue),
        compute_input: copy(s.compute_input),
        compute_infer: copy(s.compute_infer),
        compute_output: copy(s.compute_output),
        cache_hit: copy(s.cache_hit),
        cache_miss: copy(s.cache_miss),
      },
      response_stats: this.responses.snapshot(),
      batch_stats: [...this.#batches.values()]
        .sort((a, b) => a.batch_size - b.batch_size)
        .map((b) => ({
          batch_size: b.batch_size,
          compute_input: copy(b.compute_input),
          compute_infer: copy(b.compute_infer),
          compute_output: copy(b.compute_output),
        })),
      memory_usage: [],
    };
  }
}

/**
 * What a model version's Prometheus counters add up to. A version loaded again in its
 * place starts its statistics anew, as Triton's statistics API does, while its counters
 * go on from these, as Triton's metric reporter does (found again by model and version).
 */
export interface CounterTotals {
  readonly success: number;
  readonly successNs: number;
  readonly inferences: number;
  readonly executions: number;
  readonly queueNs: number;
  readonly computeInputNs: number;
  readonly computeInferNs: number;
  readonly computeOutputNs: number;
  /** Executions by batch size. */
  readonly batches: ReadonlyMap<number, number>;
}

/** `snapshot`'s counters, plus those `carried` from the loads it replaced. */
export function counterTotals(snapshot: ModelStatisticsSnapshot, carried?: CounterTotals): CounterTotals {
  const stats = snapshot.inference_stats;
  const batches = new Map(carried?.batches);
  for (const b of snapshot.batch_stats)
    batches.set(b.batch_size, (batches.get(b.batch_size) ?? 0) + b.compute_infer.count);
  return {
    success: (carried?.success ?? 0) + stats.success.count,
    successNs: (carried?.successNs ?? 0) + stats.success.ns,
    inferences: (carried?.inferences ?? 0) + snapshot.inference_count,
    executions: (carried?.executions ?? 0) + snapshot.execution_count,
    queueNs: (carried?.queueNs ?? 0) + stats.queue.ns,
    computeInputNs: (carried?.computeInputNs ?? 0) + stats.compute_input.ns,
    computeInferNs: (carried?.computeInferNs ?? 0) + stats.compute_infer.ns,
    computeOutputNs: (carried?.computeOutputNs ?? 0) + stats.compute_output.ns,
    batches,
  };
}
