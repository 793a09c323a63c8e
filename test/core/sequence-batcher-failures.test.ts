import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { batcherHarness, turn } from "./support/batcher-harness.ts";

// What a failed step does to sequences: a sequence the client can address keeps its
// previous state and goes on; a sequence whose server-assigned id never reached the client
// (its START failed) is ended at once instead of holding a slot until the idle timeout.

describe("sequence batcher: failed steps", () => {
  it("ends a sequence whose START with a server-assigned id failed, and frees its slot and state", async () => {
    const { batcher, executor, store, send } = batcherHarness();
    executor.failNext();
    const start = send(1, { start: true });
    await assert.rejects(start.promise, /failed on purpose/);
    // Let the rejection handler run.
    await turn();
    const summary = batcher.summary();
    assert.equal(summary.live, 0);
    assert.equal(summary.ended.forced, 1);
    assert.deepEqual(batcher.list(), []);
    assert.equal(store.size, 0);
  });

  it("keeps a client-named sequence and its previous state after a failed step", async () => {
    const { batcher, executor, send, output } = batcherHarness();
    assert.equal(await output(send(5, { id: 7n, start: true })), 5);
    executor.failNext();
    await assert.rejects(send(100, { id: 7n }).promise, /failed on purpose/);
    assert.equal(await output(send(2, { id: 7n, end: true })), 7);
    assert.equal(batcher.summary().ended.end, 1);
    assert.equal(batcher.summary().ended.forced, 0);
  });

  it("lists the steps a sequence applied: a failed one is not among them", async () => {
    const { batcher, executor, send, output } = batcherHarness();
    assert.equal(await output(send(5, { id: 8n, start: true })), 5);
    executor.failNext();
    await assert.rejects(send(100, { id: 8n }).promise, /failed on purpose/);
    assert.equal(await output(send(2, { id: 8n })), 7);
    assert.deepEqual(
      batcher.list().map((s) => [s.id, s.steps]),
      [[8n, 2]],
    );
  });
});
