import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { InferRequest, SequenceControl } from "../../src/core/infer.ts";
import { validateRequest } from "../../src/core/request-validation.ts";
import { PendingRequest } from "../../src/core/scheduler/pending-request.ts";
import { SequenceBatcher } from "../../src/core/sequence/sequence-batcher.ts";
import { MemoryStateStore } from "../../src/core/sequence/state-store.ts";
import { ModelStatistics } from "../../src/core/statistics.ts";
import { AccumulatorExecutor, accumulatorConfig } from "./support/accumulator-executor.ts";

// What a failed step does to sequences: a sequence the client can address keeps its
// previous state and goes on; a sequence whose server-assigned id never reached the client
// (its START failed) is ended at once instead of holding a slot until the idle timeout.

function setup() {
  const config = accumulatorConfig();
  const executor = new AccumulatorExecutor();
  const store = new MemoryStateStore();
  const batcher = new SequenceBatcher({
    config,
    executors: [executor],
    statistics: new ModelStatistics(config.name, "1"),
    store,
  });
  const send = (value: number, sequence: Partial<SequenceControl>) => {
    const request: InferRequest = {
      id: "",
      inputs: new Map([["INPUT", { datatype: "INT32", shape: [1, 1], data: Int32Array.of(value) }]]),
      outputs: undefined,
      parameters: {},
      sequence: { id: undefined, start: false, end: false, timeoutUs: undefined, ...sequence },
    };
    const pending = new PendingRequest(request, validateRequest(config, request));
    batcher.enqueue(pending);
    return pending;
  };
  const output = async (pending: PendingRequest) =>
    ((await pending.promise).outputs.get("OUTPUT")!.data as Int32Array)[0];
  return { batcher, executor, store, send, output };
}

describe("sequence batcher: failed steps", () => {
  it("ends a sequence whose START with a server-assigned id failed, and frees its slot and state", async () => {
    const { batcher, executor, store, send } = setup();
    executor.failNext();
    const start = send(1, { start: true });
    await assert.rejects(start.promise, /failed on purpose/);
    // Let the rejection handler run.
    await new Promise((resolve) => setImmediate(resolve));
    const summary = batcher.summary();
    assert.equal(summary.live, 0);
    assert.equal(summary.ended.forced, 1);
    assert.deepEqual(batcher.list(), []);
    assert.equal(store.size, 0);
  });

  it("keeps a client-named sequence and its previous state after a failed step", async () => {
    const { batcher, executor, send, output } = setup();
    assert.equal(await output(send(5, { id: 7n, start: true })), 5);
    executor.failNext();
    await assert.rejects(send(100, { id: 7n }).promise, /failed on purpose/);
    assert.equal(await output(send(2, { id: 7n, end: true })), 7);
    assert.equal(batcher.summary().ended.end, 1);
    assert.equal(batcher.summary().ended.forced, 0);
  });
});
