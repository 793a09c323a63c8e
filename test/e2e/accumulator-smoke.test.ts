import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { infer, outputData } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

const CONFIG = `
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

let server: TestServer;
before(async () => {
  server = await startTestServer({ acc: { config: CONFIG, onnx: accumulatorModel() } });
});
after(() => server.stop());

const value = (v: number) => [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [v] }];

test("a sequence accumulates across requests and ends", async () => {
  assert.deepEqual(
    outputData(await infer(server.url, "acc", value(5), { id: 1, start: true }), "OUTPUT"),
    [5],
  );
  assert.deepEqual(outputData(await infer(server.url, "acc", value(3), { id: 1 }), "OUTPUT"), [8]);
  assert.deepEqual(
    outputData(await infer(server.url, "acc", value(2), { id: 1, end: true }), "OUTPUT"),
    [10],
  );
  const again = await infer(server.url, "acc", value(1), { id: 1 });
  assert.equal(again.status, 400);
});
