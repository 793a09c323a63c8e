import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { findSharedInputs, findStatePairs } from "../../src/config/index.ts";
import type { ModelIo, ModelTensorInfo } from "../../src/core/model-io.ts";

// What a stateful model listed OVMS's way leaves to be found from the model file: its
// state pairs (by name, datatype and shape) and its shared scalar inputs.

const t = (
  name: string,
  shape: number[] | undefined,
  datatype: "FP32" | "INT64" = "FP32",
): ModelTensorInfo => ({
  name,
  datatype,
  typeName: datatype === "FP32" ? "float32" : "int64",
  shape,
});
const io = (inputs: ModelTensorInfo[], outputs: ModelTensorInfo[]): ModelIo => ({ inputs, outputs });

describe("state pairs found from the model", () => {
  it("Silero VAD: state -> stateN (the output's dims all dynamic), not input -> output", () => {
    const silero = io(
      [t("input", [-1, -1]), t("state", [2, -1, 128]), t("sr", [], "INT64")],
      [t("output", [-1, 1]), t("stateN", [-1, -1, -1])],
    );
    assert.deepEqual(findStatePairs("vad", silero), { pairs: "<<<state, stateN>>>", problem: undefined });
    assert.equal(findSharedInputs(silero), "sr");
  });

  it("the naming conventions: _out, Out, _new, _next, in -> out words", () => {
    const lstm = io(
      [
        t("x", [-1, 3]),
        t("h_in", [1, -1, 8]),
        t("c.in", [1, -1, 8]),
        t("cellIn", [1, -1, 4]),
        t("kv", [-1, 2]),
        t("past", [-1, 5]),
      ],
      [
        t("y", [-1, 3]),
        t("h_out", [1, -1, 8]),
        t("c.out", [1, -1, 8]),
        t("cellOut", [1, -1, 4]),
        t("kv_new", [-1, 2]),
        t("past_next", [-1, 5]),
      ],
    );
    assert.equal(
      findStatePairs("lstm", lstm).pairs,
      "<<<h_in, h_out>>> <<<c.in, c.out>>> <<<cellIn, cellOut>>> <<<kv, kv_new>>> <<<past, past_next>>>",
    );
    assert.equal(findSharedInputs(lstm), undefined);
  });

  it("refuses a model without a pair, and one where a tensor could pair twice", () => {
    const none = findStatePairs("m", io([t("x", [-1, 3])], [t("y", [-1, 3])]));
    assert.equal(none.pairs, undefined);
    assert.match(
      none.problem ?? "",
      /stateful model 'm' has no input\/output pair that looks like state.*--state_pairs/,
    );
    const mismatched = findStatePairs("m", io([t("state", [2, -1, 128])], [t("stateN", [2, -1, 64])]));
    assert.equal(mismatched.pairs, undefined, "shapes that disagree are no pair");
    const twice = findStatePairs("m", io([t("h", [-1, 4])], [t("hN", [-1, 4]), t("h_out", [-1, 4])]));
    assert.equal(twice.pairs, undefined);
    assert.match(
      twice.problem ?? "",
      /ambiguous: input 'h' could pair with more than one tensor \(h -> hN, h -> h_out\)/,
    );
  });
});
