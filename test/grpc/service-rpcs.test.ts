import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { status } from "@grpc/grpc-js";
import { callError, type Harness, startServer } from "./support/grpc-harness.ts";

// Every non-inference RPC of inference.GRPCInferenceService and grpc.health.v1.Health,
// over a real socket.

let h: Harness;
before(async () => {
  h = await startServer();
});
after(() => h.stop());

test("ServerLive and ServerReady follow the server's health", async () => {
  assert.deepEqual(await h.client.unary("ServerLive"), { live: true });
  assert.deepEqual(await h.client.unary("ServerReady"), { ready: true });
  h.context.ready = false;
  try {
    // proto3 may leave false out of the message: absent means false.
    assert.equal((await h.client.unary<{ ready?: boolean }>("ServerReady")).ready ?? false, false);
  } finally {
    h.context.ready = true;
  }
});

test("ModelReady is true for a ready model and version, false otherwise", async () => {
  const ready = async (request: object): Promise<boolean> =>
    (await h.client.unary<{ ready?: boolean }>("ModelReady", request)).ready ?? false;
  assert.equal(await ready({ name: "echo" }), true);
  assert.equal(await ready({ name: "echo", version: "1" }), true);
  assert.equal(await ready({ name: "echo", version: "2" }), false);
  assert.equal(await ready({ name: "nope" }), false);
});

test("ServerMetadata names the server and its extensions", async () => {
  assert.deepEqual(await h.client.unary("ServerMetadata"), {
    name: "seqserve",
    version: "0.1.0",
    extensions: ["sequence", "statistics"],
  });
});

test("ModelMetadata lists versions, platform and tensors with -1 for variable dims", async () => {
  assert.deepEqual(await h.client.unary("ModelMetadata", { name: "echo" }), {
    name: "echo",
    versions: ["1"],
    platform: "onnxruntime_onnx",
    inputs: [{ name: "INPUT0", datatype: "FP32", shape: ["-1", "16"] }],
    outputs: [{ name: "INPUT0", datatype: "FP32", shape: ["-1", "16"] }],
  });
  const error = await callError(h.client.unary("ModelMetadata", { name: "nope" }));
  assert.equal(error.code, status.NOT_FOUND);
  assert.equal(error.details, "Request for unknown model: 'nope' is not found");
});

test("ModelConfig returns the config JSON as the proto ModelConfig", async () => {
  type Config = { config: Record<string, unknown> & { sequence_batching: Record<string, unknown> } };
  const { config } = await h.client.unary<Config>("ModelConfig", { name: "echo" });
  assert.equal(config.name, "echo");
  assert.equal(config.platform, "onnxruntime_onnx");
  assert.equal(config.max_batch_size, 8);
  assert.deepEqual(config.input, [{ name: "INPUT0", data_type: "TYPE_FP32", dims: ["16"] }]);
  assert.deepEqual(config.output, [{ name: "OUTPUT0", data_type: "TYPE_FP32", dims: ["-1", "16"] }]);
  const [group] = config.instance_group as Array<Record<string, unknown>>;
  assert.deepEqual([group?.name, group?.count, group?.kind], ["echo_0", 2, "KIND_CPU"]);
  assert.deepEqual(config.parameters, { state_pairs: { string_value: "<<<h_in, h_out>>>" } });
  const sequence = config.sequence_batching;
  // uint64 fields survive exactly, even at 2^64-1.
  assert.equal(sequence.max_sequence_idle_microseconds, "18446744073709551615");
  const oldest = sequence.oldest as Record<string, unknown>;
  assert.deepEqual([oldest.max_candidate_sequences, oldest.preferred_batch_size], [4, [2, 4]]);
  assert.equal(sequence.strategy_choice, "oldest");
  const [control] = sequence.control_input as Array<{
    name: string;
    control: Array<Record<string, unknown>>;
  }>;
  assert.equal(control?.name, "START");
  assert.deepEqual(
    [control?.control[0]?.kind, control?.control[0]?.int32_false_true],
    ["CONTROL_SEQUENCE_START", [0, 1]],
  );
  const error = await callError(h.client.unary("ModelConfig", { name: "echo", version: "7" }));
  assert.equal(error.code, status.NOT_FOUND);
});

test("ModelStatistics reports durations and batch statistics", async () => {
  await h.client.unary("ModelInfer", {
    model_name: "echo",
    inputs: [{ name: "x", datatype: "INT32", shape: [1], contents: { int_contents: [1] } }],
  });
  type Stats = {
    model_stats: Array<{
      name: string;
      version: string;
      inference_count?: string;
      execution_count?: string;
      inference_stats: Record<string, { count?: string; ns?: string }>;
      batch_stats: Array<Record<string, unknown>>;
    }>;
  };
  const { model_stats } = await h.client.unary<Stats>("ModelStatistics", { name: "echo" });
  assert.equal(model_stats.length, 1);
  const stats = model_stats[0]!;
  assert.equal(stats.name, "echo");
  assert.equal(stats.version, "1");
  assert.ok(Number(stats.inference_count) >= 1);
  assert.ok(Number(stats.execution_count) >= 1);
  assert.equal(Number(stats.inference_stats.success?.count), Number(stats.inference_count));
  assert.equal(Number(stats.inference_stats.compute_infer?.ns), 3 * Number(stats.inference_count));
  assert.deepEqual(stats.batch_stats[0]?.batch_size, "1");
  const all = await h.client.unary<Stats>("ModelStatistics", {});
  assert.deepEqual(all.model_stats.map((s) => s.name).sort(), [
    "accumulate",
    "echo",
    "fail",
    "recorder",
    "slow",
  ]);
  assert.equal((await callError(h.client.unary("ModelStatistics", { name: "nope" }))).code, status.NOT_FOUND);
});

test("RepositoryIndex lists models, or only the ready ones", async () => {
  type Index = { models: Array<{ name: string; version?: string; state?: string; reason?: string }> };
  const all = await h.client.unary<Index>("RepositoryIndex", {});
  assert.deepEqual(all.models.at(-1), {
    name: "broken",
    version: "1",
    state: "UNAVAILABLE",
    reason: "no model file",
  });
  assert.ok(all.models.some((m) => m.name === "echo" && m.state === "READY"));
  const ready = await h.client.unary<Index>("RepositoryIndex", { ready: true });
  assert.ok(ready.models.every((m) => m.state === "READY"));
  assert.equal(ready.models.length, all.models.length - 1);
});

test("RepositoryModelLoad passes the config and file parameters; Unload unloads", async () => {
  assert.deepEqual(await h.client.unary("RepositoryModelLoad", { model_name: "echo" }), {});
  const config = JSON.stringify({ max_batch_size: 4 });
  await h.client.unary("RepositoryModelLoad", {
    model_name: "echo",
    parameters: { config: { string_param: config } },
  });
  assert.deepEqual(h.context.registry.loads, [
    { name: "echo", config: undefined },
    { name: "echo", config },
  ]);
  const badConfig = await callError(
    h.client.unary("RepositoryModelLoad", {
      model_name: "echo",
      parameters: { config: { bool_param: true } },
    }),
  );
  assert.equal(badConfig.code, status.INVALID_ARGUMENT);
  assert.match(badConfig.details, /'config'/);
  await h.client.unary("RepositoryModelLoad", {
    model_name: "echo",
    parameters: { config: { string_param: "{}" }, "file:1/model.onnx": { bytes_param: Buffer.from("x") } },
  });
  assert.deepEqual(h.context.registry.loads.at(-1), {
    name: "echo",
    config: "{}",
    files: ["1/model.onnx:x"],
  });
  const fileAsString = await callError(
    h.client.unary("RepositoryModelLoad", {
      model_name: "echo",
      parameters: { config: { string_param: "{}" }, "file:1/model.onnx": { string_param: "x" } },
    }),
  );
  assert.equal(fileAsString.code, status.INVALID_ARGUMENT);
  assert.equal(
    fileAsString.details,
    "invalid value type for load parameter 'file:1/model.onnx', expected bytes_param.",
  );
  assert.equal(
    (await callError(h.client.unary("RepositoryModelLoad", { model_name: "missing" }))).code,
    status.NOT_FOUND,
  );

  assert.deepEqual(await h.client.unary("RepositoryModelUnload", { model_name: "echo" }), {});
  assert.deepEqual(h.context.registry.unloads, ["echo"]);
  assert.equal(
    (await callError(h.client.unary("RepositoryModelUnload", { model_name: "nope" }))).code,
    status.NOT_FOUND,
  );
});

test("shared memory answers UNIMPLEMENTED, and so do trace and log settings where the server gives no control of them", async () => {
  for (const name of [
    "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister",
    "SystemSharedMemoryUnregister",
    "CudaSharedMemoryStatus",
    "CudaSharedMemoryRegister",
    "CudaSharedMemoryUnregister",
    "TraceSetting",
    "LogSettings",
  ]) {
    const error = await callError(h.client.unary(name, {}));
    assert.equal(error.code, status.UNIMPLEMENTED, name);
    assert.match(error.details, /not supported/, name);
  }
});

test("grpc.health.v1 Check answers SERVING while ready, NOT_SERVING otherwise", async () => {
  assert.deepEqual(await h.client.health("Check", {}), { status: "SERVING" });
  assert.deepEqual(await h.client.health("Check", { service: "inference.GRPCInferenceService" }), {
    status: "SERVING",
  });
  h.context.ready = false;
  try {
    assert.deepEqual(await h.client.health("Check", {}), { status: "NOT_SERVING" });
  } finally {
    h.context.ready = true;
  }
  const unknown = await callError(h.client.health("Check", { service: "some.Other" }));
  assert.equal(unknown.code, status.NOT_FOUND);
});

test("grpc.health.v1 Watch sends the current status first", async () => {
  const watch = h.client.watchHealth({});
  const first = await new Promise((resolve) => watch.once("data", resolve));
  assert.deepEqual(first, { status: "SERVING" });
  watch.on("error", () => {});
  watch.cancel();
});
