import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ModelConfig } from "../../src/core/model-config.ts";
import type { Tensor } from "../../src/core/tensor.ts";
import { oldestAccumulatorConfig } from "./support/accumulator-executor.ts";
import { batcherHarness, turn } from "./support/batcher-harness.ts";

/** Oldest with 8 slots and batches of up to `rows`, leaving at once (no queue delay). */
const oldest = (rows: number) => oldestAccumulatorConfig({ candidates: 8, maxBatchSize: rows });

// The Oldest strategy keeps the executor fed: while one batch runs, a second *full* batch
// of other sequences goes to the executor at once; a short one waits for the running
// batch to end (and then grows), and a sequence is never in two batches at a time.

describe("Oldest: a second batch in flight", () => {
  it("passes over a sequence of another batch key and loses none of those behind it", {
    timeout: 10_000,
  }, async () => {
    // BIAS is optional: a request that sends it cannot share a batch with those that do not.
    const base = oldest(2);
    const config: ModelConfig = {
      ...base,
      inputs: [
        ...base.inputs,
        {
          name: "BIAS",
          datatype: "INT32",
          dims: [1],
          optional: true,
          allowRaggedBatch: false,
          shared: false,
        },
      ],
    };
    const bias: Record<string, Tensor> = {
      BIAS: { datatype: "INT32", shape: [1, 1], data: Int32Array.of(0) },
    };
    const { executor, send, output } = batcherHarness(config);
    executor.hold();
    const first = [send(1, { id: 1n, start: true }), send(2, { id: 2n, start: true })];
    await turn();
    // Ready behind the running batch, oldest first: 3, then 4 (passed over), then 5 and 6.
    // The full batch [3, 5] goes; 4 is put back ahead of 6, and 6 must stay ready.
    const later = [
      send(3, { id: 3n, start: true }),
      send(4, { id: 4n, start: true }, bias),
      send(5, { id: 5n, start: true }),
      send(6, { id: 6n, start: true }),
    ];
    await turn();
    executor.release();
    assert.deepEqual(await Promise.all([...first, ...later].map(output)), [1, 2, 3, 4, 5, 6]);
    assert.deepEqual(
      executor.batches.map((b) => b.rows),
      [2, 2, 1, 1],
      "[1, 2], [3, 5], then 4 and 6 apart (different batch keys)",
    );
  });

  it("sends a full second batch of other sequences while the first runs", async () => {
    const { batcher, executor, send, output } = batcherHarness(oldest(2));
    executor.hold();
    const first = [send(1, { id: 1n, start: true }), send(2, { id: 2n, start: true })];
    await turn();
    const second = [send(3, { id: 3n, start: true }), send(4, { id: 4n, start: true })];
    const waiting = send(5, { id: 5n, start: true });
    await turn();
    assert.deepEqual(
      executor.batches.map((b) => b.rows),
      [2, 2],
      "both batches are with the executor while the first is held",
    );
    assert.deepEqual([batcher.pending, batcher.running], [5, 4], "accepted, and of those with the executor");
    executor.release();
    assert.deepEqual(await Promise.all([...first, ...second, waiting].map(output)), [1, 2, 3, 4, 5]);
    assert.deepEqual([batcher.pending, batcher.running], [0, 0]);
  });

  it("holds a short batch behind a running one, then sends it grown", async () => {
    const { executor, send, output } = batcherHarness(oldest(4));
    executor.hold();
    const first = [1n, 2n, 3n, 4n].map((id) => send(1, { id, start: true }));
    await turn();
    const later = [send(10, { id: 5n, start: true })];
    await turn();
    assert.deepEqual(
      executor.batches.map((b) => b.rows),
      [4],
      "a lone request does not go behind a full batch",
    );
    later.push(send(20, { id: 6n, start: true }));
    executor.release();
    assert.deepEqual(await Promise.all(first.map(output)), [1, 1, 1, 1]);
    assert.deepEqual(await Promise.all(later.map(output)), [10, 20]);
    assert.deepEqual(
      executor.batches.map((b) => b.rows),
      [4, 2],
      "the waiting requests left together",
    );
  });

  it("never puts a sequence in a second batch while its first step runs: its state carries", async () => {
    const { executor, send, output } = batcherHarness(oldest(2));
    executor.hold();
    const a = [send(1, { id: 1n, start: true }), send(2, { id: 1n }), send(3, { id: 1n, end: true })];
    const b = [send(10, { id: 2n, start: true }), send(20, { id: 2n }), send(30, { id: 2n, end: true })];
    await turn();
    assert.deepEqual(
      executor.batches.map((x) => x.rows),
      [2],
    );
    executor.release();
    assert.deepEqual(await Promise.all(a.map(output)), [1, 3, 6]);
    assert.deepEqual(await Promise.all(b.map(output)), [10, 30, 60]);
    assert.deepEqual(
      executor.batches.map((x) => x.rows),
      [2, 2, 2],
    );
  });
});
