import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ovmsMetricsSettings } from "../../src/config/ovms-metrics-config.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { type OvmsServer, startOvmsServer } from "../tfs/support/ovms-server.ts";
import { TfsClient } from "../tfs/support/tfs-client.ts";

// OpenVINO Model Server's metric families on the REST port, as an OVMS user's dashboards
// and alerts read them: calls counted per API (TF-Serving, KServe), transport and method,
// for the model and version that answered; processing time of answered inference calls;
// time in the model and in the queue; every series of a model from the first scrape, at
// zero; OVMS's microsecond buckets; the families of --metrics_list only.

const MODELS = { add_sub: { onnx: addSubModel("INT32", [-1, 4]) } };

/** The value of the series `name{labels}` in a Prometheus text exposition; undefined when absent. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split("\n")) {
    const match = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null || match[1] !== name) continue;
    const found = Object.fromEntries(
      [...(match[2] ?? "").matchAll(/([a-z_]+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]),
    );
    const keys = Object.keys(labels);
    if (Object.keys(found).length !== keys.length) continue;
    if (keys.every((key) => found[key] === labels[key])) return Number(match[3]);
  }
  return undefined;
}

async function scrape(server: OvmsServer, path = "/metrics"): Promise<string> {
  const response = await fetch(`${server.url}${path}`);
  assert.equal(response.status, 200);
  return response.text();
}

const post = (server: OvmsServer, path: string, body: unknown) =>
  fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });

describe("OVMS's metric families", () => {
  let server: OvmsServer;
  before(async () => {
    server = await startOvmsServer(MODELS, {
      ovmsMetrics: ovmsMetricsSettings(undefined),
      metricsOnHttpPort: true,
      metricsPort: undefined,
    });
  });
  after(() => server.stop());

  it("every series of a model exists at zero before any call", async () => {
    const text = await scrape(server);
    const model = { name: "add_sub", version: "1" };
    for (const api of ["TensorFlowServing", "KServe"]) {
      for (const transport of ["gRPC", "REST"]) {
        const infer = api === "KServe" ? "ModelInfer" : "Predict";
        for (const family of ["ovms_requests_success", "ovms_requests_fail"]) {
          assert.equal(sample(text, family, { api, interface: transport, method: infer, ...model }), 0);
        }
        const status = api === "KServe" ? "ModelReady" : "GetModelStatus";
        assert.equal(
          sample(text, "ovms_requests_success", {
            api,
            interface: transport,
            method: status,
            name: "add_sub",
          }),
          0,
          `${status} has no version label`,
        );
      }
    }
    assert.equal(sample(text, "ovms_request_time_us_count", { interface: "gRPC", ...model }), 0);
    assert.equal(sample(text, "ovms_request_time_us_bucket", { interface: "REST", ...model, le: "10" }), 0);
    assert.equal(sample(text, "ovms_request_time_us_bucket", { interface: "REST", ...model, le: "18" }), 0);
    assert.equal(sample(text, "ovms_streams", model), 1);
    assert.equal(sample(text, "ovms_current_requests", model), 0);
    for (const family of ["ovms_infer_req_queue_size", "ovms_infer_req_active"])
      assert.equal(sample(text, family, model), undefined, `${family} is not in the default list`);
  });

  it("counts calls per API, transport and method for the version that answered", async () => {
    const inputs = { INPUT0: [[1, 2, 3, 4]], INPUT1: [[4, 3, 2, 1]] };
    for (let i = 0; i < 2; i++)
      assert.equal((await post(server, "/v1/models/add_sub:predict", { inputs })).status, 200);
    assert.equal(
      (await post(server, "/v1/models/add_sub:predict", { inputs: { INPUT0: [[1]] } })).status,
      400,
    );
    // A call for a model the server does not have counts nowhere.
    assert.equal((await post(server, "/v1/models/nope:predict", { inputs })).status, 404);
    assert.equal((await fetch(`${server.url}/v1/models/add_sub`)).status, 200);
    assert.equal((await fetch(`${server.url}/v1/models/add_sub/metadata`)).status, 200);
    const kserve = await post(server, "/v2/models/add_sub/infer", {
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1, 4], data: [1, 2, 3, 4] },
        { name: "INPUT1", datatype: "INT32", shape: [1, 4], data: [1, 1, 1, 1] },
      ],
    });
    assert.equal(kserve.status, 200);

    const tfs = new TfsClient(server.grpcPort);
    const kserveGrpc = new TestClient(server.grpcPort);
    try {
      const tensor = (values: number[]) => ({
        dtype: "DT_INT32",
        tensor_shape: { dim: [{ size: 1 }, { size: 4 }] },
        tensor_content: Buffer.from(Int32Array.from(values).buffer),
      });
      await tfs.predict({
        model_spec: { name: "add_sub" },
        inputs: { INPUT0: tensor([1, 2, 3, 4]), INPUT1: tensor([0, 0, 0, 0]) },
      });
      await tfs.status({ model_spec: { name: "add_sub" } });
      assert.deepEqual(await kserveGrpc.unary("ModelReady", { name: "add_sub" }), { ready: true });
      // A version the server does not have counts nowhere; `01` is version 1.
      assert.deepEqual(await kserveGrpc.unary("ModelReady", { name: "add_sub", version: "7" }), {
        ready: false,
      });
      await kserveGrpc.unary("ModelMetadata", { name: "add_sub", version: "01" });
      // Refused for its inputs: a failure of the model it names, as OVMS counts it.
      await kserveGrpc
        .unary("ModelInfer", {
          model_name: "add_sub",
          inputs: [{ name: "INPUT0", datatype: "INT32", shape: [1, 4] }],
          raw_input_contents: [Buffer.alloc(3)],
        })
        .then(
          () => assert.fail("accepted"),
          () => {},
        );
    } finally {
      tfs.close();
      kserveGrpc.close();
    }

    const text = await scrape(server);
    const versioned = (api: string, transport: string, method: string) => ({
      api,
      interface: transport,
      method,
      name: "add_sub",
      version: "1",
    });
    const whole = (api: string, transport: string, method: string) => ({
      api,
      interface: transport,
      method,
      name: "add_sub",
    });
    const expected: [string, Record<string, string>, number][] = [
      ["ovms_requests_success", versioned("TensorFlowServing", "REST", "Predict"), 2],
      ["ovms_requests_fail", versioned("TensorFlowServing", "REST", "Predict"), 1],
      ["ovms_requests_success", whole("TensorFlowServing", "REST", "GetModelStatus"), 1],
      ["ovms_requests_success", versioned("TensorFlowServing", "REST", "GetModelMetadata"), 1],
      ["ovms_requests_success", versioned("KServe", "REST", "ModelInfer"), 1],
      ["ovms_requests_success", versioned("TensorFlowServing", "gRPC", "Predict"), 1],
      ["ovms_requests_success", whole("TensorFlowServing", "gRPC", "GetModelStatus"), 1],
      ["ovms_requests_success", whole("KServe", "gRPC", "ModelReady"), 1],
      ["ovms_requests_success", versioned("KServe", "gRPC", "ModelInfer"), 0],
      ["ovms_requests_fail", versioned("KServe", "gRPC", "ModelInfer"), 1],
      ["ovms_requests_success", versioned("KServe", "gRPC", "ModelMetadata"), 1],
      ["ovms_requests_fail", whole("KServe", "gRPC", "ModelReady"), 0],
      // Answered inference calls only: two TF-Serving and one KServe over REST, one over gRPC.
      ["ovms_request_time_us_count", { interface: "REST", name: "add_sub", version: "1" }, 3],
      ["ovms_request_time_us_count", { interface: "gRPC", name: "add_sub", version: "1" }, 1],
      ["ovms_inference_time_us_count", { name: "add_sub", version: "1" }, 4],
      ["ovms_wait_for_infer_req_time_us_count", { name: "add_sub", version: "1" }, 4],
    ];
    for (const [family, labels, value] of expected) {
      assert.equal(sample(text, family, labels), value, `${family} ${JSON.stringify(labels)}`);
    }
    assert.equal(
      text.split("\n").filter((line) => line.includes('name="nope"') || line.includes('version="01"')).length,
      0,
      "no series for a model the server does not have, nor for a version spelled otherwise",
    );
    assert.match(text, /^nv_inference_count\{/m, "seqserve's own families are served too");
  });
});

describe("OVMS's metric families from metrics_list", () => {
  let server: OvmsServer;
  before(async () => {
    server = await startOvmsServer(MODELS, {
      ovmsMetrics: ovmsMetricsSettings([
        "ovms_requests_success",
        "ovms_infer_req_queue_size",
        "ovms_infer_req_active",
      ]),
      metricsOnHttpPort: true,
      metricsPort: undefined,
    });
  });
  after(() => server.stop());

  it("serves the families listed, and only those", async () => {
    const text = await scrape(server);
    assert.equal(sample(text, "ovms_infer_req_queue_size", { name: "add_sub", version: "1" }), 1);
    assert.equal(sample(text, "ovms_infer_req_active", { name: "add_sub", version: "1" }), 0);
    assert.match(text, /^ovms_requests_success\{/m);
    assert.doesNotMatch(text, /^ovms_requests_fail/m);
    assert.doesNotMatch(text, /^ovms_request_time_us/m);
  });
});
