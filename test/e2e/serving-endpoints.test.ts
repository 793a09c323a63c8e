import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import type { ModelStatisticsSnapshot } from "../../src/core/statistics.ts";
import { addSubModel, identityModel } from "../../tools/onnx/test-models.ts";
import { getJson, infer, outputData, postJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { difference, errorOf, rowsOf, simpleConfig, simpleInputs, sum } from "./support/serving.ts";

// Every KServe v2 HTTP endpoint of a real server over a real socket, with real ONNX models:
// "simple" (a config.pbtxt with dynamic batching) and "auto" (no config.pbtxt at all: the
// server completes its configuration from the ONNX model).

const packageVersion = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
    version: string;
  }
).version;

let server: TestServer;
before(async () => {
  server = await startTestServer({
    simple: {
      config: simpleConfig("simple", { dynamicBatching: "max_queue_delay_microseconds: 100" }),
      onnx: addSubModel("INT32", [-1, 16]),
    },
    auto: { onnx: identityModel("FP32", [-1, 4]) },
  });
});
after(() => server.stop());

const statsOf = async (path: string): Promise<ModelStatisticsSnapshot[]> => {
  const answer = await getJson(`${server.url}${path}`);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer.body.model_stats as ModelStatisticsSnapshot[];
};

describe("server endpoints", () => {
  it("GET /v2 names the server, its version and the extensions it implements", async () => {
    const answer = await getJson(`${server.url}/v2`);
    assert.equal(answer.status, 200);
    assert.equal(answer.body.name, "seqserve");
    assert.equal(answer.body.version, packageVersion);
    for (const extension of [
      "sequence",
      "binary_tensor_data",
      "classification",
      "model_repository",
      "statistics",
      "model_configuration",
      "schedule_policy",
      "parameters",
    ]) {
      assert.ok((answer.body.extensions as string[]).includes(extension), extension);
    }
  });

  it("GET /v2/health/live and /v2/health/ready answer 200 with an empty body", async () => {
    for (const path of ["/v2/health/live", "/v2/health/ready"]) {
      const response = await fetch(`${server.url}${path}`);
      assert.equal(response.status, 200, path);
      assert.equal(await response.text(), "", path);
    }
  });

  it("an unknown path is a 404 naming the route", async () => {
    const answer = await getJson(`${server.url}/v2/nothing/here`);
    assert.equal(answer.status, 404);
    assert.equal(errorOf(answer), "Not Found: no route for GET /v2/nothing/here");
  });
});

describe("model readiness", () => {
  it("a loaded model is ready, with and without its version", async () => {
    for (const path of ["/v2/models/simple/ready", "/v2/models/simple/versions/1/ready"]) {
      const response = await fetch(`${server.url}${path}`);
      assert.equal(response.status, 200, path);
      assert.equal(await response.text(), "");
    }
  });

  it("a version that is not loaded, or an unknown model, is not ready (400)", async () => {
    const version = await getJson(`${server.url}/v2/models/simple/versions/2/ready`);
    assert.equal(version.status, 400);
    assert.equal(errorOf(version), "version 2 of model 'simple' is not ready");
    const unknown = await getJson(`${server.url}/v2/models/nope/ready`);
    assert.equal(unknown.status, 400);
    assert.equal(errorOf(unknown), "model 'nope' is not ready");
  });
});

describe("model metadata", () => {
  const expected = {
    name: "simple",
    versions: ["1"],
    platform: "onnxruntime_onnx",
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [-1, 16] },
      { name: "INPUT1", datatype: "INT32", shape: [-1, 16] },
    ],
    outputs: [
      { name: "OUTPUT0", datatype: "INT32", shape: [-1, 16] },
      { name: "OUTPUT1", datatype: "INT32", shape: [-1, 16] },
    ],
  };

  it("lists versions, platform, inputs and outputs, the batch dimension as -1", async () => {
    const plain = await getJson(`${server.url}/v2/models/simple`);
    assert.equal(plain.status, 200);
    assert.deepEqual(plain.body, expected);
    const versioned = await getJson(`${server.url}/v2/models/simple/versions/1`);
    assert.deepEqual(versioned.body, expected);
  });

  it("describes a model without config.pbtxt from the ONNX file", async () => {
    const answer = await getJson(`${server.url}/v2/models/auto`);
    assert.deepEqual(answer.body, {
      name: "auto",
      versions: ["1"],
      platform: "onnxruntime_onnx",
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [-1, 4] }],
      outputs: [{ name: "OUTPUT0", datatype: "FP32", shape: [-1, 4] }],
    });
  });

  it("an unknown model is a 404 and an unknown version too, with Triton's messages", async () => {
    const model = await getJson(`${server.url}/v2/models/nope`);
    assert.equal(model.status, 404);
    assert.equal(errorOf(model), "Request for unknown model: 'nope' is not found");
    const version = await getJson(`${server.url}/v2/models/simple/versions/7`);
    assert.equal(version.status, 404);
    assert.equal(errorOf(version), "Request for unknown model: 'simple' version 7 is not found");
  });
});

describe("model configuration", () => {
  it("returns the config.pbtxt as Triton's JSON, defaults filled in", async () => {
    for (const path of ["/v2/models/simple/config", "/v2/models/simple/versions/1/config"]) {
      const answer = await getJson(`${server.url}${path}`);
      assert.equal(answer.status, 200, path);
      const config = answer.body;
      assert.equal(config.name, "simple");
      assert.equal(config.platform, "onnxruntime_onnx");
      assert.equal(config.backend, "onnxruntime");
      assert.equal(config.max_batch_size, 8);
      const inputs = config.input as { name: string; data_type: string; dims: number[] }[];
      assert.deepEqual(
        inputs.map((i) => [i.name, i.data_type, i.dims]),
        [
          ["INPUT0", "TYPE_INT32", [16]],
          ["INPUT1", "TYPE_INT32", [16]],
        ],
      );
      const batching = config.dynamic_batching as { max_queue_delay_microseconds: number };
      assert.equal(batching.max_queue_delay_microseconds, 100);
      const groups = config.instance_group as { count: number; kind: string }[];
      assert.equal(groups[0]?.count, 1);
      assert.equal(groups[0]?.kind, "KIND_CPU");
      assert.deepEqual(config.version_policy, { latest: { num_versions: 1 } });
    }
  });

  it("completes the config of a model without config.pbtxt from the ONNX model", async () => {
    const answer = await getJson(`${server.url}/v2/models/auto/config`);
    assert.equal(answer.status, 200);
    const config = answer.body;
    assert.equal(config.name, "auto");
    assert.equal(config.platform, "onnxruntime_onnx");
    assert.equal(config.backend, "onnxruntime");
    // Triton's autocomplete: a model whose every tensor has a variable first dimension
    // batches, with the default max_batch_size 4; dims then leave the batch dimension out.
    assert.equal(config.max_batch_size, 4);
    const inputs = config.input as { name: string; data_type: string; dims: number[] }[];
    const outputs = config.output as { name: string; data_type: string; dims: number[] }[];
    assert.deepEqual(
      inputs.map((i) => [i.name, i.data_type, i.dims]),
      [["INPUT0", "TYPE_FP32", [4]]],
    );
    assert.deepEqual(
      outputs.map((o) => [o.name, o.data_type, o.dims]),
      [["OUTPUT0", "TYPE_FP32", [4]]],
    );
    assert.ok(config.dynamic_batching !== undefined, "a batching model gets dynamic batching");
    assert.equal(config.default_model_filename, "model.onnx");
  });

  it("the config of an unknown model is a 404", async () => {
    const answer = await getJson(`${server.url}/v2/models/nope/config`);
    assert.equal(answer.status, 404);
    assert.equal(errorOf(answer), "Request for unknown model: 'nope' is not found");
  });
});

describe("inference", () => {
  it("answers with the model's outputs, names, version and the request id", async () => {
    const a = rowsOf(3);
    const b = rowsOf(1).map((v) => -v);
    const answer = await postJson(`${server.url}/v2/models/simple/infer`, {
      id: "request-7",
      inputs: simpleInputs(a, b),
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(answer.body.model_name, "simple");
    assert.equal(answer.body.model_version, "1");
    assert.equal(answer.body.id, "request-7");
    const outputs = answer.body.outputs as {
      name: string;
      datatype: string;
      shape: number[];
      data: number[];
    }[];
    assert.deepEqual(
      outputs.map((o) => [o.name, o.datatype, o.shape]),
      [
        ["OUTPUT0", "INT32", [1, 16]],
        ["OUTPUT1", "INT32", [1, 16]],
      ],
    );
    assert.deepEqual(outputs[0]?.data, sum(a, b));
    assert.deepEqual(outputs[1]?.data, difference(a, b));
  });

  it("a versioned path runs that version, and returns only the outputs asked for", async () => {
    const a = rowsOf(5, 2);
    const b = rowsOf(2, 2);
    const answer = await infer(server.url, "simple/versions/1", simpleInputs(a, b), {}, ["OUTPUT1"]);
    const outputs = answer.body.outputs as { name: string; shape: number[] }[];
    assert.deepEqual(
      outputs.map((o) => [o.name, o.shape]),
      [["OUTPUT1", [2, 16]]],
    );
    assert.deepEqual(outputData(answer, "OUTPUT1"), difference(a, b));
  });

  it("a model completed from its ONNX file serves", async () => {
    const data = [0.5, -1.25, 3e-8, 65504.5, 1, 2, 3, 4];
    const answer = await infer(server.url, "auto", [
      { name: "INPUT0", datatype: "FP32", shape: [2, 4], data },
    ]);
    assert.deepEqual(outputData(answer, "OUTPUT0"), data.map(Math.fround));
  });
});

describe("statistics", () => {
  // Its own model, so the counts are exactly this test's requests.
  let stats: TestServer;
  before(async () => {
    stats = await startTestServer({
      counted: { config: simpleConfig("counted", { maxBatchSize: 8 }), onnx: addSubModel("INT32", [-1, 16]) },
      idle: { onnx: identityModel("FP32", [-1, 4]) },
    });
  });
  after(() => stats.stop());

  const snapshot = async (path: string): Promise<ModelStatisticsSnapshot[]> => {
    const answer = await getJson(`${stats.url}${path}`);
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    return answer.body.model_stats as ModelStatisticsSnapshot[];
  };

  // Without dynamic batching every request is one execution of its own batch size.
  const batches = [1, 1, 2, 3, 1];

  it("count requests, executions, durations and executions per batch size", async () => {
    const startedMs = Date.now();
    for (const [i, rows] of batches.entries()) {
      const a = rowsOf(i, rows);
      assert.deepEqual(
        outputData(await infer(stats.url, "counted", simpleInputs(a, a)), "OUTPUT1"),
        a.map(() => 0),
      );
    }
    // A request refused before it reaches the model (more rows than max_batch_size) is no
    // failure of the model's, as in Triton.
    const refused = await infer(stats.url, "counted", simpleInputs(rowsOf(0, 9), rowsOf(0, 9)));
    assert.equal(refused.status, 400);

    const [model, ...others] = await snapshot("/v2/models/counted/stats");
    assert.equal(others.length, 0);
    assert.ok(model !== undefined);
    assert.equal(model.name, "counted");
    assert.equal(model.version, "1");
    assert.equal(model.execution_count, batches.length);
    const s = model.inference_stats;
    assert.equal(s.success.count, batches.length);
    assert.equal(s.fail.count, 0);
    for (const [name, stat] of Object.entries({
      success: s.success,
      queue: s.queue,
      compute_input: s.compute_input,
      compute_infer: s.compute_infer,
      compute_output: s.compute_output,
    })) {
      assert.equal(stat.count, batches.length, name);
      assert.ok(stat.ns > 0, `${name} duration is counted`);
    }
    assert.ok(s.success.ns >= s.compute_infer.ns, "a request lasts at least as long as its model run");
    assert.ok(model.last_inference >= startedMs - 1000 && model.last_inference <= Date.now() + 1000);
    assert.deepEqual(
      model.batch_stats.map((b) => [b.batch_size, b.compute_infer.count]),
      [
        [1, 3],
        [2, 1],
        [3, 1],
      ],
    );
    for (const b of model.batch_stats) {
      assert.equal(b.compute_input.count, b.compute_infer.count);
      assert.equal(b.compute_output.count, b.compute_infer.count);
      assert.ok(b.compute_infer.ns > 0);
    }
    // The same numbers by version, and in the list of every model.
    assert.deepEqual(
      (await snapshot("/v2/models/counted/versions/1/stats"))[0]?.execution_count,
      batches.length,
    );
    const all = await snapshot("/v2/models/stats");
    assert.deepEqual(all.map((m) => m.name).sort(), ["counted", "idle"]);
    const idle = all.find((m) => m.name === "idle")!;
    assert.equal(idle.execution_count, 0);
    assert.equal(idle.inference_count, 0);
    assert.equal(idle.last_inference, 0);
    assert.deepEqual(idle.batch_stats, []);
  });

  // Triton: "each inference in a batched request is counted as an individual inference"
  // (a request of batch 64 adds 64), as nv_inference_count documents. seqserve's core adds
  // one per request whatever its batch size.
  it("inference_count counts every row of a batched request", async () => {
    const [model] = await snapshot("/v2/models/counted/stats");
    assert.equal(
      model?.inference_count,
      batches.reduce((a, b) => a + b, 0),
    );
  });

  it("stats of a model or version that is not ready are a 400, with Triton's words", async () => {
    const model = await getJson(`${stats.url}/v2/models/nope/stats`);
    assert.equal(model.status, 400);
    assert.equal(errorOf(model), "requested model 'nope' is not available");
    const version = await getJson(`${stats.url}/v2/models/counted/versions/4/stats`);
    assert.equal(version.status, 400);
    assert.equal(errorOf(version), "requested model version is not available for model 'counted'");
  });
});

// The main server lists both of its models.
describe("statistics of the main server", () => {
  it("list every served model", async () => {
    const all = await statsOf("/v2/models/stats");
    assert.deepEqual(all.map((m) => `${m.name}/${m.version}`).sort(), ["auto/1", "simple/1"]);
  });
});
