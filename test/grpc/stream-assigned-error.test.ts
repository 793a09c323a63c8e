import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { accumulatorRequest, StreamCall } from "../support/grpc-stream-call.ts";
import { getJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { TestClient } from "./support/grpc-harness.ts";

// A START sent without an id on a ModelStreamInfer stream is given an id by the server,
// and only its answer names it. When that answer cannot go out (larger than
// --grpc-max-message-bytes) and an error goes in its place, the error does not name the
// id: nobody can reach the sequence, which ends (cancelled) rather than hold its slot and
// state until its idle timeout.

const MODEL = "wide";
/** Each answer carries 4096 INT32 values: 16 KiB, past the server's 4 KiB limit; requests fit. */
const LIMIT = 4096;

const CONFIG = `
name: "${MODEL}"
backend: "onnxruntime"
max_batch_size: 1
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 4096 ] } ]
sequence_batching { max_sequence_idle_microseconds: 600000000 direct { } }
instance_group [ { count: 1 kind: KIND_CPU } ]`;

/** OUTPUT [batch, 4096] = INPUT [batch, 1] repeated. */
function wideModel(): Uint8Array {
  return new OnnxModelBuilder({ opset: 17 })
    .input("INPUT", "INT32", ["batch", 1])
    .output("OUTPUT", "INT32", ["batch", 4096])
    .initializer("shape", "INT64", [2], [1, 4096])
    .node("Expand", ["INPUT", "shape"], ["OUTPUT"])
    .toBytes();
}

let server: TestServer;
let client: TestClient;
before(async () => {
  server = await startTestServer(
    { [MODEL]: { config: CONFIG, onnx: wideModel() } },
    { grpcMaxMessageBytes: LIMIT },
  );
  client = new TestClient(server.grpcPort);
});
after(async () => {
  client.close();
  await server.stop();
});

test("a START without an id whose answer is too large for gRPC is answered in-band, and its sequence ends", async () => {
  const call = new StreamCall(client, "wide-");
  // Sequence id 0: the server gives the START an id.
  const answer = await call.send(accumulatorRequest(MODEL, 7, { id: 0, start: true }));
  assert.match(
    answer.error_message ?? "",
    /^the response is larger than the server's maximum gRPC message size/,
  );
  await call.end();
  const listed = await getJson(`${server.url}/v2/models/${MODEL}/sequences`);
  const body = listed.body as { sequences: unknown[]; summary: { ended: Record<string, number> } };
  assert.deepEqual(body.sequences, [], JSON.stringify(body));
  assert.equal(body.summary.ended.cancelled, 1, JSON.stringify(body.summary));
});
