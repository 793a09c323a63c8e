import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseModelConfigText, resolveModelConfig } from "../../src/config/index.ts";
import type { InferRequest } from "../../src/core/infer.ts";
import type { InputConfig, ModelConfig } from "../../src/core/model-config.ts";
import { checkInputDescription, validateRequest } from "../../src/core/request-validation.ts";
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

describe("request validation of a sequence model, in Triton's order", () => {
  // A model whose CORRID is a uint64, batching up to 4 rows of one INT32 value.
  const sequenceConfig = resolveModelConfig({
    parsed: parseModelConfigText(
      `max_batch_size: 4
       input { name: "INPUT" data_type: TYPE_INT32 dims: [1] }
       output { name: "OUTPUT" data_type: TYPE_INT32 dims: [1] }
       sequence_batching { control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] } ] }`,
      { file: "seq/config.pbtxt" },
    ),
    modelName: "seq",
    modelDir: "seq",
  }).config;
  const twoRows: Tensor = { datatype: "INT32", shape: [2, 1], data: new Int32Array(2) };

  it("the correlation id's type before the sequence batcher's batch of one, for inline and shared-memory inputs", () => {
    // Shared memory's check before its bytes are read leaves the batch of one to the request's.
    checkInputDescription(sequenceConfig, "r1", "INPUT", twoRows);
    const withId = (id: string | bigint): InferRequest => ({
      ...request([["INPUT", twoRows]]),
      id: "r1",
      sequence: { id, start: true, end: false, timeoutUs: undefined },
    });
    assert.throws(() => validateRequest(sequenceConfig, withId("call-7")), {
      message:
        "[request id: r1] sequence batching control 'CORRID' data-type is 'BYTES', but model 'seq' expects 'UINT64'",
    });
    assert.throws(() => validateRequest(sequenceConfig, withId(7n)), {
      message:
        "inference request to model 'seq' must specify batch-size 1 due to requirements of sequence batcher",
    });
  });
});
