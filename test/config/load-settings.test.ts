import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  parseModelConfigFile,
  parseModelConfigText,
  readLoadSettings,
  resolveModelConfig,
} from "../../src/config/index.ts";
import { assertConfigError, FIXTURES } from "./config-assertions.ts";

describe("load settings (before the model file is opened)", () => {
  it("gives Triton's defaults for a model without a config", () => {
    assert.deepEqual(readLoadSettings(undefined, "vad", "models/vad"), {
      name: "vad",
      backend: "onnxruntime",
      defaultModelFilename: "model.onnx",
      versionPolicy: { kind: "latest", numVersions: 1 },
      instanceGroups: [{ name: "vad", count: 2, kind: "KIND_CPU" }],
      instanceCount: 2,
      graphOptimizationLevel: undefined,
      graphOptimization: "all",
      parameters: {},
    });
  });

  it("reads file name, versions, instances, graph level and parameters from an unresolved config", async () => {
    const parsed = await parseModelConfigFile(join(FIXTURES, "full_options", "config.pbtxt"));
    const settings = readLoadSettings(parsed, "full_options", join(FIXTURES, "full_options"));
    assert.equal(settings.defaultModelFilename, "classifier.onnx");
    assert.deepEqual(settings.versionPolicy, { kind: "specific", versions: [1, 3] });
    assert.equal(settings.instanceCount, 4);
    assert.equal(settings.graphOptimizationLevel, 1);
    assert.equal(settings.graphOptimization, "extended");
    assert.deepEqual(settings.parameters, { intra_op_thread_count: "1", shared_inputs: "SCALE" });
    assert.ok(Object.isFrozen(settings));
    // The parsed config itself is left as read, ready for resolution.
    assert.equal(Array.isArray(parsed.message.instance_group) && parsed.message.instance_group.length, 2);
    assert.equal((parsed.message.instance_group as Record<string, unknown>[])[1]?.name, undefined);
  });

  it("keeps a parameter named __proto__, in the load settings and in the resolved config", () => {
    const parsed = parseModelConfigText(
      'input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }\noutput { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }\n' +
        'parameters { key: "__proto__" value { string_value: "x" } }\n' +
        'parameters { key: "b" value { string_value: "y" } }',
      { file: "m/config.pbtxt" },
    );
    // A computed key: a plain `__proto__:` in a literal would set the prototype instead.
    const expected = { ["__proto__"]: "x", b: "y" };
    assert.deepEqual(readLoadSettings(parsed, "m", "models/m").parameters, expected);
    const resolved = resolveModelConfig({ parsed, modelName: "m", modelDir: "models/m", modelIo: undefined });
    assert.deepEqual(resolved.config.parameters, expected);
    assert.deepEqual(resolved.tritonJson.parameters, {
      ["__proto__"]: { string_value: "x" },
      b: { string_value: "y" },
    });
  });

  it("takes an instance count below 1 as the default, two on the CPU for ONNX Runtime, as Triton does", () => {
    const parsed = parseModelConfigText(
      'input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }\noutput { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }\n' +
        "instance_group [ { count: 0 kind: KIND_CPU }, { count: -3 kind: KIND_CPU }, { count: 2 kind: KIND_CPU } ]",
      { file: "m/config.pbtxt" },
    );
    assert.equal(readLoadSettings(parsed, "m", "models/m").instanceCount, 6);
    const resolved = resolveModelConfig({ parsed, modelName: "m", modelDir: "models/m", modelIo: undefined });
    assert.deepEqual(
      resolved.config.instanceGroups.map((group) => group.count),
      [2, 2, 2],
    );
    assert.deepEqual(
      (resolved.tritonJson.instance_group as { count: number }[]).map((group) => group.count),
      [2, 2, 2],
    );
    // The stateful backend's (and model code's) default is one, as Triton's for any other backend.
    const stateful = parseModelConfigText(
      'backend: "stateful"\ninput { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }\noutput { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }',
      { file: "s/config.pbtxt" },
    );
    assert.equal(readLoadSettings(stateful, "s", "models/s").instanceCount, 1);
  });

  it("counts a KIND_GPU group's instances on each GPU it lists, as Triton starts them, and runs them all on the CPU", () => {
    const parsed = parseModelConfigText(
      'input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }\noutput { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }\n' +
        "instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1, 3 ] }, { count: 1 kind: KIND_GPU gpus: [ 0 ] }, { kind: KIND_GPU } ]",
      { file: "m/config.pbtxt" },
    );
    assert.equal(readLoadSettings(parsed, "m", "models/m").instanceCount, 8);
    const resolved = resolveModelConfig({ parsed, modelName: "m", modelDir: "models/m", modelIo: undefined });
    assert.deepEqual(resolved.config.instanceGroups, [
      { name: "m_0", count: 6, kind: "KIND_CPU" },
      { name: "m_1", count: 1, kind: "KIND_CPU" },
      { name: "m_2", count: 1, kind: "KIND_CPU" },
    ]);
    // The config the server answers with describes what runs.
    const groups = resolved.tritonJson.instance_group as { count: number; kind: string; gpus: unknown[] }[];
    assert.deepEqual(
      groups.map((g) => [g.count, g.kind, g.gpus]),
      [
        [6, "KIND_CPU", []],
        [1, "KIND_CPU", []],
        [1, "KIND_CPU", []],
      ],
    );
    assert.ok(
      resolved.notes.includes(
        "instance group 'm_0' asks for KIND_GPU; seqserve runs it on the CPU as 6 instances (count 2 on each of its 3 GPUs, as in Triton)",
      ),
      resolved.notes.join("\n"),
    );
    assert.ok(resolved.notes.includes("instance group 'm_1' asks for KIND_GPU; seqserve runs it on the CPU"));
  });

  it("maps graph levels the way Triton's ONNX Runtime backend does", () => {
    const level = (n: number) =>
      readLoadSettings(
        parseModelConfigText(`optimization { graph { level: ${n} } }`, { file: "m/config.pbtxt" }),
        "m",
        "m",
      ).graphOptimization;
    assert.deepEqual(
      [level(-1), level(0), level(1), level(2), level(3)],
      ["basic", "all", "extended", "disabled", "all"],
    );
  });

  it("reports what it reads wrongly, at its line", () => {
    assertConfigError(
      () =>
        readLoadSettings(
          parseModelConfigText('name: "m"\ndefault_model_filename: "../escape.onnx"', {
            file: "m/config.pbtxt",
          }),
          "m",
          "m",
        ),
      {
        file: "m/config.pbtxt",
        line: 2,
        includes: "default_model_filename '../escape.onnx' must name a file inside the version directory",
      },
    );
  });
});
