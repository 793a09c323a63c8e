import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { accumulatorConfig } from "./support/accumulator-executor.ts";
import { batcherHarness, turn } from "./support/batcher-harness.ts";

/** Oldest with preserve_ordering, `slots` sequence slots, no idle timeout. */
const ordered = (slots: number) =>
  accumulatorConfig({
    strategy: {
      kind: "oldest",
      maxCandidateSequences: slots,
      preferredBatchSizes: [],
      maxQueueDelayUs: 0,
      preserveOrdering: true,
    },
    maxSequenceIdleUs: undefined,
  });

// preserve_ordering orders the answers of requests that went to the instances, in the
// order they went (as Triton's per-instance batcher does). A request still waiting in the
// backlog has not gone anywhere: it must not hold back the answers of running sequences.

describe("Oldest with preserve_ordering", () => {
  it("answers a running sequence while another waits in the backlog for its slot", {
    timeout: 10_000,
  }, async () => {
    const { send, output } = batcherHarness(ordered(1));
    assert.equal(await output(send(1, { id: 1n, start: true })), 1);
    const waiting = send(100, { id: 2n, start: true });
    let waitingAnswered = false;
    void waiting.promise.then(() => {
      waitingAnswered = true;
    });
    await turn();
    // Sequence 1 holds the only slot: sequence 2 waits, and sequence 1 goes on.
    assert.equal(await output(send(2, { id: 1n })), 3);
    assert.equal(waitingAnswered, false, "sequence 2 is still waiting for the slot");
    assert.equal(await output(send(4, { id: 1n, end: true })), 7);
    // The END freed the slot: sequence 2 runs now.
    assert.equal(await output(waiting), 100);
  });
});
