import { ServerError } from "../../../src/core/errors.ts";
import type { ExecutionResult, ModelExecutor } from "../../../src/core/executor.ts";
import type { InferRequest, Parameters } from "../../../src/core/infer.ts";
import type { DynamicBatchingConfig, ModelConfig } from "../../../src/core/model-config.ts";
import { validateRequest } from "../../../src/core/request-validation.ts";
import { DynamicBatcher } from "../../../src/core/scheduler/dynamic-batcher.ts";
import { PendingRequest } from "../../../src/core/scheduler/pending-request.ts";
import { readSequenceControl } from "../../../src/core/sequence/sequence-parameters.ts";
import { ModelStatistics } from "../../../src/core/statistics.ts";
import type { Tensor } from "../../../src/core/tensor.ts";
import { int32ModelConfig } from "./int32-model-config.ts";

// A stateless model for the stateless schedulers' tests: OUTPUT = INPUT + 1 per row, one
// instance that records the batches it ran (their first values too) and can be held.

export class PlusOne implements ModelExecutor {
  readonly name = "plus_0";
  /** Rows per batch, in the order the batches ran. */
  readonly batches: number[] = [];
  /** The first input value of each batch, in the order the batches ran. */
  readonly firstValues: number[] = [];
  /** What the instance says each run waited with it behind earlier ones. */
  waitNs = 0;
  #gate: Promise<void> | undefined;
  #open: (() => void) | undefined;

  hold(): void {
    this.#gate = new Promise((resolve) => (this.#open = resolve));
  }

  release(): void {
    this.#open?.();
    this.#gate = undefined;
  }

  async run(inputs: ReadonlyMap<string, Tensor>): Promise<ExecutionResult> {
    const input = inputs.get("INPUT")!;
    this.batches.push(input.shape[0]!);
    this.firstValues.push((input.data as Int32Array)[0]!);
    if (this.#gate !== undefined) await this.#gate;
    const data = Int32Array.from(input.data as Int32Array, (v) => v + 1);
    return {
      outputs: new Map([["OUTPUT", { datatype: "INT32", shape: [...input.shape], data }]]),
      timings: { inputNs: 0, inferNs: 0, outputNs: 0, waitNs: this.waitNs },
    };
  }

  async close(): Promise<void> {}
}

export function plusOneConfig(dynamicBatching: DynamicBatchingConfig | undefined): ModelConfig {
  return {
    ...int32ModelConfig("plus", 4),
    ...(dynamicBatching === undefined ? {} : { dynamicBatching }),
  };
}

/** Dynamic batching as Triton's defaults give it: no delay, no preferred size, no limit. */
export const PLAIN_DYNAMIC_BATCHING: DynamicBatchingConfig = {
  preferredBatchSizes: [],
  maxQueueDelayUs: 0,
  preserveOrdering: false,
  priorityLevels: 0,
  defaultPriorityLevel: 0,
  defaultQueuePolicy: { maxQueueSize: 0 },
  priorityQueuePolicies: new Map(),
};

/** The model behind a DynamicBatcher; `answer` enqueues a one-row request as a frontend does. */
export function plusOneBatcher(dynamicBatching: DynamicBatchingConfig | undefined) {
  const executor = new PlusOne();
  const model = plusOneConfig(dynamicBatching);
  const batcher = new DynamicBatcher({
    config: model,
    executors: [executor],
    statistics: new ModelStatistics("plus", "1"),
  });
  const answer = (value: number, parameters: Parameters = {}) => {
    const request: InferRequest = {
      id: String(value),
      inputs: new Map([["INPUT", { datatype: "INT32", shape: [1, 1], data: Int32Array.of(value) }]]),
      outputs: undefined,
      parameters,
      sequence: readSequenceControl(parameters),
    };
    const pending = new PendingRequest(request, validateRequest(model, request));
    batcher.enqueue(pending);
    return pending.promise;
  };
  const send = (value: number, parameters: Parameters = {}): Promise<number> =>
    answer(value, parameters).then((r) => (r.outputs.get("OUTPUT")!.data as Int32Array)[0]!);
  return { executor, batcher, send, answer };
}

/** A request's answer, or its refusal as "CODE: message" (a ServerError is expected). */
export async function outcome(answer: Promise<number>): Promise<number | string> {
  try {
    return await answer;
  } catch (error) {
    if (!(error instanceof ServerError)) throw error;
    return `${error.code}: ${error.message}`;
  }
}
