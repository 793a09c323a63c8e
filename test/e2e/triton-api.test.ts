import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { status } from "@grpc/grpc-js";
import { callError, TestClient } from "../grpc/support/grpc-harness.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Triton's answers on the API surface around inference that its clients and QA tests rely
// on: unloading an unknown model succeeds; statistics of a model or version that is not
// ready are an invalid request, and each entry carries response_stats and memory_usage;
// malformed requests are no failures of the model; loading a model no repository has is
// INTERNAL; a listed output is binary only if it says so; a version's metadata lists that
// version; the index keeps the versions of an unloaded model.

const EXAMPLES = fileURLToPath(new URL("../../examples/models/", import.meta.url));
const D16 = Array.from({ length: 16 }, (_, i) => i + 1);
const simpleInputs = [
  { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: D16 },
  { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: D16 },
];

async function post(
  url: string,
  body?: unknown,
): Promise<{ status: number; text: string; headers: Headers }> {
  const response = await fetch(url, {
    method: "POST",
    body: body === undefined ? undefined : JSON.stringify(body),
    headers: { "content-type": "application/json" },
  });
  return { status: response.status, text: await response.text(), headers: response.headers };
}

describe("Triton API parity", () => {
  let server: TestServer;
  let grpc: TestClient;
  before(async () => {
    server = await startTestServer(EXAMPLES, { modelControlMode: "explicit", loadModels: ["simple"] });
    grpc = new TestClient(server.grpcPort);
  });
  after(async () => {
    grpc.close();
    await server.stop();
  });

  // Triton: ModelRepositoryManager::LoadUnloadModel (core model_repository_manager.cc ~L826-895)
  // finds nothing to delete and returns Success; qa/L0_lifecycle/lifecycle_test.py:1541
  // "Unload non-existing model, nothing should happen" over HTTP and gRPC.
  it("unloading a model that does not exist succeeds (HTTP 200, gRPC OK)", async () => {
    const http = await post(`${server.url}/v2/repository/models/unknown_model/unload`, {
      parameters: { unload_dependents: false },
    });
    assert.equal(http.status, 200, http.text);
    await grpc.unary("RepositoryModelUnload", { model_name: "unknown_model" });
  });

  // Triton: TRITONSERVER_ServerModelStatistics (core tritonserver.cc ~L2939-2968) answers
  // INVALID_ARG "requested model '<m>' is not available" / "requested model version is not
  // available for model '<m>'" → HTTP 400, gRPC INVALID_ARGUMENT
  // (qa/L0_server_status/server_status_test.py:609 checks the message).
  it("statistics of an unknown model or version: 400 / INVALID_ARGUMENT", async () => {
    const unknown = await fetch(`${server.url}/v2/models/nope/stats`);
    assert.equal(unknown.status, 400);
    assert.deepEqual(await unknown.json(), { error: "requested model 'nope' is not available" });
    const version = await fetch(`${server.url}/v2/models/simple/versions/7/stats`);
    assert.equal(version.status, 400);
    assert.deepEqual(await version.json(), {
      error: "requested model version is not available for model 'simple'",
    });
    const error = await callError(grpc.unary("ModelStatistics", { name: "simple", version: "7" }));
    assert.equal(error.code, status.INVALID_ARGUMENT);
  });

  // Triton's gRPC ModelReady, ModelMetadata, ModelConfig and ModelStatistics read the
  // version with GetModelVersionFromString (common.cc), as its HTTP routes do.
  it("a version that is no number: Triton's words over gRPC too", async () => {
    const message =
      "failed to get model version from specified version string 'x', version should be an integral value > 0";
    for (const rpc of ["ModelReady", "ModelMetadata", "ModelConfig", "ModelStatistics"]) {
      const error = await callError(grpc.unary(rpc, { name: "simple", version: "x" }));
      assert.deepEqual([rpc, error.code, error.details], [rpc, status.INVALID_ARGUMENT, message]);
    }
  });

  // Triton: tritonserver.cc ~L3104-3111 always adds "response_stats" (object) and
  // "memory_usage" (array) to each model_stats entry.
  it("HTTP model_stats entries carry response_stats and memory_usage", async () => {
    const body = (await (await fetch(`${server.url}/v2/models/simple/stats`)).json()) as {
      model_stats: Record<string, unknown>[];
    };
    const entry = body.model_stats[0]!;
    assert.deepEqual(entry.response_stats, {});
    assert.deepEqual(entry.memory_usage, []);
  });

  // Triton: a request refused by InferenceRequest::PrepareForInference/Normalize (wrong
  // datatype, missing input, wrong shape) fails in TRITONSERVER_ServerInferAsync (core
  // tritonserver.cc ~L3278) before any statistics are kept: only requests that reached the
  // scheduler/backend count in inference_stats.fail (RespondIfError, infer_request.cc ~L462).
  it("requests refused by validation do not count in inference_stats.fail", async () => {
    const failCount = async (): Promise<number> => {
      const body = (await (await fetch(`${server.url}/v2/models/simple/stats`)).json()) as {
        model_stats: { inference_stats: { fail: { count: number } } }[];
      };
      return body.model_stats[0]!.inference_stats.fail.count;
    };
    const before = await failCount();
    const wrongType = [{ ...simpleInputs[0]!, datatype: "FP32" }, simpleInputs[1]!];
    assert.equal((await post(`${server.url}/v2/models/simple/infer`, { inputs: wrongType })).status, 400);
    assert.equal(
      (await post(`${server.url}/v2/models/simple/infer`, { inputs: [simpleInputs[0]] })).status,
      400,
    );
    assert.equal(await failCount(), before);
  });

  // Triton serves its repositories as one: a repository call that names one is refused,
  // UNSUPPORTED "'repository_name' specification is not supported", before anything else
  // (grpc_server.cc RepositoryIndex/ModelLoad/ModelUnload; http_server.cc
  // HandleRepositoryControl, whose path may name it: /v2/repository/<name>/…), while its
  // HTTP index ignores the name (HandleRepositoryIndex).
  it("repository calls that name a repository are refused (501 / UNIMPLEMENTED) and change nothing; HTTP's index ignores the name", async () => {
    const refused = "'repository_name' specification is not supported";
    for (const action of ["unload", "load"]) {
      const http = await post(`${server.url}/v2/repository/elsewhere/models/simple/${action}`, {});
      assert.equal(http.status, 501, http.text);
      assert.deepEqual(JSON.parse(http.text), { error: refused });
    }
    for (const rpc of ["RepositoryModelUnload", "RepositoryModelLoad"]) {
      const error = await callError(grpc.unary(rpc, { repository_name: "elsewhere", model_name: "simple" }));
      assert.deepEqual([error.code, error.details], [status.UNIMPLEMENTED, refused]);
    }
    const index = await callError(grpc.unary("RepositoryIndex", { repository_name: "elsewhere" }));
    assert.deepEqual([index.code, index.details], [status.UNIMPLEMENTED, refused]);
    const ready = await fetch(`${server.url}/v2/models/simple/ready`);
    assert.equal(ready.status, 200, "the refused unload left the model loaded");
    const named = await post(`${server.url}/v2/repository/elsewhere/index`, { ready: true });
    assert.equal(named.status, 200, named.text);
    assert.deepEqual(
      JSON.parse(named.text),
      JSON.parse((await post(`${server.url}/v2/repository/index`, { ready: true })).text),
    );
  });

  // Triton (grpc_server.cc RepositoryModelUnload): unload_dependents must be a bool_param,
  // checked before the model is unloaded.
  it("a gRPC unload whose unload_dependents is not a bool is refused and unloads nothing", async () => {
    const error = await callError(
      grpc.unary("RepositoryModelUnload", {
        model_name: "simple",
        parameters: { unload_dependents: { string_param: "yes" } },
      }),
    );
    assert.deepEqual(
      [error.code, error.details],
      [status.INVALID_ARGUMENT, "invalid value type for 'unload_dependents' parameter, expected bool_param."],
    );
    assert.equal((await fetch(`${server.url}/v2/models/simple/ready`)).status, 200);
  });

  // Triton: LoadUnloadModel returns INTERNAL "failed to load '<m>', failed to poll from model
  // repository" (model_repository_manager.cc ~L846-849) → HTTP 500 (qa/L0_http/http_test.py:396
  // expects 500 for this message), gRPC INTERNAL.
  it("loading a model that is not in the repository: 500 / INTERNAL", async () => {
    const http = await post(`${server.url}/v2/repository/models/unknown_model/load`);
    assert.equal(http.status, 500, http.text);
    const error = await callError(grpc.unary("RepositoryModelLoad", { model_name: "unknown_model" }));
    assert.equal(error.code, status.INTERNAL);
  });

  // Triton: an output listed in "outputs" without parameters.binary_data is JSON, whatever
  // binary_data_output says (http_server.cc CheckBinaryOutputData ~L966-981 defaults to false;
  // the request default only applies to outputs not listed, InferResponseAlloc ~L1262-1268).
  it("a listed output without binary_data comes back as JSON even with binary_data_output", async () => {
    const answer = await post(`${server.url}/v2/models/simple/infer`, {
      parameters: { binary_data_output: true },
      inputs: simpleInputs,
      outputs: [{ name: "OUTPUT0" }],
    });
    assert.equal(answer.status, 200);
    assert.equal(answer.headers.get("inference-header-content-length"), null);
    const body = JSON.parse(answer.text) as { outputs: { data?: number[] }[] };
    assert.deepEqual(
      body.outputs[0]!.data,
      D16.map((v) => 2 * v),
    );
  });
});

describe("Triton API parity: versions", () => {
  let server: TestServer;
  before(async () => {
    const { OnnxModelBuilder } = await import("../../tools/onnx/onnx-model-builder.ts");
    const plus = (v: number): Uint8Array =>
      new OnnxModelBuilder({ opset: 17 })
        .input("INPUT0", "INT32", [-1, 1])
        .output("OUTPUT0", "INT32", [-1, 1])
        .initializer("v", "INT32", [1], new Int32Array([v]))
        .node("Add", ["INPUT0", "v"], ["OUTPUT0"])
        .toBytes();
    server = await startTestServer(
      { all: { config: "version_policy: { all: { } }", onnx: { 1: plus(1), 2: plus(2) } } },
      { modelControlMode: "explicit", loadModels: ["all"] },
    );
  });
  after(() => server.stop());

  // Triton: TRITONSERVER_ServerModelMetadata (core tritonserver.cc ~L2839-2849): with a
  // version in the request, "versions" holds only that version.
  it("model metadata for a given version lists only that version", async () => {
    const body = (await (await fetch(`${server.url}/v2/models/all/versions/1`)).json()) as {
      versions: string[];
    };
    assert.deepEqual(body.versions, ["1"]);
  });

  // Triton: RepositoryIndex (model_repository_manager.cc ~L1247-1261) keeps each version's
  // entry after an unload: {name, version, state: "UNAVAILABLE", reason: "unloaded"}.
  it("the index keeps the versions of an unloaded model", async () => {
    assert.equal((await post(`${server.url}/v2/repository/models/all/unload`)).status, 200);
    const index = JSON.parse((await post(`${server.url}/v2/repository/index`)).text) as Record<
      string,
      string
    >[];
    assert.deepEqual(
      index.map((e) => [e.name, e.version, e.state]),
      [
        ["all", "1", "UNAVAILABLE"],
        ["all", "2", "UNAVAILABLE"],
      ],
    );
  });
});

describe("Triton API parity: the classification extension", () => {
  let server: TestServer;
  let grpc: TestClient;
  before(async () => {
    const { identityModel } = await import("../../tools/onnx/test-models.ts");
    server = await startTestServer({
      animals: {
        config: `max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]`,
        onnx: identityModel("FP32", [-1, 4]),
        files: { "labels.txt": "cat\ndog\nbird\nfish\n" },
      },
      flags: { onnx: identityModel("BOOL", [-1, 2]) },
    });
    grpc = new TestClient(server.grpcPort);
  });
  after(async () => {
    grpc.close();
    await server.stop();
  });

  const rows = [
    [0.1, 0.9, 0.3, 0.2],
    [0.5, 0.1, 0.2, 0.7],
  ];
  const expected = ["0.900000:1:dog", "0.300000:2:bird", "0.700000:3:fish", "0.500000:0:cat"];

  it("HTTP: each batch entry's top classes, with their labels, shape [batch, k]", async () => {
    const answer = await post(`${server.url}/v2/models/animals/infer`, {
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [2, 4], data: rows.flat() }],
      outputs: [{ name: "OUTPUT0", parameters: { classification: 2 } }],
    });
    assert.equal(answer.status, 200, answer.text);
    const body = JSON.parse(answer.text) as {
      outputs: { datatype: string; shape: number[]; data: string[] }[];
    };
    assert.deepEqual(body.outputs[0], { name: "OUTPUT0", datatype: "BYTES", shape: [2, 2], data: expected });
  });

  it("gRPC: the same classes, as BYTES raw contents", async () => {
    const response = await grpc.unary<{
      outputs: { datatype: string; shape: string[] }[];
      raw_output_contents: Buffer[];
    }>("ModelInfer", {
      model_name: "animals",
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [2, 4], contents: { fp32_contents: rows.flat() } }],
      outputs: [{ name: "OUTPUT0", parameters: { classification: { int64_param: 2 } } }],
    });
    assert.equal(response.outputs[0]?.datatype, "BYTES");
    assert.deepEqual(response.outputs[0]?.shape, ["2", "2"]);
    const raw = response.raw_output_contents[0]!;
    const strings: string[] = [];
    for (let at = 0; at < raw.length; at += 4 + raw.readUInt32LE(at)) {
      strings.push(raw.subarray(at + 4, at + 4 + raw.readUInt32LE(at)).toString());
    }
    assert.deepEqual(strings, expected);
  });

  it("an output whose datatype has no classes is refused before the model runs", async () => {
    const answer = await post(`${server.url}/v2/models/flags/infer`, {
      inputs: [{ name: "INPUT0", datatype: "BOOL", shape: [1, 2], data: [true, false] }],
      outputs: [{ name: "OUTPUT0", parameters: { classification: 1 } }],
    });
    assert.equal(answer.status, 400, answer.text);
    assert.deepEqual(JSON.parse(answer.text), {
      error: "class result not available for output 'OUTPUT0' due to unsupported type 'BOOL'",
    });
    const stats = (await (await fetch(`${server.url}/v2/models/flags/stats`)).json()) as {
      model_stats: { execution_count: number }[];
    };
    assert.equal(stats.model_stats[0]?.execution_count, 0);
  });
});
