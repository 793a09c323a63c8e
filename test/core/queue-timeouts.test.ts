import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { QueueTimeoutConfig } from "../../src/core/model-config.ts";
import { keepProcessAlive, turn } from "./support/batcher-harness.ts";
import { outcome, PLAIN_DYNAMIC_BATCHING, plusOneBatcher } from "./support/plus-one-model.ts";

// Triton's queue policy timeouts in the dynamic batcher. The instance is held, so requests
// wait in the queue behind a running one: with REJECT, those whose wait runs out are
// refused (UNAVAILABLE "Request timeout expired") while the instance is still busy; with
// DELAY, they are served after every request whose wait has not run out. A request's own
// `timeout` shortens the model's, never lengthens it, and only with allow_timeout_override.

keepProcessAlive();

const withTimeout = (timeout: QueueTimeoutConfig) =>
  plusOneBatcher({ ...PLAIN_DYNAMIC_BATCHING, defaultQueuePolicy: { maxQueueSize: 0, timeout } });

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const EXPIRED = "UNAVAILABLE: Request timeout expired";

// The model's queue wait in the REJECT tests. The running request waits in the queue too
// until it is handed to the instance, so the wait must outlast any pause of a loaded
// machine before that (20 ms did not, now and then): a run's outcome never depends on it.
const QUEUE_WAIT_US = 200_000;

describe("queue policy timeouts (dynamic batching)", { timeout: 10_000 }, () => {
  it("REJECT: requests still queued when their wait runs out are refused, though every instance is busy", async () => {
    const { executor, send } = withTimeout({
      defaultUs: QUEUE_WAIT_US,
      allowOverride: false,
      action: "REJECT",
    });
    executor.hold();
    const running = send(1);
    await turn();
    const queued = [send(2), send(3)];
    // Answered by the batcher's timer: the held instance frees nothing meanwhile.
    assert.deepEqual(await Promise.all(queued.map(outcome)), [EXPIRED, EXPIRED]);
    executor.release();
    assert.equal(await running, 2, "the request already running is answered");
    assert.equal(await send(4), 5, "the model serves on");
    assert.deepEqual(executor.firstValues, [1, 4]);
  });

  it("REJECT: a timeout that is not whole milliseconds is kept (the timer, armed in milliseconds, may fire early)", async () => {
    for (let i = 0; i < 10; i++) {
      const { executor, send } = withTimeout({
        defaultUs: QUEUE_WAIT_US + ((i * 37) % 1000),
        allowOverride: false,
        action: "REJECT",
      });
      executor.hold();
      const running = send(1);
      await turn();
      assert.equal(await outcome(send(2)), EXPIRED);
      executor.release();
      await running;
    }
  });

  it("with a queue policy no request waits with a busy instance, where the policy could not reach it (as Triton: no prefetching)", async () => {
    const { executor, send } = withTimeout({
      defaultUs: QUEUE_WAIT_US,
      allowOverride: false,
      action: "REJECT",
    });
    executor.hold();
    const running = send(1);
    await turn();
    // A full batch of 4: without a policy it would go to the instance behind the running one.
    const full = [send(2), send(3), send(4), send(5)];
    assert.deepEqual(await Promise.all(full.map(outcome)), [EXPIRED, EXPIRED, EXPIRED, EXPIRED]);
    assert.deepEqual(executor.batches, [1]);
    executor.release();
    assert.equal(await running, 2);
  });

  it("with preserve_ordering, a refusal is answered when the wait ends, not in its place behind the running request (as Triton)", async () => {
    const { executor, send } = plusOneBatcher({
      ...PLAIN_DYNAMIC_BATCHING,
      preserveOrdering: true,
      defaultQueuePolicy: {
        maxQueueSize: 0,
        timeout: { defaultUs: QUEUE_WAIT_US, allowOverride: false, action: "REJECT" },
      },
    });
    executor.hold();
    const running = send(1);
    await turn();
    assert.equal(await outcome(send(2)), EXPIRED);
    executor.release();
    assert.equal(await running, 2);
    assert.equal(await send(3), 4, "the order goes on past the refused request");
  });

  it("DELAY: requests whose wait ran out are served after those whose wait has not", async () => {
    const { executor, send } = withTimeout({ defaultUs: 10_000_000, allowOverride: true, action: "DELAY" });
    executor.hold();
    const running = send(1);
    await turn();
    // 2 and 3 ask for a 1 µs wait; 4 and 5 keep the model's 10 s.
    const answers = [send(2, { timeout: 1 }), send(3, { timeout: 1 }), send(4), send(5)];
    await sleep(20);
    executor.release();
    assert.deepEqual(await Promise.all([running, ...answers]), [2, 3, 4, 5, 6]);
    // Batches of up to 4 rows: 4 and 5 first, then the delayed 2 and 3 with them or after.
    const order = executor.firstValues;
    assert.equal(order[0], 1);
    assert.equal(order[1], 4, `the batches began with ${JSON.stringify(order)}`);
  });

  it("a request's timeout only shortens the model's, and only with allow_timeout_override", async () => {
    const overriding = withTimeout({ defaultUs: 10_000_000, allowOverride: true, action: "REJECT" });
    overriding.executor.hold();
    const first = overriding.send(1);
    await turn();
    const short = overriding.send(2, { timeout: 10_000 });
    const long = overriding.send(3, { timeout: 60_000_000 });
    assert.equal(await outcome(short), EXPIRED);
    await sleep(20);
    overriding.executor.release();
    assert.deepEqual(
      await Promise.all([first, long]),
      [2, 4],
      "a longer timeout than the model's is not taken",
    );

    const fixed = withTimeout({ defaultUs: 10_000_000, allowOverride: false, action: "REJECT" });
    fixed.executor.hold();
    const held = fixed.send(1);
    await turn();
    const ignored = fixed.send(2, { timeout: 1 });
    await sleep(20);
    fixed.executor.release();
    assert.deepEqual(
      await Promise.all([held, ignored]),
      [2, 3],
      "without the override a request's timeout is not taken",
    );
  });
});
