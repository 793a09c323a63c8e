import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ExecutionResult, ModelExecutor } from "../../src/core/executor.ts";
import type { InferRequest } from "../../src/core/infer.ts";
import type { ModelConfig } from "../../src/core/model-config.ts";
import { validateRequest } from "../../src/core/request-validation.ts";
import { DynamicBatcher, MAX_REQUESTS_IN_FLIGHT } from "../../src/core/scheduler/dynamic-batcher.ts";
import { PendingRequest } from "../../src/core/scheduler/pending-request.ts";
import { ModelStatistics } from "../../src/core/statistics.ts";
import type { Tensor } from "../../src/core/tensor.ts";
import { turn } from "./support/batcher-harness.ts";

// The stateless schedulers keep an instance fed: while it runs one batch, the next is
// already with it, so its worker starts the next run without waiting for the main thread.
// Without dynamic batching up to MAX_REQUESTS_IN_FLIGHT requests queue with the instance;
// with it only a full batch queues behind a running one (a short one waits for the running
// batch to end, and grows meanwhile).
// Answers stay each request's own.

/** OUTPUT = INPUT + 1 per row; records its batches; can be held. */
class PlusOne implements ModelExecutor {
  readonly name = "plus_0";
  readonly batches: number[] = [];
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
    if (this.#gate !== undefined) await this.#gate;
    const data = Int32Array.from(input.data as Int32Array, (v) => v + 1);
    return {
      outputs: new Map([["OUTPUT", { datatype: "INT32", shape: [...input.shape], data }]]),
      timings: { inputNs: 0, inferNs: 0, outputNs: 0, waitNs: this.waitNs },
    };
  }

  async close(): Promise<void> {}
}

function config(dynamic: boolean): ModelConfig {
  return {
    name: "plus",
    platform: "onnxruntime_onnx",
    backend: "onnxruntime",
    versionPolicy: { kind: "latest", numVersions: 1 },
    maxBatchSize: 4,
    inputs: [
      {
        name: "INPUT",
        datatype: "INT32",
        dims: [1],
        optional: false,
        allowRaggedBatch: false,
        shared: false,
      },
    ],
    outputs: [{ name: "OUTPUT", datatype: "INT32", dims: [1] }],
    instanceGroups: [{ name: "plus", count: 1, kind: "KIND_CPU" }],
    defaultModelFilename: "model.onnx",
    ...(dynamic
      ? {
          dynamicBatching: {
            preferredBatchSizes: [],
            maxQueueDelayUs: 0,
            preserveOrdering: false,
            maxQueueSize: 0,
          },
        }
      : {}),
    parameters: {},
  };
}

function harness(dynamic: boolean) {
  const executor = new PlusOne();
  const model = config(dynamic);
  const batcher = new DynamicBatcher({
    config: model,
    executors: [executor],
    statistics: new ModelStatistics("plus", "1"),
  });
  const answer = (value: number) => {
    const request: InferRequest = {
      id: "",
      inputs: new Map([["INPUT", { datatype: "INT32", shape: [1, 1], data: Int32Array.of(value) }]]),
      outputs: undefined,
      parameters: {},
      sequence: undefined,
    };
    const pending = new PendingRequest(request, validateRequest(model, request));
    batcher.enqueue(pending);
    return pending.promise;
  };
  const send = (value: number): Promise<number> =>
    answer(value).then((r) => (r.outputs.get("OUTPUT")!.data as Int32Array)[0]!);
  return { executor, send, answer };
}

describe("stateless scheduling: the next batch waits in the instance", () => {
  it("the time a run waited with the instance counts as the request's queue time", async () => {
    const { executor, answer } = harness(false);
    executor.waitNs = 7_000_000;
    const { timings } = await answer(1);
    assert.ok(timings.queueNs >= 7_000_000, `queue ${timings.queueNs} ns`);
  });

  it("without dynamic batching, requests go to the instance while the first runs, up to the limit; the rest wait", async () => {
    const { executor, send } = harness(false);
    executor.hold();
    const count = MAX_REQUESTS_IN_FLIGHT + 3;
    const answers = Array.from({ length: count }, (_, i) => send(10 * i));
    await turn();
    assert.equal(executor.batches.length, MAX_REQUESTS_IN_FLIGHT, "the instance holds the limit, not more");
    executor.release();
    assert.deepEqual(
      await Promise.all(answers),
      answers.map((_, i) => 10 * i + 1),
    );
    assert.deepEqual(executor.batches, Array(count).fill(1));
  });

  it("with dynamic batching, only a full batch goes behind a running one; a short one grows meanwhile", async () => {
    const { executor, send } = harness(true);
    executor.hold();
    const first = send(1);
    await turn();
    const later = [send(2), send(3)];
    await turn();
    assert.deepEqual(executor.batches, [1], "two requests are not a full batch of 4: they wait");
    later.push(send(4), send(5));
    await turn();
    assert.deepEqual(executor.batches, [1, 4], "four are: they go while the first still runs");
    const last = send(6);
    executor.release();
    assert.deepEqual(await Promise.all([first, ...later, last]), [2, 3, 4, 5, 6, 7]);
    assert.deepEqual(executor.batches, [1, 4, 1]);
  });
});
