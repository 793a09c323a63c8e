import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { status } from "@grpc/grpc-js";
import type {
  ModelInferRequestMessage,
  ModelInferResponseMessage,
} from "../../src/frontends/grpc/messages.ts";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { callError, TestClient } from "../grpc/support/grpc-harness.ts";
import { errorOf, rawBytes, rawOutput, StreamCall } from "../support/grpc-stream-call.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// A 100 MiB tensor through ModelInfer on the real server: it round-trips intact when the
// server's message limit (and the client's) allows it, and a server with a smaller limit
// refuses it with RESOURCE_EXHAUSTED and goes on serving. One round trip and one refusal:
// each 100 MiB message costs memory and time.

const config = (name: string): string => `
name: "${name}"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
`;

/** OUTPUT0 = INPUT0 twice over: an answer twice the size of its request. */
const doublingModel = (): Uint8Array =>
  new OnnxModelBuilder({ opset: 17 })
    .input("INPUT0", "FP32", [-1])
    .output("OUTPUT0", "FP32", [-1])
    .node("Concat", ["INPUT0", "INPUT0"], ["OUTPUT0"], { axis: 0 })
    .toBytes();

const MIB = 1024 * 1024;
const TENSOR_BYTES = 100 * MIB;
/** Room for the tensor plus the rest of the message. */
const LARGE_LIMIT = 101 * MIB;
const SMALL_LIMIT = 8 * MIB;

const WAIT = { timeout: 120_000 };

let roomy: TestServer;
let strict: TestServer;
let roomyClient: TestClient;
let strictClient: TestClient;
before(async () => {
  const models = {
    ident: { config: config("ident"), onnx: identityModel("FP32", [-1]) },
    double: { config: config("double"), onnx: doublingModel() },
  };
  roomy = await startTestServer(models, { grpcMaxMessageBytes: LARGE_LIMIT, httpPort: undefined });
  strict = await startTestServer(models, { grpcMaxMessageBytes: SMALL_LIMIT, httpPort: undefined });
  const channel = {
    "grpc.max_send_message_length": LARGE_LIMIT,
    "grpc.max_receive_message_length": LARGE_LIMIT,
  };
  roomyClient = new TestClient(roomy.grpcPort, channel);
  strictClient = new TestClient(strict.grpcPort, channel);
});
after(async () => {
  roomyClient.close();
  strictClient.close();
  await Promise.all([roomy.stop(), strict.stop()]);
});

function request(values: Float32Array, model = "ident"): ModelInferRequestMessage {
  return {
    model_name: model,
    inputs: [{ name: "INPUT0", datatype: "FP32", shape: [values.length] }],
    raw_input_contents: [rawBytes(values)],
  };
}

/** 100 MiB of floats that differ from one another, so a misplaced byte shows. */
function largeTensor(): Float32Array {
  const values = new Float32Array(TENSOR_BYTES / 4);
  for (let i = 0; i < values.length; i++) values[i] = (i % 1_000_003) * 0.5 - i / 7;
  return values;
}

test("a 100 MiB tensor round-trips through ModelInfer when the limits allow it", WAIT, async () => {
  const values = largeTensor();
  const response = await roomyClient.unary<ModelInferResponseMessage>("ModelInfer", request(values));
  const [output] = response.outputs ?? [];
  assert.deepEqual(
    [output?.name, output?.datatype, output?.shape],
    ["OUTPUT0", "FP32", [String(values.length)]],
  );
  const raw = response.raw_output_contents?.[0];
  assert.equal(raw?.byteLength, TENSOR_BYTES);
  assert.ok(
    Buffer.from(raw!.buffer, raw!.byteOffset, raw!.byteLength).equals(rawBytes(values)),
    "the bytes came back intact",
  );
});

test("a server with a smaller limit refuses it with RESOURCE_EXHAUSTED and keeps serving", WAIT, async () => {
  const refused = await callError(strictClient.unary("ModelInfer", request(largeTensor())));
  assert.equal(refused.code, status.RESOURCE_EXHAUSTED, `${refused.code} ${refused.details}`);
  // The same server, over the same channel, answers the next request.
  const small = new Float32Array([1, 2, 3]);
  const response = await strictClient.unary<ModelInferResponseMessage>("ModelInfer", request(small));
  const raw = response.raw_output_contents?.[0];
  assert.deepEqual(
    raw === undefined ? undefined : [...new Float32Array(new Uint8Array(raw).buffer)],
    [1, 2, 3],
  );
  assert.deepEqual(await strictClient.unary("ServerReady"), { ready: true });
});

test(
  "a stream answer over the server's send limit is refused in-band; the stream goes on",
  WAIT,
  async () => {
    const call = new StreamCall(strictClient);
    const small = new Float32Array([5, 6]);
    // 5 MiB in fits the 8 MiB limit; 10 MiB out does not.
    const [before, tooBig] = await Promise.all([
      call.send(request(small, "double")),
      call.send(request(new Float32Array((5 * MIB) / 4), "double")),
    ]);
    assert.deepEqual(
      [...new Float32Array(new Uint8Array(rawOutput(before, "OUTPUT0")).buffer)],
      [5, 6, 5, 6],
    );
    assert.match(errorOf(tooBig), /larger than the server's maximum gRPC message size/);
    const later = await call.send(request(small, "double"));
    assert.deepEqual([...new Float32Array(new Uint8Array(rawOutput(later, "OUTPUT0")).buffer)], [5, 6, 5, 6]);
    assert.equal((await call.end()).code, status.OK);
  },
);
