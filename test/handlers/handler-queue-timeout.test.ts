import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { ServiceError } from "@grpc/grpc-js";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { postJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { type HandlerRepository, handlerRepository, SLEEPER } from "./support/handler-kit.ts";

// Triton's queue policy on a model with dynamic batching: requests that wait in the queue
// longer than default_timeout_microseconds are refused with UNAVAILABLE "Request timeout
// expired" (HTTP 503, gRPC 14), while the request holding the instance runs on and is
// answered. The model here takes as long as its request says.

let repository: HandlerRepository;
let server: TestServer;

before(async () => {
  repository = handlerRepository({
    sleeper: {
      config: `
backend: "typescript"
max_batch_size: 0
input [ { name: "MS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "MS" data_type: TYPE_INT32 dims: [ 1 ] } ]
dynamic_batching {
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 200000 }
}
`,
      files: { "1/model.ts": SLEEPER },
    },
  });
  server = await startTestServer(repository.path);
});

after(async () => {
  await server.stop();
  repository.remove();
});

const body = (ms: number) => ({ inputs: [{ name: "MS", datatype: "INT32", shape: [1], data: [ms] }] });

test("KServe HTTP: requests queued past the model's queue timeout get 503 'Request timeout expired'; the running one is answered", async () => {
  const url = `${server.url}/v2/models/sleeper/infer`;
  const running = postJson(url, body(1500));
  await new Promise((resolve) => setTimeout(resolve, 100));
  const queued = await Promise.all([postJson(url, body(0)), postJson(url, body(0))]);
  for (const answer of queued) {
    assert.equal(answer.status, 503, JSON.stringify(answer.body));
    assert.equal(answer.body.error, "Request timeout expired");
  }
  const first = await running;
  assert.equal(first.status, 200, JSON.stringify(first.body));
  assert.deepEqual((first.body.outputs as { data: number[] }[])[0]?.data, [1500]);
});

test("KServe gRPC: the same refusal is UNAVAILABLE", async () => {
  const client = new TestClient(server.grpcPort);
  const request = (ms: number) => ({
    model_name: "sleeper",
    inputs: [{ name: "MS", datatype: "INT32", shape: [1], contents: { int_contents: [ms] } }],
  });
  try {
    const running = client.unary("ModelInfer", request(1500));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const refused = await client.unary("ModelInfer", request(0)).then(
      () => undefined,
      (error: ServiceError) => error,
    );
    assert.equal(refused?.code, 14, refused?.details);
    assert.equal(refused?.details, "Request timeout expired");
    await running;
  } finally {
    client.close();
  }
});
