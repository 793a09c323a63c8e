import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { BoundedMemory } from "../../src/core/sequence/bounded-memory.ts";

// The memory the ended sequences' records share (recent ends, ended answers): bounded in
// bytes and in count, the oldest forgotten first, one entry too large not kept at all.

describe("BoundedMemory", () => {
  it("forgets the oldest entries once the bytes pass the budget", () => {
    const memory = new BoundedMemory<number>(160);
    for (let i = 0; i < 10; i++) memory.remember(`k${i}`, i, 10);
    memory.remember("k10", 10, 10);
    assert.equal(memory.size, 11);
    for (let i = 11; i < 20; i++) memory.remember(`k${i}`, i, 10);
    assert.equal(memory.bytes, 160);
    assert.deepEqual(
      [...memory.entries()].map(([key]) => key),
      Array.from({ length: 16 }, (_, i) => `k${i + 4}`),
    );
    assert.equal(memory.get("k3"), undefined);
    assert.equal(memory.get("k4"), 4);
  });

  it("keeps at most its count of entries", () => {
    const memory = new BoundedMemory<string>(1_000_000, 3);
    for (const key of ["a", "b", "c", "d"]) memory.remember(key, key.toUpperCase(), 1);
    assert.deepEqual(
      [...memory.entries()],
      [
        ["b", "B"],
        ["c", "C"],
        ["d", "D"],
      ],
    );
    assert.equal(memory.bytes, 3);
  });

  it("does not keep an entry costing more than a sixteenth of the budget, and drops what its key held", () => {
    const memory = new BoundedMemory<string>(1600);
    memory.remember("id", "old", 50);
    memory.remember("other", "kept", 50);
    memory.remember("id", "too large", 101);
    assert.equal(memory.get("id"), undefined);
    assert.equal(memory.get("other"), "kept");
    assert.equal(memory.bytes, 50);
  });

  it("replaces what a key held, counting its bytes once", () => {
    const memory = new BoundedMemory<string>(1600);
    memory.remember("id", "first", 40);
    memory.remember("id", "second", 60);
    assert.deepEqual([memory.get("id"), memory.size, memory.bytes], ["second", 1, 60]);
    memory.forget("id");
    assert.deepEqual([memory.size, memory.bytes], [0, 0]);
  });
});
