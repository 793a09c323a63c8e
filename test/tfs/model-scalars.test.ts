import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ModelConfig } from "../../src/core/model-config.ts";
import {
  isModelScalar,
  scalarInputsAsConfigured,
  scalarOutputsAsModel,
} from "../../src/frontends/tfs/model-scalars.ts";
import { int32ModelConfig } from "../core/support/int32-model-config.ts";

// Which tensors the TF-Serving frontends show and answer as scalars: those the model
// declares with rank 0, which a config in Triton's form gives one element (dims [1], or
// [1, 1] as a user may write it) reshaped to [].

/** A model that does not batch, with INPUT and OUTPUT configured as `dims`, reshaped as `reshape`. */
function config(dims: number[], reshape: number[] | undefined, maxBatchSize = 0): ModelConfig {
  const base = int32ModelConfig("scalars", maxBatchSize);
  const shaped = reshape === undefined ? {} : { reshape };
  return {
    ...base,
    inputs: base.inputs.map((i) => ({ ...i, dims, ...shaped })),
    outputs: base.outputs.map((o) => ({ ...o, dims, ...shaped })),
  };
}

describe("the model's scalars over the TF-Serving API", () => {
  it("a rank-0 tensor configured as [1] or [1, 1] is a scalar; a one-element tensor the model keeps is not", () => {
    for (const dims of [[1], [1, 1]]) {
      const scalar = config(dims, []);
      assert.equal(isModelScalar(scalar, scalar.outputs[0]!), true, `dims ${dims}`);
      const outputs = scalarOutputsAsModel(scalar, [
        { name: "OUTPUT", datatype: "INT32", shape: dims, data: Int32Array.of(7) },
      ]);
      assert.deepEqual(outputs[0]!.shape, []);
      const inputs = scalarInputsAsConfigured(
        scalar,
        new Map([["INPUT", { datatype: "INT32", shape: [], data: Int32Array.of(7) }]]),
      );
      assert.deepEqual(inputs.get("INPUT")!.shape, dims, "a scalar sent is read as the configured element");
    }
    const kept = config([1], undefined);
    assert.equal(isModelScalar(kept, kept.outputs[0]!), false);
    const batched = config([1], [], 4);
    assert.equal(isModelScalar(batched, batched.inputs[0]!), false, "a batched input has rows");
  });
});
