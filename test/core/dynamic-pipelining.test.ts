import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ExecutionOutcome, ExecutionRequest, RequestExecutor } from "../../src/core/executor.ts";
import { validateRequest } from "../../src/core/request-validation.ts";
import { DynamicBatcher, MAX_REQUESTS_IN_FLIGHT } from "../../src/core/scheduler/dynamic-batcher.ts";
import { PendingRequest } from "../../src/core/scheduler/pending-request.ts";
import { ModelStatistics } from "../../src/core/statistics.ts";
import { turn } from "./support/batcher-harness.ts";
import { PLAIN_DYNAMIC_BATCHING, plusOneBatcher, plusOneConfig } from "./support/plus-one-model.ts";

// The stateless schedulers keep an instance fed: while it runs one batch, the next is
// already with it, so its worker starts the next run without waiting for the main thread.
// Without dynamic batching up to MAX_REQUESTS_IN_FLIGHT requests queue with the instance;
// with it only a full batch queues behind a running one (a short one waits for the running
// batch to end, and grows meanwhile).
// Answers stay each request's own.

const harness = (dynamic: boolean) => plusOneBatcher(dynamic ? PLAIN_DYNAMIC_BATCHING : undefined);

describe("stateless scheduling: the next batch waits in the instance", () => {
  it("the time a run waited with the instance counts as the request's queue time", async () => {
    const { executor, answer } = harness(false);
    executor.waitNs = 7_000_000;
    const { timings } = await answer(1);
    assert.ok(timings.queueNs >= 7_000_000, `queue ${timings.queueNs} ns`);
  });

  it("without dynamic batching, requests go to the instance while the first runs, up to the limit; the rest wait", async () => {
    const { executor, batcher, send } = harness(false);
    executor.hold();
    const count = MAX_REQUESTS_IN_FLIGHT + 3;
    const answers = Array.from({ length: count }, (_, i) => send(10 * i));
    await turn();
    assert.equal(executor.batches.length, MAX_REQUESTS_IN_FLIGHT, "the instance holds the limit, not more");
    assert.deepEqual(
      [batcher.pending, batcher.running],
      [count, MAX_REQUESTS_IN_FLIGHT],
      "accepted, and of those with the instance",
    );
    executor.release();
    assert.deepEqual(
      await Promise.all(answers),
      answers.map((_, i) => 10 * i + 1),
    );
    assert.deepEqual(executor.batches, Array(count).fill(1));
    assert.deepEqual([batcher.pending, batcher.running], [0, 0]);
  });

  it("model code that answers after its instance took the next batch (decoupled): its requests count as running until answered", async () => {
    const answers: (() => void)[] = [];
    const done: ExecutionOutcome = {
      ok: true,
      outputs: new Map(),
      parameters: {},
      state: undefined,
      timings: { inputNs: 0, inferNs: 0, outputNs: 0 },
    };
    const executor: RequestExecutor = {
      name: "later_0",
      run: () => Promise.reject(new Error("takes requests")),
      close: async () => {},
      sequenceEnded() {},
      onReplaced() {},
      // The instance is free again at once; each request is answered when the test says.
      async execute(requests: readonly ExecutionRequest[], settle) {
        for (let i = 0; i < requests.length; i++) answers.push(() => settle(i, done));
        return { inputNs: 0, inferNs: 0, outputNs: 0 };
      },
    };
    const config = plusOneConfig(undefined);
    const batcher = new DynamicBatcher({
      config,
      executors: [executor],
      statistics: new ModelStatistics("plus", "1"),
    });
    const requests = [1, 2].map((value) => {
      const request = {
        id: String(value),
        inputs: new Map([
          ["INPUT", { datatype: "INT32" as const, shape: [1, 1], data: Int32Array.of(value) }],
        ]),
        outputs: undefined,
        parameters: {},
        sequence: undefined,
      };
      const pending = new PendingRequest(request, validateRequest(config, request));
      batcher.enqueue(pending);
      return pending.promise;
    });
    await turn();
    await turn();
    assert.equal(answers.length, 2, "both went to the instance");
    assert.deepEqual([batcher.pending, batcher.running], [2, 2]);
    answers[0]!();
    await requests[0];
    assert.deepEqual([batcher.pending, batcher.running], [1, 1]);
    answers[1]!();
    await requests[1];
    assert.deepEqual([batcher.pending, batcher.running], [0, 0]);
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
