import assert from "node:assert/strict";
import { test } from "node:test";
import { type ServiceError, status } from "@grpc/grpc-js";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { callError, TestClient } from "../grpc/support/grpc-harness.ts";
import { infer, postJson } from "../support/http-client.ts";
import { accumulate, accumulatorConfig, int32Input } from "../support/sequence-kit.ts";
import { startTestServer } from "../support/test-server.ts";
import { floatTensor, TfsClient } from "../tfs/support/tfs-client.ts";

// A stopping server refuses new work with 503 / UNAVAILABLE, "Server is stopping, ...":
// to a client behind a load balancer that means "send it to another replica", so every
// family says when to retry (Retry-After, grpc-retry-pushback-ms), as the refusal of a
// sequence moving to another replica does. The TF-Serving API's answers had none.

const STOPPING = /^Server is stopping, scheduler for model has stopped accepting new inference requests$/;
const PLAIN = [{ name: "INPUT0", datatype: "FP32", shape: [1, 2], data: [1, 2] }];

test("every family's 'server is stopping' refusal carries a Retry-After", { timeout: 60_000 }, async () => {
  const server = await startTestServer(
    {
      acc: {
        config: accumulatorConfig("acc", 4, "max_sequence_idle_microseconds: 60000000"),
        onnx: accumulatorModel(),
      },
      plain: { onnx: identityModel("FP32", [-1, 2]) },
    },
    { exitTimeoutSecs: 30, sagemakerPort: 0, sagemakerModel: "acc" },
  );
  const grpc = new TestClient(server.grpcPort);
  const tfs = new TfsClient(server.grpcPort);
  // A live sequence keeps the server stopping (not stopped) while the refusals are asked for.
  assert.equal(await accumulate(server.url, "acc", 5, { id: 1, start: true }), 5);
  const stopped = server.stop();

  // KServe HTTP: a new sequence, and a stateless request.
  const start = await infer(server.url, "acc", int32Input(1), { id: 2, start: true });
  assert.equal(start.status, 503, JSON.stringify(start.body));
  assert.equal(start.headers["retry-after"], "1");
  const plain = await infer(server.url, "plain", PLAIN);
  assert.equal(plain.status, 503, JSON.stringify(plain.body));
  assert.equal(plain.headers["retry-after"], "1");

  // KServe gRPC.
  const refused = await callError(
    grpc.unary("ModelInfer", {
      model_name: "acc",
      parameters: { sequence_id: { int64_param: 3 }, sequence_start: { bool_param: true } },
      inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], contents: { int_contents: [1] } }],
    }),
  );
  assert.equal(refused.code, status.UNAVAILABLE, refused.details);
  assert.match(refused.details, STOPPING);
  assert.deepEqual(refused.metadata.get("grpc-retry-pushback-ms"), ["1000"]);

  // TF-Serving REST (OVMS's sequence inputs) and gRPC.
  const rest = await postJson(`${server.url}/v1/models/acc:predict`, {
    inputs: { INPUT: [[1]], sequence_id: [4], sequence_control_input: [1] },
  });
  assert.equal(rest.status, 503, JSON.stringify(rest.body));
  assert.match((rest.body as { error: string }).error, STOPPING);
  assert.equal(rest.headers["retry-after"], "1");
  const predict = (await tfs
    .predict({
      model_spec: { name: "plain" },
      inputs: { INPUT0: floatTensor(new Float32Array([1, 2]), [1, 2]) },
    })
    .then(
      () => assert.fail("the request was not refused"),
      (e: unknown) => e,
    )) as ServiceError;
  assert.equal(predict.code, status.UNAVAILABLE, predict.details);
  assert.match(predict.details, STOPPING);
  assert.deepEqual(predict.metadata.get("grpc-retry-pushback-ms"), ["1000"]);

  // SageMaker: a new session (SageMaker's own 503, which its SDKs retry).
  const opened = await fetch(`http://127.0.0.1:${server.server.sagemakerPort!}/invocations`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-amzn-sagemaker-session-id": "NEW_SESSION" },
    body: JSON.stringify({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [1] }] }),
  });
  const body = await opened.text();
  assert.equal(opened.status, 503, body);
  assert.match(body, /Server is stopping/);
  assert.equal(opened.headers.get("retry-after"), "1");

  grpc.close();
  tfs.close();
  assert.equal(await accumulate(server.url, "acc", 1, { id: 1, end: true }), 6);
  await stopped;
});
