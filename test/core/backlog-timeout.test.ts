import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { oldestAccumulatorConfig } from "./support/accumulator-executor.ts";
import { batcherHarness, keepProcessAlive, turn } from "./support/batcher-harness.ts";

/** Oldest with `slots` sequence slots, batches of one, no idle timeout. */
const slotted = (slots: number) =>
  oldestAccumulatorConfig({ candidates: slots, maxBatchSize: 1, neverIdle: true });

const settled = (promise: Promise<unknown>) =>
  promise.then(
    () => "answered",
    (error: Error) => error.message,
  );

// A request's `timeout` bounds how long its sequence waits in the backlog for a slot, as
// in Triton: the earliest deadline of its requests wins, and nothing else is timed.

describe("backlog timeout", { timeout: 10_000 }, () => {
  keepProcessAlive();

  it("does not apply to a restart, whose new life waits for the slot its old life holds", async () => {
    const { executor, send, output } = batcherHarness(slotted(1));
    executor.hold();
    const old = send(1, { id: 7n, start: true });
    await turn();
    // The old life's step runs; the new life waits for it, not in the backlog.
    const restart = send(5, { id: 7n, start: true, timeoutUs: 1000 });
    await sleep(30);
    executor.release();
    assert.equal(await output(old), 1);
    assert.equal(await output(restart), 5);
    assert.equal(await output(send(1, { id: 7n, end: true })), 6);
  });

  it("does not apply to a restart's new life through a later request's timeout, nor to a restart of a restart", async () => {
    const { executor, send, output, batcher } = batcherHarness(slotted(1));
    executor.hold();
    const old = send(1, { id: 7n, start: true });
    await turn();
    const restart = send(5, { id: 7n, start: true });
    const next = send(1, { id: 7n, timeoutUs: 1000 });
    const again = send(10, { id: 7n, start: true, timeoutUs: 1000 });
    const last = send(2, { id: 7n, timeoutUs: 1000 });
    await sleep(30);
    executor.release();
    assert.equal(await output(old), 1);
    assert.deepEqual(await Promise.all([restart, next, again, last].map(output)), [5, 6, 10, 12]);
    assert.equal(batcher.summary().ended.backlog_timeout, 0);
  });

  it("stops for a restart of a backlogged id once its old life gets a slot", async () => {
    const { executor, send, output, batcher } = batcherHarness(slotted(1));
    executor.hold();
    const first = send(1, { id: 1n, start: true, end: true });
    await turn();
    const old = send(1, { id: 7n, start: true });
    // Both lives of 7 wait in the backlog: the new one's timeout counts for now.
    const restart = send(5, { id: 7n, start: true, timeoutUs: 50_000 });
    await turn();
    executor.release();
    executor.hold();
    // The old life of 7 has the slot and runs, held: the new life waits for that slot.
    await sleep(120);
    executor.release();
    assert.deepEqual(await Promise.all([first, old, restart].map(output)), [1, 1, 5]);
    assert.equal(batcher.summary().ended.backlog_timeout, 0);
  });

  it("is shortened by a later request of a backlogged sequence", async () => {
    const { send, output, batcher } = batcherHarness(slotted(1));
    assert.equal(await output(send(1, { id: 1n, start: true })), 1);
    const start = settled(send(10, { id: 2n, start: true }).promise);
    const next = settled(send(1, { id: 2n, timeoutUs: 1000 }).promise);
    assert.equal(await next, "timeout of the corresponding sequence has been expired");
    assert.equal(await start, "timeout of the corresponding sequence has been expired");
    assert.equal(batcher.summary().ended.backlog_timeout, 1);
  });

  it("longer than setTimeout's longest delay is kept, not fired at once", async () => {
    const { send, output } = batcherHarness(slotted(1));
    assert.equal(await output(send(1, { id: 1n, start: true })), 1);
    // 30 days, past the 24.8 days a Node timer can wait.
    const waiting = send(10, { id: 2n, start: true, timeoutUs: 30 * 24 * 3600 * 1e6 });
    await sleep(30);
    assert.equal(await output(send(1, { id: 1n, end: true })), 2);
    assert.equal(await output(waiting), 10);
  });
});
