import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Metadata, status } from "@grpc/grpc-js";
import { TRITON_GRPC_ERROR_METADATA } from "../../src/frontends/grpc/stream-infer.ts";
import { accumulatorConfig, accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { accumulatorRequest, errorOf, int32Output, StreamCall } from "../support/grpc-stream-call.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { TestClient } from "./support/grpc-harness.ts";

// Triton's `triton_grpc_error: true` stream metadata: the first request the model had taken
// that fails ends the ModelStreamInfer call with that error as its gRPC status, after the
// answers before it; a request refused before its model took it is still answered in-band.
// Without the metadata every error is answered in-band and the stream goes on.

/** Model code that fails a request whose INPUT is negative and answers the others with it. */
const FAILER = `
export default {
  async execute(requests: any[]) {
    return requests.map((r) => {
      const value = r.inputs.INPUT.data[0];
      if (value < 0) throw new Error("INPUT is negative: " + value);
      return { outputs: { OUTPUT: { datatype: "INT32", shape: [1, 1], data: Int32Array.of(value) } } };
    });
  },
};
`;

const FAILER_CONFIG = `
backend: "typescript"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
`;

const ACC = "acc";
const FAILER_MODEL = "failer";

/** Tests that wait for the server fail after this instead of hanging. */
const WAIT = { timeout: 60_000 };

let server: TestServer;
let client: TestClient;
before(async () => {
  server = await startTestServer(
    {
      [ACC]: {
        config: accumulatorConfig(ACC, 8, "max_sequence_idle_microseconds: 600000000\n  direct { }"),
        onnx: accumulatorModel(),
      },
      [FAILER_MODEL]: { config: FAILER_CONFIG, onnx: {}, files: { "1/model.ts": FAILER } },
    },
    { exitTimeoutSecs: 1 },
  );
  client = new TestClient(server.grpcPort);
});
after(async () => {
  client.close();
  await server.stop();
});

const failerRequest = (value: number) => ({
  model_name: FAILER_MODEL,
  inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1] }],
  raw_input_contents: [Buffer.from(Int32Array.of(value).buffer)],
});

function tritonGrpcError(): Metadata {
  const metadata = new Metadata();
  metadata.set(TRITON_GRPC_ERROR_METADATA, "true");
  return metadata;
}

test(
  "with triton_grpc_error, a failed run ends the stream with its gRPC status; refusals stay in-band",
  WAIT,
  async () => {
    const call = new StreamCall(client, "e-", tritonGrpcError());
    assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 5, { id: 91, start: true }))), 5);
    // Refused before a model took it: in-band, and the stream goes on.
    const refused = await call.send(accumulatorRequest(ACC, 1, { id: 92 }));
    assert.match(errorOf(refused), /must specify the START flag/);
    assert.match(errorOf(await call.send({ ...failerRequest(1), model_name: "nosuch" })), /nosuch/);
    assert.equal(int32Output(await call.send(failerRequest(7))), 7);

    // The model's run fails: the call ends with the error as its status, no in-band answer.
    await assert.rejects(call.send(failerRequest(-1)), /the stream ended \(13 /);
    const ended = await call.status;
    assert.equal(ended.code, status.INTERNAL, ended.details);
    assert.match(ended.details, /INPUT is negative: -1/);

    // The stream's sequence with nothing in flight goes on over another stream.
    const again = new StreamCall(client, "again-", tritonGrpcError());
    assert.equal(int32Output(await again.send(accumulatorRequest(ACC, 3, { id: 91, end: true }))), 8);
    assert.equal((await again.end()).code, status.OK);
  },
);

test("without triton_grpc_error, a failed run is answered in-band and the stream goes on", WAIT, async () => {
  const call = new StreamCall(client, "b-");
  assert.match(errorOf(await call.send(failerRequest(-1))), /INPUT is negative: -1/);
  assert.equal(int32Output(await call.send(failerRequest(2))), 2);
  assert.equal((await call.end()).code, status.OK);
});
