import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { QueuePolicyConfig } from "../../src/core/model-config.ts";
import { keepProcessAlive, turn } from "./support/batcher-harness.ts";
import { outcome, PLAIN_DYNAMIC_BATCHING, plusOneBatcher } from "./support/plus-one-model.ts";

// Triton's priority levels in the dynamic batcher: each level has a queue under its own
// policy (or the default one), and levels are served in order, the lowest number first; a
// request's `priority` picks its level, 0 or one past the levels meaning the default. The
// instance is held, so requests wait in the queue behind a running one.

keepProcessAlive();

/** Three levels, the default 2; one request per batch, so the order of runs is the order of service. */
const threeLevels = (policies: [number, QueuePolicyConfig][] = []) =>
  plusOneBatcher({
    ...PLAIN_DYNAMIC_BATCHING,
    preferredBatchSizes: [1],
    priorityLevels: 3,
    defaultPriorityLevel: 2,
    priorityQueuePolicies: new Map(policies),
  });

describe("priority levels (dynamic batching)", { timeout: 10_000 }, () => {
  it("serves level 1 first, then the default level, then 3; in arrival order within a level", async () => {
    const { executor, send } = threeLevels();
    executor.hold();
    const running = send(1);
    await turn();
    const queued = [
      send(2),
      send(3, { priority: 3 }),
      send(4, { priority: 1 }),
      send(5, { priority: 0 }),
      send(6, { priority: 9 }),
      send(7, { priority: 1n }),
    ];
    executor.release();
    assert.deepEqual(await Promise.all([running, ...queued]), [2, 3, 4, 5, 6, 7, 8]);
    // 0 and 9 (past the levels) are the default level, 2.
    assert.deepEqual(executor.firstValues, [1, 4, 7, 2, 5, 6, 3]);
  });

  it("a level's queue holds what its policy allows: a full level refuses, in Triton's words; the others take theirs", async () => {
    const { executor, send } = threeLevels([[1, { maxQueueSize: 1 }]]);
    executor.hold();
    const running = send(1);
    await turn();
    const first = send(2, { priority: 1 });
    // Refused as it is queued (the frontend answers it at once).
    const refused = outcome((async () => send(3, { priority: 1 }))());
    const other = send(4);
    assert.equal(await refused, "UNAVAILABLE: [request id: 3] Exceeds maximum queue size");
    executor.release();
    assert.deepEqual(await Promise.all([running, first, other]), [2, 3, 5]);
  });

  it("a level's own timeout applies to its requests only", async () => {
    const { executor, send } = threeLevels([
      [3, { maxQueueSize: 0, timeout: { defaultUs: 100_000, allowOverride: false, action: "REJECT" } }],
    ]);
    executor.hold();
    const running = send(1);
    await turn();
    const low = outcome(send(2, { priority: 3 }));
    const normal = send(3);
    assert.equal(await low, "UNAVAILABLE: Request timeout expired");
    executor.release();
    assert.deepEqual(await Promise.all([running, normal]), [2, 4]);
  });
});
