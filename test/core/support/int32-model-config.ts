import type { ModelConfig } from "../../../src/core/model-config.ts";

/**
 * The config the core tests' models share: INT32 `INPUT` to INT32 `OUTPUT`, one value per
 * row, one CPU instance; each model adds its scheduling.
 */
export function int32ModelConfig(name: string, maxBatchSize: number): ModelConfig {
  return {
    name,
    platform: "onnxruntime_onnx",
    backend: "onnxruntime",
    versionPolicy: { kind: "latest", numVersions: 1 },
    maxBatchSize,
    inputs: [
      {
        name: "INPUT",
        datatype: "INT32",
        dims: [1],
        optional: false,
        allowRaggedBatch: false,
        shared: false,
      },
    ],
    outputs: [{ name: "OUTPUT", datatype: "INT32", dims: [1] }],
    instanceGroups: [{ name, count: 1, kind: "KIND_CPU" }],
    defaultModelFilename: "model.onnx",
    parameters: {},
    warmup: [],
  };
}
