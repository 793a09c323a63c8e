import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Workload } from "../../src/bench/workload.ts";

// The load generator makes its inputs once: steps take turns with a bounded number of
// sets, the same objects each time (so a client may keep what it encoded of them), and
// consecutive steps of a sequence differ.

const options = { values: new Map([["sr", [16000]]]), shapes: new Map(), seed: 1 };

describe("the benchmark's input sets", () => {
  it("are made once, at most 256, and fewer for large inputs (16 MiB in all)", () => {
    const small = new Workload(
      [
        { name: "input", datatype: "FP32", shape: [-1, 512] },
        { name: "sr", datatype: "INT64", shape: [] },
      ],
      options,
    );
    assert.equal(small.sets, 256);
    assert.equal(small.step(3, 4), small.step(3, 4 + small.sets), "the same set, the same tensors");
    assert.notEqual(small.step(3, 4).get("input"), small.step(3, 5).get("input"));
    assert.deepEqual([...(small.step(0, 0).get("sr")!.data as BigInt64Array)], [16000n]);

    const large = new Workload([{ name: "image", datatype: "FP32", shape: [1, 1024, 1024] }], {
      ...options,
      values: new Map(),
    });
    assert.equal(large.sets, 4, "4 MiB each: four sets fill 16 MiB");
  });
});
