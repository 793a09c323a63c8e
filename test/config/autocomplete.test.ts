import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  DEFAULT_MAX_BATCH_SIZE,
  parseModelConfigText,
  type ResolvedModelConfig,
  resolveModelConfig,
} from "../../src/config/index.ts";
import type { ModelIo } from "../../src/core/model-io.ts";
import { assertConfigError } from "./config-assertions.ts";
import { MODEL_IO, tensor } from "./model-io-fixtures.ts";

const FILE = "models/m/config.pbtxt";

function resolve(
  text: string | undefined,
  modelIo: ModelIo | undefined,
  strict = false,
): ResolvedModelConfig {
  const parsed = text === undefined ? undefined : parseModelConfigText(text, { file: FILE });
  return resolveModelConfig({ parsed, modelName: "m", modelDir: "models/m", modelIo, strict });
}

describe("completing a config from the model file", () => {
  it("fills a missing config like Triton's ONNX Runtime backend: default max batch size and dynamic batching", () => {
    assert.equal(DEFAULT_MAX_BATCH_SIZE, 4);
    const { config, tritonJson } = resolve(undefined, MODEL_IO.add_sub);
    assert.equal(config.name, "m");
    assert.equal(config.maxBatchSize, 4);
    assert.deepEqual(
      config.inputs.map((i) => [i.name, i.datatype, i.dims]),
      [
        ["INPUT0", "INT32", [16]],
        ["INPUT1", "INT32", [16]],
      ],
    );
    assert.deepEqual(config.dynamicBatching, {
      preferredBatchSizes: [4],
      maxQueueDelayUs: 0,
      preserveOrdering: false,
      priorityLevels: 0,
      defaultPriorityLevel: 0,
      defaultQueuePolicy: { maxQueueSize: 0 },
      priorityQueuePolicies: new Map(),
    });
    assert.equal((tritonJson.input as { data_type: string }[])[0]?.data_type, "TYPE_INT32");
  });

  it("leaves batching off when a tensor has no variable first dimension", () => {
    const modelIo = { inputs: [tensor("x", "FP32", [1, 3])], outputs: [tensor("y", "FP32", [-1, 3])] };
    const { config } = resolve(undefined, modelIo);
    assert.equal(config.maxBatchSize, 0);
    assert.equal(config.dynamicBatching, undefined);
    assert.deepEqual(config.inputs[0]?.dims, [1, 3]);
    assert.deepEqual(config.outputs[0]?.dims, [-1, 3]);
  });

  it("keeps an explicit max_batch_size and completes the lists without the batch dimension", () => {
    const { config } = resolve('name: "m"\nmax_batch_size: 8', MODEL_IO.add_sub);
    assert.equal(config.maxBatchSize, 8);
    assert.deepEqual(config.outputs[1]?.dims, [16]);
    assert.deepEqual(config.dynamicBatching?.preferredBatchSizes, [8]);
  });

  it("keeps an explicit max_batch_size of 0 (configs written for seqserve say 'no batching' with it; Triton's backend reads it as unset)", () => {
    const { config } = resolve("max_batch_size: 0", MODEL_IO.add_sub);
    assert.equal(config.maxBatchSize, 0);
    assert.deepEqual(config.inputs[0]?.dims, [-1, 16]);
  });

  it("refuses a max_batch_size the model cannot batch", () => {
    const modelIo = { inputs: [tensor("x", "FP32", [3])], outputs: [tensor("y", "FP32", [3])] };
    assertConfigError(() => resolve("\nmax_batch_size: 2", modelIo), {
      file: FILE,
      line: 2,
      includes:
        "autofill failed for model 'm': model does not support batching while non-zero max_batch_size is specified",
    });
  });

  it("gives a scalar model tensor Triton's dims [1], and the model its scalar", () => {
    const modelIo = { inputs: [tensor("x", "FP32", [])], outputs: [tensor("y", "FP32", [-1])] };
    const { config, tritonJson } = resolve(undefined, modelIo);
    assert.equal(config.maxBatchSize, 0);
    assert.deepEqual(config.inputs[0], {
      name: "x",
      datatype: "FP32",
      dims: [1],
      reshape: [],
      optional: false,
      allowRaggedBatch: false,
      shared: false,
    });
    assert.equal(
      (tritonJson.input as Record<string, unknown>[])[0]?.reshape,
      undefined,
      "Triton writes no empty reshape without batching",
    );
  });

  it("completes a listed tensor's missing data_type and dims", () => {
    const { config } = resolve(
      'max_batch_size: 8\ninput { name: "INPUT0" }\ninput { name: "INPUT1" data_type: TYPE_INT32 }\noutput { name: "OUTPUT0" }',
      MODEL_IO.add_sub,
    );
    assert.deepEqual(
      config.inputs.map((i) => [i.datatype, i.dims]),
      [
        ["INT32", [16]],
        ["INT32", [16]],
      ],
    );
    assert.deepEqual(config.outputs, [{ name: "OUTPUT0", datatype: "INT32", dims: [16] }]);
  });

  it("leaves state and control tensors out of the completed lists, and sees the state's batch axis", () => {
    const { config } = resolve(
      `sequence_batching { oldest { max_candidate_sequences: 8 } }
       parameters { key: "state_pairs" value { string_value: "<<<state, stateN>>>" } }
       parameters { key: "shared_inputs" value { string_value: "sr" } }`,
      MODEL_IO.silero_vad,
    );
    assert.equal(config.maxBatchSize, 4);
    assert.equal(config.dynamicBatching, undefined, "sequence batching is already the scheduler");
    assert.deepEqual(
      config.inputs.map((i) => [i.name, i.dims, i.reshape, i.shared]),
      [
        ["input", [-1], undefined, false],
        ["sr", [1], [], true],
      ],
    );
    assert.deepEqual(
      config.outputs.map((o) => o.name),
      ["output"],
    );
    assert.equal(config.sequenceBatching?.states[0]?.batchAxis, 1);
  });

  it("refuses a model tensor whose type onnxruntime-node cannot carry, naming it", () => {
    const modelIo = {
      inputs: [tensor("x", undefined, [-1, 4], "bfloat16")],
      outputs: [tensor("y", "FP32", [-1, 4])],
    };
    assertConfigError(() => resolve(undefined, modelIo), {
      file: "models/m",
      includes:
        "input 'x' of model 'm' has type bfloat16, which ONNX Runtime's Node.js API cannot feed or fetch",
    });
  });

  it("needs the model file to complete a config without inputs", () => {
    assertConfigError(() => resolve('name: "m"', undefined), {
      file: FILE,
      includes: "lists no inputs, and the model file has not been read to complete it",
    });
  });
});

describe("strict mode", () => {
  it("requires a configuration file", () => {
    assertConfigError(() => resolve(undefined, MODEL_IO.add_sub, true), {
      file: "models/m",
      includes: "model 'm' has no configuration file, which strict mode requires",
    });
  });

  it("requires the inputs and outputs to be listed", () => {
    assertConfigError(
      () => resolve('input { name: "INPUT0" data_type: TYPE_INT32 dims: [16] }', MODEL_IO.add_sub, true),
      {
        file: FILE,
        line: 1,
        includes: "lists no outputs, and in strict mode the configuration is not completed",
      },
    );
  });

  it("completes nothing: a missing data_type is an error", () => {
    assertConfigError(
      () =>
        resolve(
          'max_batch_size: 8\ninput { name: "INPUT0" dims: [16] }\ninput { name: "INPUT1" data_type: TYPE_INT32 dims: [16] }\noutput { name: "OUTPUT0" data_type: TYPE_INT32 dims: [16] }',
          MODEL_IO.add_sub,
          true,
        ),
      { file: FILE, line: 2, includes: "model input 'INPUT0' must specify 'data_type' for model 'm'" },
    );
  });

  it("accepts a complete config, still checked against the model", () => {
    const { config } = resolve(
      'max_batch_size: 8\ninput { name: "INPUT0" data_type: TYPE_INT32 dims: [16] }\ninput { name: "INPUT1" data_type: TYPE_INT32 dims: [16] }\noutput { name: "OUTPUT0" data_type: TYPE_INT32 dims: [16] }',
      MODEL_IO.add_sub,
      true,
    );
    assert.equal(config.dynamicBatching, undefined);
    assert.equal(config.inputs.length, 2);
  });
});
