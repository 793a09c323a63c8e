import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { infer, outputData } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// A config's `reshape`, as Triton applies it: the client's tensor has the configured dims,
// the model's the reshape; each variable dimension of one is the next variable dimension
// of the other, in order, in both directions (input to model, model output to client).

const CONFIG = `
name: "folded"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 4, -1 ] reshape: { shape: [ -1, 2, 2, -1 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, 4, -1 ] reshape: { shape: [ -1, 2, 2, -1 ] } } ]
`;

describe("reshape with two variable dimensions", () => {
  let server: TestServer;
  let grpc: TestClient;
  before(async () => {
    server = await startTestServer({
      folded: { config: CONFIG, onnx: identityModel("FP32", ["b", "a", 2, 2, "c"]) },
    });
    grpc = new TestClient(server.grpcPort);
  });
  after(async () => {
    grpc.close();
    await server.stop();
  });

  const data = Array.from({ length: 2 * 3 * 4 * 5 }, (_, i) => i);

  it("HTTP: the answer has the client's shape, each variable dimension in its place", async () => {
    const answer = await infer(server.url, "folded", [
      { name: "INPUT0", datatype: "FP32", shape: [2, 3, 4, 5], data },
    ]);
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const [output] = answer.body.outputs as { shape: number[] }[];
    assert.deepEqual(output!.shape, [2, 3, 4, 5]);
    assert.deepEqual(outputData(answer, "OUTPUT0"), data);
  });

  it("gRPC: the same", async () => {
    const answer = (await grpc.unary("ModelInfer", {
      model_name: "folded",
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [2, 3, 4, 5], contents: { fp32_contents: data } }],
    })) as { outputs: { shape: string[] }[]; raw_output_contents: Buffer[] };
    assert.deepEqual(answer.outputs[0]!.shape.map(Number), [2, 3, 4, 5]);
    assert.deepEqual([...new Float32Array(new Uint8Array(answer.raw_output_contents[0]!).buffer)], data);
  });
});
