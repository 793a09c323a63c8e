import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { RecentEnds } from "../../src/core/sequence/recent-ends.ts";
import type { NumericTensor } from "../../src/core/tensor.ts";
import { accumulatorConfig, oldestAccumulatorConfig } from "./support/accumulator-executor.ts";
import { batcherHarness, keepProcessAlive, turn } from "./support/batcher-harness.ts";

// Sequences opened without a request (how SageMaker sessions begin), closed without one,
// and ended by an absolute expiry: each through the batcher's one end path, with the
// reason remembered for a while so a later request can be told why its id is gone.

const startFlag = (batch: { inputs: Map<string, unknown> }): number =>
  ((batch.inputs.get("START") as NumericTensor).data as Int32Array)[0]!;

describe("sequence batcher: open, close, expiry", () => {
  it("an opened sequence holds a slot with no state, and its first request starts it", async () => {
    const { batcher, executor, store, send, output } = batcherHarness();
    batcher.open("session-1");
    assert.deepEqual(batcher.lookup("session-1"), { kind: "live", expiresAtMs: undefined });
    const [info] = batcher.list();
    assert.equal(info?.status, "active");
    assert.equal(info?.steps, 0);
    assert.equal(info?.stateBytes, 0);
    assert.equal(batcher.summary().live, 1);

    assert.equal(await output(send(5, { id: "session-1" })), 5);
    assert.equal(await output(send(3, { id: "session-1" })), 8);
    // The START control is true on the first step only, as for a START request.
    assert.deepEqual(executor.batches.map(startFlag), [1, 0]);
    assert.equal(store.size, 1);
  });

  it("refuses to open a live id, and refuses when slots and backlog are full", () => {
    const { batcher } = batcherHarness(accumulatorConfig({ backlogLimit: 1 }));
    batcher.open("a");
    assert.throws(() => batcher.open("a"), {
      code: "ALREADY_EXISTS",
      message: /sequence a of model 'acc' is already live/,
    });
    for (const id of ["b", "c", "d", "e"]) batcher.open(id);
    assert.equal(batcher.summary().backlog, 1);
    assert.throws(() => batcher.open("f"), {
      code: "UNAVAILABLE",
      message: /backlog of 1 sequences is full/,
    });
  });

  it("close frees the state after the requests already accepted, and is remembered as an end", async () => {
    const { batcher, executor, store, send, output } = batcherHarness();
    batcher.open("s");
    await output(send(2, { id: "s" }));
    executor.hold();
    const queued = send(4, { id: "s" });
    await turn();
    assert.equal(batcher.close("s"), true);
    // The id no longer answers, but the request it had accepted still runs.
    assert.throws(() => send(1, { id: "s" }), /must specify the START flag/);
    executor.release();
    assert.equal(await output(queued), 6);
    await turn();
    assert.equal(store.size, 0);
    assert.deepEqual(batcher.list(), []);
    assert.equal(batcher.summary().ended.end, 1);
    const lookup = batcher.lookup("s");
    assert.equal(lookup.kind, "ended");
    assert.equal(lookup.kind === "ended" && lookup.reason, "end");
    assert.equal(batcher.close("s"), false);
    assert.deepEqual(batcher.lookup("never-opened"), { kind: "unknown" });
  });

  it("expiry ends a sequence by itself, frees its state, and counts reason 'expired'", async () => {
    const { batcher, store, send, output } = batcherHarness();
    const expiresAtMs = Date.now() + 150;
    batcher.open("short", { expiresAtMs });
    assert.equal(batcher.list()[0]?.expiresAtMs, expiresAtMs);
    await output(send(1, { id: "short" }));
    assert.equal(store.size, 1);
    while (batcher.lookup("short").kind === "live") await new Promise((r) => setTimeout(r, 20));
    const lookup = batcher.lookup("short");
    assert.equal(lookup.kind === "ended" && lookup.reason, "expired");
    assert.equal(store.size, 0);
    assert.equal(batcher.summary().ended.expired, 1);
    assert.throws(() => send(1, { id: "short" }), /must specify the START flag/);
  });

  it("a sequence with an expiry that gets no request in its first-request window ends (timeout), its slot freed", async () => {
    // The idle timeout (20 ms) is shorter than the window (100 ms): the window holds, not it.
    const { batcher, send, output } = batcherHarness(
      accumulatorConfig({ maxSequenceIdleUs: 20_000 }),
      undefined,
      {
        firstRequestWindowMs: 100,
      },
    );
    batcher.open("unused", { expiresAtMs: Date.now() + 60_000 });
    batcher.open("used late", { expiresAtMs: Date.now() + 60_000 });
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(await output(send(4, { id: "used late" })), 4);
    assert.equal(batcher.summary().live, 2);
    while (batcher.lookup("unused").kind === "live") await new Promise((r) => setTimeout(r, 10));
    const lookup = batcher.lookup("unused");
    assert.equal(lookup.kind === "ended" && lookup.reason, "timeout");
    // The one that had its request in time lives on, to its expiry.
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual([batcher.summary().live, batcher.lookup("used late").kind], [1, "live"]);
  });

  it("one that waited in the backlog has its whole window from when it got its slot", {
    timeout: 10_000,
  }, async () => {
    const oneSlot = accumulatorConfig({
      maxSequenceIdleUs: 20_000,
      strategy: {
        kind: "oldest",
        maxCandidateSequences: 1,
        preferredBatchSizes: [],
        maxQueueDelayUs: 0,
        preserveOrdering: false,
      },
    });
    const { batcher, send, output } = batcherHarness(oneSlot, undefined, { firstRequestWindowMs: 1000 });
    batcher.open("first", { expiresAtMs: Date.now() + 60_000 });
    batcher.open("waiting", { expiresAtMs: Date.now() + 60_000 });
    assert.equal(batcher.summary().backlog, 1);
    await new Promise((r) => setTimeout(r, 700));
    batcher.close("first");
    await turn();
    assert.equal(batcher.summary().live, 1);
    // 1.2 s after it was opened, 0.5 s after it got its slot: its window is not over.
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(await output(send(3, { id: "waiting" })), 3);
  });

  it("the idle timeout does not end a sequence that has an expiry once it had a request; the expiry does", async () => {
    const { batcher, send, output } = batcherHarness(accumulatorConfig({ maxSequenceIdleUs: 20_000 }));
    batcher.open("session", { expiresAtMs: Date.now() + 60_000 });
    await output(send(1, { id: "session" }));
    await output(send(1, { id: 5n, start: true }));
    // The plain sequence times out; the session stays.
    while (batcher.lookup(5n).kind === "live") await new Promise((r) => setTimeout(r, 10));
    assert.equal(batcher.summary().ended.timeout, 1);
    assert.equal(batcher.lookup("session").kind, "live");
    assert.equal(await output(send(2, { id: "session" })), 3);
  });

  it("a request that arrives past the expiry before its timer fired is refused, and ends the sequence", async () => {
    const { batcher, send } = batcherHarness();
    batcher.open("late", { expiresAtMs: Date.now() - 1 });
    assert.throws(() => send(1, { id: "late" }), {
      code: "INVALID_ARG",
      message: /^sequence late of model 'acc' expired at \d{4}-\d\d-\d\dT/,
    });
    assert.equal(batcher.summary().ended.expired, 1);
  });

  it("a START on an id that ended makes it live again", async () => {
    const { batcher, send, output } = batcherHarness();
    batcher.open("again");
    batcher.close("again");
    assert.equal(batcher.lookup("again").kind, "ended");
    assert.equal(await output(send(9, { id: "again", start: true })), 9);
    assert.equal(batcher.lookup("again").kind, "live");
  });
});

describe("an opened session restarted while it waits in the backlog", { timeout: 10_000 }, () => {
  keepProcessAlive();

  it("keeps its place: the restart gets the next free slot, before sequences that came later (as Triton)", async () => {
    const { batcher, send, output } = batcherHarness(
      oldestAccumulatorConfig({ candidates: 1, maxBatchSize: 1, neverIdle: true }),
    );
    batcher.open("x"); // the only slot
    batcher.open("s"); // backlog: s
    const later = send(100, { id: "y", start: true }); // backlog: s, y
    const restart = send(20, { id: "s", start: true }); // the restart of s takes s's place
    await turn();
    batcher.close("x");
    assert.equal(await output(restart), 20);
    assert.equal(batcher.list().find((info) => info.id === "y")?.status, "backlogged");
    batcher.close("s");
    assert.equal(await output(later), 100);
  });
});

describe("recent ends memory", () => {
  it("is bounded in bytes: the oldest ends are forgotten first, and a huge id is not kept", () => {
    const memory = new RecentEnds(16 * 1024);
    for (let i = 0; i < 1000; i++) memory.remember(`id-${i}`, { reason: "end", endedAtMs: i });
    assert.ok(memory.bytes <= 16 * 1024, `${memory.bytes} bytes`);
    assert.ok(memory.size > 50 && memory.size < 1000, `${memory.size} ids`);
    assert.equal(memory.get("id-0"), undefined);
    assert.deepEqual(memory.get("id-999"), { reason: "end", endedAtMs: 999 });
    memory.remember("x".repeat(10_000), { reason: "forced", endedAtMs: 0 });
    assert.equal(memory.get("x".repeat(10_000)), undefined);
    assert.ok(memory.bytes <= 16 * 1024);
  });
});
