import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { InferRequest } from "../../src/core/infer.ts";
import type { InputConfig, ModelConfig } from "../../src/core/model-config.ts";
import { validateRequest } from "../../src/core/request-validation.ts";
import type { Tensor } from "../../src/core/tensor.ts";
import { int32ModelConfig } from "./support/int32-model-config.ts";

// What a request becomes once checked against its model: the batch size every batched
// input agrees on, and the inputs as the model sees them, in the config's order.

const input = (name: string): InputConfig => ({
  name,
  datatype: "INT32",
  dims: [2],
  optional: false,
  allowRaggedBatch: false,
  shared: false,
});

/** A model batching up to 4 rows of two INT32 inputs, A then B, two values per row. */
const config: ModelConfig = { ...int32ModelConfig("pair", 4), inputs: [input("A"), input("B")] };

const tensor = (rows: number): Tensor => ({
  datatype: "INT32",
  shape: [rows, 2],
  data: new Int32Array(rows * 2),
});

const request = (inputs: [string, Tensor][]): InferRequest => ({
  id: "",
  inputs: new Map(inputs),
  outputs: undefined,
  parameters: {},
  sequence: undefined,
});

describe("request validation", () => {
  it("an input of no rows beside one of three is refused, whichever comes first", () => {
    for (const inputs of [
      [
        ["A", tensor(0)],
        ["B", tensor(3)],
      ],
      [
        ["B", tensor(3)],
        ["A", tensor(0)],
      ],
    ] as [string, Tensor][][]) {
      assert.throws(
        () => validateRequest(config, request(inputs)),
        /batch size does not match other inputs for 'pair'/,
        inputs.map(([name]) => name).join(", "),
      );
    }
    assert.throws(
      () =>
        validateRequest(
          config,
          request([
            ["A", tensor(0)],
            ["B", tensor(0)],
          ]),
        ),
      /inference request batch-size must be > 0 for 'pair'/,
    );
  });

  it("an output requested twice is refused, over every protocol (the check is the core's)", () => {
    const asked = (outputs: string[]): InferRequest => ({
      ...request([
        ["A", tensor(1)],
        ["B", tensor(1)],
      ]),
      outputs,
    });
    const output = config.outputs[0]!.name;
    assert.throws(
      () => validateRequest(config, asked([output, output])),
      (error: Error) => error.message === `output '${output}' is requested more than once`,
    );
    assert.deepEqual(validateRequest(config, asked([output])).outputNames, [output]);
  });

  it("gives the model its inputs in the config's order, whatever the client's", () => {
    const validated = validateRequest(
      config,
      request([
        ["B", tensor(2)],
        ["A", tensor(2)],
      ]),
    );
    assert.deepEqual([...validated.inputs.keys()], ["A", "B"]);
    assert.equal(validated.rows, 2);
    assert.equal(validated.batchKey, "A[2]|B[2]");
  });

  it("a shared input's value is its shape and its bytes: the same bytes in two shapes are batched apart", () => {
    const shared: ModelConfig = {
      ...int32ModelConfig("with_matrix", 4),
      inputs: [input("A"), { ...input("M"), dims: [-1, -1], shared: true }],
    };
    const keyOf = (shape: number[], values: number[]) =>
      validateRequest(
        shared,
        request([
          ["A", tensor(1)],
          ["M", { datatype: "INT32", shape, data: Int32Array.from(values) }],
        ]),
      ).batchKey;
    assert.notEqual(keyOf([1, 2], [1, 2]), keyOf([2, 1], [1, 2]));
    assert.notEqual(keyOf([1, 2], [1, 2]), keyOf([1, 2], [2, 1]));
    assert.equal(keyOf([2, 1], [1, 2]), keyOf([2, 1], [1, 2]));
  });
});
