import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import {
  accumulate,
  accumulatorConfig,
  batchCounts,
  findSequence,
  waitForSequence,
} from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// The Direct strategy's max_queue_delay_microseconds with minimum_slot_utilization: with
// 0 a batch leaves at once (the delay is ignored); with 0.5 or 1 it waits until that share
// of the slots has a request, or until the delay has passed. Requests are sent one at a
// time, each listed by the sequences API (accepted, not yet run) before the next is sent,
// so which requests share a batch shows in the per-batch-size counts of /stats.

const HOUR_US = 3_600_000_000;
const config = (name: string, utilization: number, delayUs: number) =>
  accumulatorConfig(
    name,
    4,
    `max_sequence_idle_microseconds: 60000000
  direct { max_queue_delay_microseconds: ${delayUs} minimum_slot_utilization: ${utilization} }`,
  );

let server: TestServer;
before(async () => {
  const model = (name: string, utilization: number, delayUs: number) => ({
    config: config(name, utilization, delayUs),
    onnx: accumulatorModel(),
  });
  server = await startTestServer({
    util0: model("util0", 0, HOUR_US),
    util05: model("util05", 0.5, HOUR_US),
    util1: model("util1", 1, HOUR_US),
    util1_delay: model("util1_delay", 1, 1_000_000),
  });
});
after(() => server.stop());

/**
 * Sends the START of each id in turn, each one accepted and still waiting (listed with a
 * queued request and no step) before the next is sent. Resolves with the outputs.
 */
async function staggeredStarts(model: string, ids: readonly number[], value = 1): Promise<number[]> {
  const answers: Promise<number>[] = [];
  for (const id of ids) {
    answers.push(accumulate(server.url, model, value * id, { id, start: true }));
    await waitForSequence(server.url, model, id);
  }
  return Promise.all(answers);
}

describe("Direct strategy queue delay and minimum slot utilization", { timeout: 60_000 }, () => {
  it("utilization 0: every batch leaves at once, whatever the delay", async () => {
    // An hour's delay: a request that waited for it would never come back within the test.
    assert.equal(await accumulate(server.url, "util0", 3, { id: 1, start: true }), 3);
    assert.equal(await accumulate(server.url, "util0", 4, { id: 1 }), 7);
    assert.deepEqual(await batchCounts(server.url, "util0"), { 1: 2 });
    // A second sequence, sent after the first has its answer, runs in a batch of its own.
    assert.equal(await accumulate(server.url, "util0", 5, { id: 2, start: true }), 5);
    assert.deepEqual(await batchCounts(server.url, "util0"), { 1: 2, 2: 1 });
    assert.equal(await accumulate(server.url, "util0", 1, { id: 1, end: true }), 8);
    assert.equal(await accumulate(server.url, "util0", 1, { id: 2, end: true }), 6);
  });

  it("utilization 0.5: a lone request waits until half the slots have one", async () => {
    const first = accumulate(server.url, "util05", 10, { id: 1, start: true });
    const waiting = await waitForSequence(server.url, "util05", 1);
    assert.deepEqual([waiting.queued, waiting.steps], [1, 0]);
    const second = accumulate(server.url, "util05", 20, { id: 2, start: true });
    assert.deepEqual(await Promise.all([first, second]), [10, 20]);
    // One batch of both (slots 0 and 1), never a batch of the first alone.
    assert.deepEqual(await batchCounts(server.url, "util05"), { 2: 1 });
    assert.deepEqual(
      await Promise.all([
        accumulate(server.url, "util05", 1, { id: 1, end: true }),
        accumulate(server.url, "util05", 2, { id: 2, end: true }),
      ]),
      [11, 22],
    );
    assert.deepEqual(await batchCounts(server.url, "util05"), { 2: 2 });
  });

  it("utilization 1: requests wait until every slot has one", async () => {
    const outputs = staggeredStarts("util1", [1, 2, 3, 4]);
    assert.deepEqual(await outputs, [1, 2, 3, 4]);
    assert.deepEqual(await batchCounts(server.url, "util1"), { 4: 1 });
    // Three staggered requests are all still waiting while the fourth slot has none.
    const three = [1, 2, 3].map((id) => accumulate(server.url, "util1", 100, { id }));
    for (const id of [1, 2, 3]) await waitForSequence(server.url, "util1", id, (s) => s.queued === 1);
    for (const id of [1, 2, 3]) assert.equal((await findSequence(server.url, "util1", id))?.steps, 1);
    const fourth = accumulate(server.url, "util1", 100, { id: 4 });
    assert.deepEqual(await Promise.all([...three, fourth]), [101, 102, 103, 104]);
    assert.deepEqual(await batchCounts(server.url, "util1"), { 4: 2 });
    await Promise.all([1, 2, 3, 4].map((id) => accumulate(server.url, "util1", 0, { id, end: true })));
  });

  it("utilization 1 with a delay: a partial batch leaves once the delay has passed", async () => {
    // Three of four slots: utilization is never reached, so only the delay lets them go.
    assert.deepEqual(await staggeredStarts("util1_delay", [1, 2, 3]), [1, 2, 3]);
    assert.deepEqual(await batchCounts(server.url, "util1_delay"), { 3: 1 });
    const ends = await Promise.all(
      [1, 2, 3].map((id) => accumulate(server.url, "util1_delay", 1, { id, end: true })),
    );
    assert.deepEqual(ends, [2, 3, 4]);
    assert.deepEqual(await batchCounts(server.url, "util1_delay"), { 3: 2 });
  });
});
