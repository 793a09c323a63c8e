import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ExecutionResult } from "../../src/core/executor.ts";
import type { Tensor } from "../../src/core/tensor.ts";
import { AccumulatorExecutor, oldestAccumulatorConfig } from "./support/accumulator-executor.ts";
import { batcherHarness, turn } from "./support/batcher-harness.ts";

/** Oldest with preserve_ordering, `slots` sequence slots, no idle timeout. */
const ordered = (slots: number, inferEndRequests = true, maxBatchSize = 4) =>
  oldestAccumulatorConfig({
    candidates: slots,
    maxBatchSize,
    preserveOrdering: true,
    neverIdle: true,
    overrides: { inferEndRequests },
  });

/** Holds only the runs whose first INPUT is `held`, until `open()`. */
class HoldingOne extends AccumulatorExecutor {
  readonly #held: number;
  #open: (() => void) | undefined;
  constructor(held: number) {
    super();
    this.#held = held;
  }
  open(): void {
    this.#open?.();
  }
  override async run(inputs: ReadonlyMap<string, Tensor>): Promise<ExecutionResult> {
    if ((inputs.get("INPUT")!.data as Int32Array)[0] === this.#held) {
      await new Promise<void>((resolve) => {
        this.#open = resolve;
      });
    }
    return super.run(inputs);
  }
}

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

  it("an END answered without a run (infer_end_requests off) waits behind its sequence's running answers", async () => {
    const executor = new HoldingOne(100);
    const { send } = batcherHarness(ordered(2, false, 1), executor);
    const order: string[] = [];
    const track = (name: string, value: number, sequence: object) =>
      send(value, sequence).promise.then(() => order.push(name));
    const held = track("2 start", 100, { id: 2n, start: true });
    await turn();
    const first = track("1 start", 1, { id: 1n, start: true });
    await turn();
    await turn();
    const end = track("1 end", 0, { id: 1n, end: true });
    for (let i = 0; i < 10; i++) await turn();
    assert.deepEqual(order, [], "every answer waits for sequence 2's start, which went first");
    executor.open();
    await Promise.all([held, first, end]);
    assert.deepEqual(order, ["2 start", "1 start", "1 end"]);
  });
});
