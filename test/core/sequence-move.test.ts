import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { InferRequest, SequenceControl } from "../../src/core/infer.ts";
import { LoadedModel } from "../../src/core/loaded-model.ts";
import {
  AccumulatorExecutor,
  accumulatorConfig,
  oldestAccumulatorConfig,
} from "./support/accumulator-executor.ts";
import { turn } from "./support/batcher-harness.ts";

// Live sequences moving to a reloaded version of their model (LoadedModel.moveSequencesTo),
// with what the old version still owes its clients.

const request = (value: number, sequence: Partial<SequenceControl>): InferRequest => ({
  id: "",
  inputs: new Map([["INPUT", { datatype: "INT32", shape: [1, 1], data: Int32Array.of(value) }]]),
  outputs: undefined,
  parameters: {},
  sequence: { id: undefined, start: false, end: false, timeoutUs: undefined, ...sequence },
});
const sum = (response: { readonly outputs: readonly { readonly data: unknown }[] }) =>
  (response.outputs[0]!.data as Int32Array)[0];

describe("sequences moving to a reloaded version", () => {
  it("one opened without a request keeps its window for one: it ends on the new version when that passes", {
    timeout: 10_000,
  }, async () => {
    const config = accumulatorConfig({ maxSequenceIdleUs: 20_000 });
    const window = { firstRequestWindowMs: 100 };
    const old = new LoadedModel({ config, version: "1", executors: [new AccumulatorExecutor()], ...window });
    old.sequences!.open("unused", { expiresAtMs: Date.now() + 60_000 });
    await old.quiesce();
    const fresh = new LoadedModel({
      config,
      version: "1",
      executors: [new AccumulatorExecutor("acc_new")],
      ...window,
    });
    old.moveSequencesTo(fresh);
    old.resume();
    assert.equal(fresh.sequences!.lookup("unused").kind, "live");
    while (fresh.sequences!.lookup("unused").kind === "live") await new Promise((r) => setTimeout(r, 10));
    const lookup = fresh.sequences!.lookup("unused");
    assert.equal(lookup.kind === "ended" && lookup.reason, "timeout");
    await old.unload(Date.now() + 1000);
    await fresh.unload(Date.now() + 1000);
  });

  it("with preserve_ordering, an answer held for a request that moved is still sent, and the old version unloads", async () => {
    const config = oldestAccumulatorConfig({ candidates: 4, preserveOrdering: true, maxBatchSize: 2 });
    const running = new AccumulatorExecutor();
    const old = new LoadedModel({ config, version: "1", executors: [running] });
    running.hold();
    // Accepted in this order: x1, x2, y1. The first batch runs x1 and y1; x2 waits for x1.
    const x1 = old.infer(request(1, { id: 1n, start: true }));
    const x2 = old.infer(request(2, { id: 1n }));
    const y1 = old.infer(request(10, { id: 2n, start: true }));
    await turn();
    assert.equal(running.batches.length, 1);
    // The reload begins while that batch runs: y1's answer waits for x2's, which moves.
    const quiet = old.quiesce();
    running.release();
    await quiet;
    const fresh = new LoadedModel({ config, version: "1", executors: [new AccumulatorExecutor("acc_new")] });
    old.moveSequencesTo(fresh);
    old.resume();
    assert.equal(sum(await x1), 1);
    assert.equal(sum(await y1), 10);
    assert.equal(sum(await x2), 3);
    await old.unload(Date.now() + 1000);
    assert.equal(old.pending, 0);
    await fresh.unload(Date.now() + 1000);
  });

  it("two versions folded into one, each with a live sequence of one id: the first keeps it, the second ends", async () => {
    const config = accumulatorConfig({ maxSequenceIdleUs: undefined }, 2);
    const v1 = new LoadedModel({ config, version: "1", executors: [new AccumulatorExecutor("v1")] });
    const v2 = new LoadedModel({ config, version: "2", executors: [new AccumulatorExecutor("v2")] });
    assert.equal(sum(await v1.infer(request(100, { id: "a", start: true }))), 100);
    assert.equal(sum(await v2.infer(request(5, { id: "a", start: true }))), 5);
    const v3 = new LoadedModel({ config, version: "3", executors: [new AccumulatorExecutor("v3")] });
    await v1.quiesce();
    await v2.quiesce();
    v1.moveSequencesTo(v3);
    v2.moveSequencesTo(v3);
    const live = v3.sequences!.list().filter((s) => s.id === "a");
    assert.equal(live.length, 1, JSON.stringify(live));
    assert.equal(sum(await v3.infer(request(1, { id: "a", end: true }))), 101);
    assert.equal(v3.sequences!.list().length, 0);
    assert.equal(v3.sequences!.summary().ended.reloaded, 1);
    for (const model of [v1, v2, v3]) await model.unload(Date.now() + 1000);
  });

  it("a sequence waiting in the backlog keeps its START's timeout", async () => {
    const config = oldestAccumulatorConfig({ candidates: 1, preserveOrdering: false, maxBatchSize: 1 });
    const old = new LoadedModel({ config, version: "1", executors: [new AccumulatorExecutor("old")] });
    assert.equal(sum(await old.infer(request(1, { id: "holder", start: true }))), 1);
    // The one slot is taken: this START waits in the backlog, at most 300 ms.
    const waiting = old.infer(request(2, { id: "waiter", start: true, timeoutUs: 300_000 }));
    await turn();
    await old.quiesce();
    const fresh = new LoadedModel({ config, version: "1", executors: [new AccumulatorExecutor("fresh")] });
    old.moveSequencesTo(fresh);
    old.resume();
    // The server's sockets keep its process alive; here a timer does (the batcher's are unref'd).
    const alive = setTimeout(() => {}, 5000);
    await assert.rejects(waiting, /timeout of the corresponding sequence has been expired/);
    clearTimeout(alive);
    assert.equal(fresh.sequences!.summary().ended.backlog_timeout, 1);
    await old.unload(Date.now() + 1000);
    await fresh.unload(Date.now() + 1000);
  });

  it("a request that moves to a version that no longer preserves ordering, or is refused there, is answered", async () => {
    const ordering = (preserveOrdering: boolean) =>
      oldestAccumulatorConfig({ candidates: 4, preserveOrdering, maxBatchSize: 2, neverIdle: true });
    const old = new LoadedModel({
      config: ordering(true),
      version: "1",
      executors: [new AccumulatorExecutor("old")],
    });
    assert.equal(sum(await old.infer(request(100, { id: "a", start: true }))), 100);
    assert.equal(sum(await old.infer(request(5, { id: "b", start: true }))), 5);
    await old.quiesce();
    const moving = old.infer(request(1, { id: "a" }));
    await turn();
    const fresh = new LoadedModel({
      config: ordering(false),
      version: "1",
      executors: [new AccumulatorExecutor("fresh")],
    });
    // "b" is live there already: its moving sequence is refused as a fold would refuse it.
    assert.equal(sum(await fresh.infer(request(7, { id: "b", start: true }))), 7);
    const refused = old.infer(request(1, { id: "b" })).then(
      () => "answered",
      (error: Error) => error.message,
    );
    await turn();
    old.moveSequencesTo(fresh);
    old.resume();
    assert.equal(sum(await moving), 101);
    assert.match(await refused, /already holds a live sequence with its id/);
    await old.unload(Date.now() + 1000);
    await fresh.unload(Date.now() + 1000);
  });
});
