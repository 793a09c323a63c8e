import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import protoLoader from "@grpc/proto-loader";
import {
  loadModelConfigRoot,
  MODEL_CONFIG_PROTO_PATH,
  modelConfigType,
  parseModelConfigFile,
  resolveModelConfig,
  toTritonJson,
} from "../../src/config/index.ts";
import { FIXTURES } from "./config-assertions.ts";
import { MODEL_IO } from "./model-io-fixtures.ts";

// Field numbers are wire facts: a sample of Triton's, including the late additions.
const TRITON_FIELD_NUMBERS: [string, string, number][] = [
  ["ModelConfig", "name", 1],
  ["ModelConfig", "platform", 2],
  ["ModelConfig", "version_policy", 3],
  ["ModelConfig", "max_batch_size", 4],
  ["ModelConfig", "input", 5],
  ["ModelConfig", "output", 6],
  ["ModelConfig", "instance_group", 7],
  ["ModelConfig", "default_model_filename", 8],
  ["ModelConfig", "cc_model_filenames", 9],
  ["ModelConfig", "metric_tags", 10],
  ["ModelConfig", "dynamic_batching", 11],
  ["ModelConfig", "optimization", 12],
  ["ModelConfig", "sequence_batching", 13],
  ["ModelConfig", "parameters", 14],
  ["ModelConfig", "ensemble_scheduling", 15],
  ["ModelConfig", "model_warmup", 16],
  ["ModelConfig", "backend", 17],
  ["ModelConfig", "model_operations", 18],
  ["ModelConfig", "model_transaction_policy", 19],
  ["ModelConfig", "batch_input", 20],
  ["ModelConfig", "batch_output", 21],
  ["ModelConfig", "model_repository_agents", 23],
  ["ModelConfig", "response_cache", 24],
  ["ModelConfig", "runtime", 25],
  ["ModelConfig", "model_metrics", 26],
  ["ModelInstanceGroup", "count", 2],
  ["ModelInstanceGroup", "kind", 4],
  ["ModelInstanceGroup", "passive", 7],
  ["ModelInstanceGroup", "host_policy", 9],
  ["ModelInput", "reshape", 5],
  ["ModelInput", "is_non_linear_format_io", 9],
  ["ModelOutput", "label_filename", 4],
  ["ModelOutput", "reshape", 5],
  ["ModelSequenceBatching", "max_sequence_idle_microseconds", 1],
  ["ModelSequenceBatching", "direct", 3],
  ["ModelSequenceBatching", "oldest", 4],
  ["ModelSequenceBatching", "state", 5],
  ["ModelSequenceBatching", "iterative_sequence", 6],
  ["ModelSequenceBatching.Control", "data_type", 4],
  ["ModelSequenceBatching.Control", "bool_false_true", 5],
  ["ModelSequenceBatching.InitialState", "name", 5],
  ["ModelSequenceBatching.State", "use_growable_memory", 7],
  ["ModelSequenceBatching.StrategyOldest", "preserve_ordering", 4],
  ["ModelDynamicBatching", "priority_queue_policy", 7],
  ["ModelOptimizationPolicy", "eager_batching", 8],
  ["ModelWarmup", "count", 4],
];

/** protobufjs writes unset messages as null; Triton's JSON leaves them out. */
function withoutNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutNulls);
  if (typeof value !== "object" || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).flatMap(([key, item]) => (item === null ? [] : [[key, withoutNulls(item)]])),
  );
}

describe("proto/model_config.proto", () => {
  it("loads with @grpc/proto-loader, as the gRPC frontend loads it", () => {
    const definition = protoLoader.loadSync(MODEL_CONFIG_PROTO_PATH, {
      keepCase: true,
      longs: String,
      enums: String,
    });
    assert.ok(definition["inference.ModelConfig"]);
    assert.ok(definition["inference.ModelSequenceBatching"]);
  });

  it("gives one shared protobufjs Root", () => {
    assert.equal(loadModelConfigRoot(), loadModelConfigRoot());
    assert.equal(modelConfigType().fullName, ".inference.ModelConfig");
  });

  it("uses Triton's field numbers", () => {
    const root = loadModelConfigRoot();
    for (const [message, field, id] of TRITON_FIELD_NUMBERS) {
      assert.equal(root.lookupType(`inference.${message}`).fields[field]?.id, id, `${message}.${field}`);
    }
    const wire = modelConfigType().encode({ max_batch_size: 8, backend: "x" }).finish();
    assert.deepEqual([...wire], [0x20, 0x08, 0x8a, 0x01, 0x01, 0x78]);
  });

  it("carries a resolved config's Triton JSON through protobuf and back (the gRPC ModelConfig answer)", async () => {
    const modelDir = join(FIXTURES, "implicit_state");
    const parsed = await parseModelConfigFile(join(modelDir, "config.pbtxt"));
    const { completed, tritonJson } = resolveModelConfig({
      parsed,
      modelName: "implicit_state",
      modelDir,
      modelIo: MODEL_IO.implicit_state,
    });
    const type = modelConfigType();
    const json = toTritonJson(completed, { int64: "string" });
    assert.equal(type.verify(type.fromObject(json)), null);
    const decoded = type.toObject(type.decode(type.encode(type.fromObject(json)).finish()), {
      longs: String,
      enums: String,
      defaults: true,
      arrays: true,
      objects: true,
      oneofs: false,
    });
    assert.deepEqual(withoutNulls(decoded), json);
    // Triton's HTTP form differs only in 64-bit integers being numbers.
    const batching = tritonJson.sequence_batching as { state: { dims: unknown[] }[] };
    assert.deepEqual(batching.state[1]?.dims, [-1, 2]);
  });
});
