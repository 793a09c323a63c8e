import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { accumulatorConfig } from "./support/accumulator-executor.ts";
import { batcherHarness, keepProcessAlive, turn } from "./support/batcher-harness.ts";

// sequence_idle_from: last_step, as OVMS's sequence cleaner works: the idle time counts
// from the end of each step, and a sequence with a request running is never idle. With
// Triton's clock (from arrival), a step that runs longer than the idle timeout ends its
// sequence under it.

const idleAfter = (idleFrom: "arrival" | "last_step") =>
  accumulatorConfig({ maxSequenceIdleUs: 50_000, ...(idleFrom === "last_step" ? { idleFrom } : {}) });

describe("idle time from the last step", { timeout: 10_000 }, () => {
  keepProcessAlive();

  it("a step that runs longer than the idle timeout keeps its sequence", async () => {
    const { executor, send, output } = batcherHarness(idleAfter("last_step"));
    executor.hold();
    const start = send(1, { id: 1n, start: true });
    await turn();
    const queued = send(2, { id: 1n });
    await sleep(150);
    executor.release();
    assert.equal(await output(start), 1);
    assert.equal(await output(queued), 3);
    assert.equal(await output(send(4, { id: 1n, end: true })), 7);
  });

  it("and the sequence still ends once idle that long after its last step, a routine end logged as info", async () => {
    const { batcher, send, output, logged } = batcherHarness(idleAfter("last_step"));
    assert.equal(await output(send(1, { id: 1n, start: true })), 1);
    while (batcher.summary().ended.timeout === 0) await sleep(20);
    assert.throws(() => send(2, { id: 1n }), /must specify the START flag/);
    // A client that leaves without an END is common: not a warning (Triton and OVMS log it verbosely).
    assert.deepEqual(logged, [
      { level: "info", message: "sequence 1 of model 'acc' ended after 50 ms without a request" },
    ]);
  });

  it("from arrival (Triton's), such a step loses its sequence", async () => {
    const { executor, send, output } = batcherHarness(idleAfter("arrival"));
    executor.hold();
    const start = send(1, { id: 1n, start: true });
    await turn();
    await sleep(150);
    executor.release();
    assert.equal(await output(start), 1);
    assert.throws(() => send(2, { id: 1n, end: true }), /must specify the START flag/);
  });
});
