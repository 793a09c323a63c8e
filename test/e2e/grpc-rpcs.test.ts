import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { status } from "@grpc/grpc-js";
import type { ModelInferResponseMessage } from "../../src/frontends/grpc/messages.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { callError, TestClient } from "../grpc/support/grpc-harness.ts";
import { accumulatorRequest, int32Output, rawBytes, StreamCall } from "../support/grpc-stream-call.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Every RPC of inference.GRPCInferenceService, and grpc.health.v1 Check, over a real
// socket against the real server: its model repository (explicit model control), its
// schedulers and ONNX Runtime. One short test each; test/grpc covers the details.

const SILERO_ONNX = new URL("../../examples/models/silero_vad/1/model.onnx", import.meta.url);
const SILERO_CONFIG = new URL("../../examples/models/silero_vad_stateful/config.pbtxt", import.meta.url);

const ACC_CONFIG = `
name: "acc"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "STATE" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
`;

const identityConfig = (name: string): string => `
name: "${name}"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
`;

let server: TestServer;
let client: TestClient;
before(async () => {
  server = await startTestServer(
    {
      acc: { config: ACC_CONFIG, onnx: accumulatorModel() },
      ident: { config: identityConfig("ident"), onnx: identityModel("FP32", [-1]) },
      silero_vad_stateful: { config: readFileSync(SILERO_CONFIG, "utf8"), onnx: readFileSync(SILERO_ONNX) },
      // In the repository, not loaded at start: RepositoryModelLoad brings it up.
      later: { config: identityConfig("later"), onnx: identityModel("FP32", [-1]) },
    },
    { modelControlMode: "explicit", loadModels: ["acc", "ident", "silero_vad_stateful"], exitTimeoutSecs: 1 },
  );
  client = new TestClient(server.grpcPort);
});
after(async () => {
  client.close();
  await server.stop();
});

/** Tests that wait for the server fail after this instead of hanging. */
const WAIT = { timeout: 60_000 };

const ready = async (name: string, version?: string): Promise<boolean> =>
  (await client.unary<{ ready?: boolean }>("ModelReady", { name, version })).ready ?? false;

/** A ModelInfer request to an identity model: FP32 [n], sent raw. */
const identityRequest = (model: string, values: Float32Array): object => ({
  model_name: model,
  inputs: [{ name: "INPUT0", datatype: "FP32", shape: [values.length] }],
  raw_input_contents: [rawBytes(values)],
});

const floats = (response: ModelInferResponseMessage): Float32Array => {
  const raw = Buffer.from(response.raw_output_contents?.[0] ?? []);
  return new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
};

test("ServerLive and ServerReady", WAIT, async () => {
  assert.deepEqual(await client.unary("ServerLive"), { live: true });
  assert.deepEqual(await client.unary("ServerReady"), { ready: true });
});

test("grpc.health.v1 Check answers SERVING for the server and the inference service", WAIT, async () => {
  assert.deepEqual(await client.health("Check", {}), { status: "SERVING" });
  assert.deepEqual(await client.health("Check", { service: "inference.GRPCInferenceService" }), {
    status: "SERVING",
  });
});

test("ModelReady follows what the repository has loaded", WAIT, async () => {
  assert.equal(await ready("silero_vad_stateful"), true);
  assert.equal(await ready("silero_vad_stateful", "1"), true);
  assert.equal(await ready("silero_vad_stateful", "2"), false);
  assert.equal(await ready("later"), false);
  assert.equal(await ready("nope"), false);
});

test("ServerMetadata lists the extensions, sequence among them", WAIT, async () => {
  const metadata = await client.unary<{ name: string; version: string; extensions: string[] }>(
    "ServerMetadata",
  );
  assert.equal(metadata.name, "seqserve");
  assert.match(metadata.version, /^\d+\.\d+\.\d+/);
  assert.ok(metadata.extensions.includes("sequence"));
  assert.ok(metadata.extensions.includes("model_repository"));
});

test(
  "ModelMetadata describes Silero VAD as served: the state is the server's, sr is unbatched",
  WAIT,
  async () => {
    assert.deepEqual(await client.unary("ModelMetadata", { name: "silero_vad_stateful" }), {
      name: "silero_vad_stateful",
      versions: ["1"],
      platform: "onnxruntime_onnx",
      inputs: [
        { name: "input", datatype: "FP32", shape: ["-1", "512"] },
        { name: "sr", datatype: "INT64", shape: [] },
      ],
      outputs: [{ name: "output", datatype: "FP32", shape: ["-1", "1"] }],
    });
    const error = await callError(client.unary("ModelMetadata", { name: "nope" }));
    assert.equal(error.code, status.NOT_FOUND);
  },
);

test("ModelConfig returns the completed config, Silero's sequence_batching included", WAIT, async () => {
  type Config = { config: Record<string, unknown> & { sequence_batching: Record<string, unknown> } };
  const { config } = await client.unary<Config>("ModelConfig", { name: "silero_vad_stateful" });
  assert.equal(config.name, "silero_vad_stateful");
  assert.equal(config.max_batch_size, 64);
  // Completed by the server: not in config.pbtxt.
  assert.equal(config.platform, "onnxruntime_onnx");
  assert.equal(config.default_model_filename, "model.onnx");
  const [group] = config.instance_group as Array<Record<string, unknown>>;
  assert.deepEqual([group?.name, group?.count, group?.kind], ["silero_vad_stateful_0", 1, "KIND_CPU"]);
  const sequencing = config.sequence_batching;
  assert.equal(sequencing.strategy_choice, "oldest");
  assert.equal(sequencing.max_sequence_idle_microseconds, "60000000");
  const oldest = sequencing.oldest as Record<string, unknown>;
  assert.deepEqual([oldest.max_candidate_sequences, oldest.preferred_batch_size], [1024, [64]]);
  assert.deepEqual((config.parameters as Record<string, unknown>).state_pairs, {
    string_value: "<<<state, stateN>>>",
  });
});

test("ModelInfer runs a model and answers raw outputs", WAIT, async () => {
  const values = new Float32Array([1.5, -2, 3.25, 0]);
  const response = await client.unary<ModelInferResponseMessage>("ModelInfer", {
    ...identityRequest("ident", values),
    id: "unary-1",
  });
  assert.equal(response.model_name, "ident");
  assert.equal(response.model_version, "1");
  assert.equal(response.id, "unary-1");
  const [output] = response.outputs ?? [];
  assert.deepEqual([output?.name, output?.datatype, output?.shape], ["OUTPUT0", "FP32", ["4"]]);
  assert.deepEqual(floats(response), values);
  const unknown = await callError(client.unary("ModelInfer", identityRequest("nope", values)));
  assert.equal(unknown.code, status.NOT_FOUND);
});

test("ModelStreamInfer answers a stateless and a stateful request on one stream", WAIT, async () => {
  const call = new StreamCall(client);
  const values = new Float32Array([4, 5]);
  const stateless = await call.send(identityRequest("ident", values));
  assert.deepEqual(floats(stateless.infer_response ?? {}), values);
  assert.equal(
    int32Output(await call.send(accumulatorRequest("acc", 6, { id: 5, start: true, end: true }))),
    6,
  );
  assert.equal((await call.end()).code, status.OK);
});

test("ModelStatistics counts the requests and executions that ran", WAIT, async () => {
  type Stats = {
    model_stats: Array<{
      name: string;
      version: string;
      inference_count?: string;
      execution_count?: string;
      inference_stats: Record<string, { count?: string; ns?: string }>;
      batch_stats: Array<{ batch_size: string; compute_infer: { count?: string } }>;
    }>;
  };
  for (let k = 0; k < 3; k++) {
    const response = await client.unary<ModelInferResponseMessage>(
      "ModelInfer",
      accumulatorRequest("acc", k + 1, { id: 9, start: k === 0, end: k === 2 }),
    );
    assert.equal(Buffer.from(response.raw_output_contents?.[0] ?? []).readInt32LE(0), [1, 3, 6][k]);
  }
  // The accumulator ran only here (and once in the stream test above, which may run first).
  const { model_stats } = await client.unary<Stats>("ModelStatistics", { name: "acc" });
  assert.equal(model_stats.length, 1);
  const stats = model_stats[0]!;
  assert.deepEqual([stats.name, stats.version], ["acc", "1"]);
  const inferences = Number(stats.inference_count);
  assert.ok(inferences === 3 || inferences === 4, `inference_count ${stats.inference_count}`);
  assert.equal(Number(stats.inference_stats.success?.count), inferences);
  assert.equal(Number(stats.inference_stats.fail?.count ?? 0), 0);
  // Requests sent one after the other run one execution each.
  assert.equal(Number(stats.execution_count), inferences);
  const executions = stats.batch_stats.reduce((n, b) => n + Number(b.compute_infer.count ?? 0), 0);
  assert.equal(executions, inferences);
  assert.ok(Number(stats.inference_stats.compute_infer?.ns) > 0);
  const all = await client.unary<Stats>("ModelStatistics", {});
  assert.deepEqual(all.model_stats.map((s) => s.name).sort(), ["acc", "ident", "silero_vad_stateful"]);
});

test("RepositoryIndex lists every model of the repository, loaded or not", WAIT, async () => {
  type Index = { models: Array<{ name: string; version?: string; state?: string; reason?: string }> };
  const all = await client.unary<Index>("RepositoryIndex", {});
  const byName = new Map(all.models.map((m) => [m.name, m]));
  assert.deepEqual([...byName.keys()].sort(), ["acc", "ident", "later", "silero_vad_stateful"]);
  // proto3: an empty string and an absent one are the same.
  const ident = byName.get("ident");
  assert.deepEqual([ident?.version, ident?.state, ident?.reason ?? ""], ["1", "READY", ""]);
  // Never loaded: its name alone, as Triton lists a model its repository holds but never loaded.
  const later = byName.get("later");
  assert.deepEqual([later?.version ?? "", later?.state ?? "", later?.reason ?? ""], ["", "", ""]);
  const readyOnly = await client.unary<Index>("RepositoryIndex", { ready: true });
  assert.deepEqual(readyOnly.models.map((m) => m.name).sort(), ["acc", "ident", "silero_vad_stateful"]);
});

test("RepositoryModelLoad and RepositoryModelUnload in explicit mode", WAIT, async () => {
  const values = new Float32Array([7, 8, 9]);
  // Not loaded (yet), as unloaded below: Triton's NOT_FOUND, not UNAVAILABLE to retry.
  assert.equal(
    (await callError(client.unary("ModelInfer", identityRequest("later", values)))).code,
    status.NOT_FOUND,
  );
  assert.deepEqual(await client.unary("RepositoryModelLoad", { model_name: "later" }), {});
  assert.equal(await ready("later"), true);
  const response = await client.unary<ModelInferResponseMessage>(
    "ModelInfer",
    identityRequest("later", values),
  );
  assert.deepEqual(floats(response), values);

  assert.deepEqual(await client.unary("RepositoryModelUnload", { model_name: "later" }), {});
  assert.equal(await ready("later"), false);
  const unloaded = await callError(client.unary("ModelInfer", identityRequest("later", values)));
  assert.equal(unloaded.code, status.NOT_FOUND);
  assert.match(unloaded.details, /Request for unknown model: 'later' has no available versions/);
  type Index = { models: Array<{ name: string; state?: string; reason?: string }> };
  const index = await client.unary<Index>("RepositoryIndex", {});
  const later = index.models.find((m) => m.name === "later");
  assert.deepEqual([later?.state, later?.reason], ["UNAVAILABLE", "unloaded"]);
  // A model no repository has: Triton's "failed to poll from model repository", INTERNAL.
  const missing = await callError(client.unary("RepositoryModelLoad", { model_name: "missing" }));
  assert.equal(missing.code, status.INTERNAL);
});
