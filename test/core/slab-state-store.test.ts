import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ServerError } from "../../src/core/errors.ts";
import { SlabStateStore } from "../../src/core/sequence/slab-state-store.ts";
import { MemoryStateStore, stateBytes } from "../../src/core/sequence/state-store.ts";
import type { Tensor } from "../../src/core/tensor.ts";

// The state stores on their own: rows in slabs for fixed-shape state (Silero VAD's
// [2, 1, 128] plus a second state of another type), a map per sequence otherwise; both
// copy what they keep, so a batch's output buffer is never held by a sequence.

const LAYOUTS = [
  { inputName: "state", datatype: "FP32" as const, shape: [2, 1, 128] },
  { inputName: "count", datatype: "INT8" as const, shape: [1, 3] },
];
const POLICY = { initialRows: 2, subsequentRows: 2, allocThreshold: 0, deallocThreshold: 1 };

function stateOf(seed: number): Map<string, Tensor> {
  return new Map<string, Tensor>([
    [
      "state",
      { datatype: "FP32", shape: [2, 1, 128], data: Float32Array.from({ length: 256 }, (_, i) => seed + i) },
    ],
    ["count", { datatype: "INT8", shape: [1, 3], data: Int8Array.of(seed, seed + 1, seed + 2) }],
  ]);
}

describe("SlabStateStore", () => {
  it("keeps each sequence in its own row, copies in, gives views out", () => {
    const store = new SlabStateStore(LAYOUTS, POLICY, 8);
    const given = stateOf(1);
    store.set("a", given);
    store.set("b", stateOf(50));
    (given.get("state")!.data as Float32Array)[0] = -1; // the store kept a copy
    const a = store.get("a")!;
    assert.equal((a.get("state")!.data as Float32Array)[0], 1);
    assert.deepEqual([...(a.get("count")!.data as Int8Array)], [1, 2, 3]);
    assert.deepEqual([...(store.get("b")!.get("count")!.data as Int8Array)], [50, 51, 52]);
    assert.deepEqual(a.get("state")!.shape, [2, 1, 128]);
    assert.equal(store.bytesOf("a"), 256 * 4 + 3);
    assert.equal(store.totalBytes, 2 * (256 * 4 + 3));
    assert.equal(store.get("missing"), undefined);
  });

  it("a view of a larger buffer is copied into the row, and writing a row back onto itself is harmless", () => {
    const store = new SlabStateStore(LAYOUTS, POLICY, 8);
    const batch = new Float32Array(1024).fill(7);
    store.set(
      "a",
      new Map<string, Tensor>([
        ["state", { datatype: "FP32", shape: [2, 1, 128], data: batch.subarray(256, 512) }],
        ["count", { datatype: "INT8", shape: [1, 3], data: Int8Array.of(1, 1, 1) }],
      ]),
    );
    batch.fill(0);
    store.set("a", store.get("a")!);
    assert.ok((store.get("a")!.get("state")!.data as Float32Array).every((v) => v === 7));
  });

  it("grows a slab when full and releases the last one when it empties", () => {
    const store = new SlabStateStore(LAYOUTS, POLICY, 8);
    const row = 256 * 4 + 3;
    assert.equal(store.allocatedBytes, 2 * row);
    for (const key of ["a", "b", "c"]) store.set(key, stateOf(1));
    assert.equal(store.slabs, 2);
    assert.equal(store.allocatedBytes, 4 * row);
    store.delete("c");
    // 2 free rows > deallocThreshold 1, and the last slab is empty.
    assert.equal(store.slabs, 1);
    store.delete("a");
    store.delete("b");
    assert.equal(store.slabs, 1, "the first slab stays");
    assert.equal(store.totalBytes, 0);
  });

  it("refuses a state of the wrong type without taking a row", () => {
    const store = new SlabStateStore(LAYOUTS, POLICY, 8);
    const wrong = stateOf(1);
    wrong.set("count", { datatype: "INT32", shape: [1, 3], data: Int32Array.of(1, 2, 3) });
    assert.throws(
      () => store.set("a", wrong),
      (e: unknown) =>
        e instanceof ServerError && /state 'count' must be INT8 to be kept, got INT32/.test(e.message),
    );
    assert.equal(store.size, 0);
  });

  it("keeps a state the model gave in other shapes apart, as given, and takes it back into a row when it fits again", () => {
    const store = new SlabStateStore(LAYOUTS, POLICY, 8);
    const row = 256 * 4 + 3;
    store.set("a", stateOf(1));
    store.set("b", stateOf(2));
    const grown = stateOf(1);
    grown.set("count", { datatype: "INT8", shape: [1, 5], data: Int8Array.of(1, 2, 3, 4, 5) });
    store.set("a", grown);
    assert.equal(store.laidOut("a"), false);
    assert.equal(store.laidOut("b"), true);
    const kept = store.get("a")!;
    assert.deepEqual(kept.get("count")!.shape, [1, 5]);
    assert.deepEqual([...(kept.get("count")!.data as Int8Array)], [1, 2, 3, 4, 5]);
    // Counted as held apart (its entries' keys and overheads too): its row is free again.
    const apart = stateBytes(grown);
    assert.equal(store.bytesOf("a"), apart);
    assert.equal(store.totalBytes, row + apart);
    assert.equal(store.allocatedBytes, 2 * row + apart);
    assert.equal(store.size, 2);
    store.set("a", stateOf(9));
    assert.equal(store.laidOut("a"), true);
    assert.equal((store.get("a")!.get("count")!.data as Int8Array)[0], 9);
    assert.equal(store.totalBytes, 2 * row);
    store.set("a", grown);
    store.delete("a");
    assert.equal(store.get("a"), undefined);
    assert.equal(store.totalBytes, row);
    assert.equal(store.size, 1);
  });
});

describe("MemoryStateStore", () => {
  it("copies a view of a larger buffer, keeps a tensor that owns its buffer as it is", () => {
    const store = new MemoryStateStore();
    const batch = new Float32Array(8).fill(3);
    const owned = Float32Array.of(1, 2);
    store.set(
      "a",
      new Map<string, Tensor>([
        ["s", { datatype: "FP32", shape: [1, 2], data: batch.subarray(2, 4) }],
        ["t", { datatype: "FP32", shape: [1, 2], data: owned }],
      ]),
    );
    batch.fill(0);
    const kept = store.get("a") as ReadonlyMap<string, Tensor>;
    assert.deepEqual([...(kept.get("s")!.data as Float32Array)], [3, 3]);
    assert.equal((kept.get("s")!.data as Float32Array).buffer.byteLength, 8);
    assert.equal(kept.get("t")!.data, owned);
    assert.equal(store.allocatedBytes, store.totalBytes);
  });
});
