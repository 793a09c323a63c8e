import { asServerError } from "./errors.ts";
import type { ModelExecutor } from "./executor.ts";
import type { InferRequest, InferResponse, NamedTensor, SequenceId } from "./infer.ts";
import type { SequenceAdmin, ServedModel, TensorMetadata } from "./model.ts";
import type { ModelConfig } from "./model-config.ts";
import { validateRequest } from "./request-validation.ts";
import type { BatchObserver } from "./scheduler/batch-observer.ts";
import { DynamicBatcher } from "./scheduler/dynamic-batcher.ts";
import { nowNs, PendingRequest, type RequestResult } from "./scheduler/pending-request.ts";
import type { RequestObserver } from "./scheduler/request-observer.ts";
import type { Scheduler } from "./scheduler/scheduler.ts";
import { SequenceBatcher } from "./sequence/sequence-batcher.ts";
import type { StateStore } from "./sequence/state-store.ts";
import { ModelStatistics, type ModelStatisticsSnapshot } from "./statistics.ts";

// A loaded model version: its frozen config, its instances, and the scheduler the config
// asks for. This is what the frontends call `infer` on.

export interface LoadedModelOptions {
  readonly config: ModelConfig;
  readonly version: string;
  readonly executors: readonly ModelExecutor[];
  readonly store?: StateStore;
  readonly warn?: (message: string) => void;
  /** Told about every batch of a sequence model (the model runner's log). */
  readonly observer?: BatchObserver;
  /** Told about every request when it is answered (latency metrics, tracing). */
  readonly requestObserver?: RequestObserver | undefined;
}

/** The request's sequence id, or the one the server assigned to its START. */
function sequenceIdOf(request: InferRequest, pending: PendingRequest | undefined): SequenceId | undefined {
  const assigned = pending?.responseParameters.sequence_id;
  if (typeof assigned === "bigint" || typeof assigned === "string") return assigned;
  return request.sequence?.id;
}

function tensorMetadata(config: ModelConfig): { inputs: TensorMetadata[]; outputs: TensorMetadata[] } {
  const batching = config.maxBatchSize > 0;
  return {
    inputs: config.inputs.map((i) => ({
      name: i.name,
      datatype: i.datatype,
      shape: batching && !i.shared ? [-1, ...i.dims] : [...i.dims],
    })),
    outputs: config.outputs.map((o) => ({
      name: o.name,
      datatype: o.datatype,
      shape: batching ? [-1, ...o.dims] : [...o.dims],
    })),
  };
}

export class LoadedModel implements ServedModel {
  readonly name: string;
  readonly version: string;
  readonly config: ModelConfig;
  readonly inputs: readonly TensorMetadata[];
  readonly outputs: readonly TensorMetadata[];
  readonly sequences: SequenceAdmin | undefined;
  readonly #executors: readonly ModelExecutor[];
  readonly #scheduler: Scheduler;
  readonly #statistics: ModelStatistics;
  readonly #requestObserver: RequestObserver | undefined;

  constructor(options: LoadedModelOptions) {
    const { config } = options;
    this.name = config.name;
    this.version = options.version;
    this.config = config;
    const metadata = tensorMetadata(config);
    this.inputs = metadata.inputs;
    this.outputs = metadata.outputs;
    this.#executors = options.executors;
    this.#statistics = new ModelStatistics(config.name, options.version);
    this.#requestObserver = options.requestObserver;
    if (config.sequenceBatching !== undefined) {
      const batcher = new SequenceBatcher({
        config,
        executors: options.executors,
        statistics: this.#statistics,
        ...(options.store === undefined ? {} : { store: options.store }),
        ...(options.warn === undefined ? {} : { warn: options.warn }),
        ...(options.observer === undefined ? {} : { observer: options.observer }),
      });
      this.#scheduler = batcher;
      this.sequences = batcher;
    } else {
      this.#scheduler = new DynamicBatcher({
        config,
        executors: options.executors,
        statistics: this.#statistics,
      });
      this.sequences = undefined;
    }
  }

  async infer(request: InferRequest): Promise<InferResponse> {
    const startNs = nowNs();
    let pending: PendingRequest | undefined;
    let result: RequestResult;
    try {
      pending = new PendingRequest(request, validateRequest(this.config, request));
      this.#scheduler.enqueue(pending);
      result = await pending.promise;
    } catch (error) {
      const failure = asServerError(error);
      const totalNs = nowNs() - startNs;
      this.#statistics.recordFailure(totalNs);
      this.#requestObserver?.requestDone({
        request,
        arrivalNs: startNs,
        totalNs,
        sequenceId: sequenceIdOf(request, pending),
        error: failure,
      });
      throw failure;
    }
    this.#statistics.recordSuccess(result.timings, pending.validated.rows);
    this.#requestObserver?.requestDone({
      request,
      arrivalNs: pending.arrivalNs,
      totalNs: result.timings.totalNs,
      sequenceId: sequenceIdOf(request, pending),
      timings: result.timings,
      outputs: result.outputs,
    });
    const outputs: NamedTensor[] = [];
    for (const name of pending.validated.outputNames) {
      const tensor = result.outputs.get(name);
      if (tensor !== undefined) outputs.push({ name, ...tensor });
    }
    return {
      modelName: this.name,
      modelVersion: this.version,
      id: request.id,
      parameters: { ...result.parameters, ...pending.responseParameters },
      outputs,
    };
  }

  statistics(): ModelStatisticsSnapshot {
    return this.#statistics.snapshot();
  }

  /** Requests accepted and not yet answered. */
  get pending(): number {
    return this.#scheduler.pending;
  }

  /** Refuses new sequences from now on; accepted work and live sequences go on. */
  beginShutdown(): void {
    this.#scheduler.beginShutdown();
  }

  /** Lets accepted work and live sequences finish until `deadlineMs`, then ends what is left. */
  drain(deadlineMs: number): Promise<void> {
    this.#scheduler.beginShutdown();
    return this.#scheduler.drain(deadlineMs);
  }

  /** Frees the instances (after drain). */
  async close(): Promise<void> {
    await Promise.all(this.#executors.map((e) => e.close()));
  }

  async unload(deadlineMs: number): Promise<void> {
    await this.drain(deadlineMs);
    await this.close();
  }
}
