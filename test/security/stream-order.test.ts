import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Metadata } from "@grpc/grpc-js";
import type {
  ModelInferRequestMessage,
  ModelStreamInferResponseMessage,
} from "../../src/frontends/grpc/messages.ts";
import { STREAM_ORDER_METADATA } from "../../src/frontends/grpc/stream-infer.ts";
import { accumulatorConfig, accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { accumulatorRequest, errorOf, int32Output } from "../support/grpc-stream-call.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// One ModelStreamInfer stream carrying several sequences of a Direct model answers in
// request order, as Triton does: clients that match answers by position must get theirs.
// With one slot, the second sequence's START waits in the backlog until the first
// sequence ends, so it completes after requests sent later.

const CONFIG = accumulatorConfig("acc", 1, "max_sequence_idle_microseconds: 60000000\n  direct { }");

let server: TestServer;
let client: TestClient;
before(async () => {
  server = await startTestServer({ acc: { config: CONFIG, onnx: accumulatorModel() } });
  client = new TestClient(server.grpcPort);
});
after(async () => {
  client.close();
  await server.stop();
});

test("a stream of several sequences answers in request order", async () => {
  const stream = client.stream();
  const answers: ModelStreamInferResponseMessage[] = [];
  const done = new Promise<void>((resolve) => stream.on("end", resolve));
  stream.on("data", (m: ModelStreamInferResponseMessage) => answers.push(m));
  const requests: ModelInferRequestMessage[] = [
    { ...accumulatorRequest("acc", 5, { id: 1, start: true }), id: "a1" },
    // Waits in the backlog for the only slot, which sequence 1 holds until its end.
    { ...accumulatorRequest("acc", 100, { id: 2, start: true }), id: "b1" },
    { ...accumulatorRequest("acc", 3, { id: 1 }), id: "a2" },
    // Refused at once (no such input): answered in its turn all the same.
    { model_name: "acc", id: "bad", inputs: [{ name: "NOPE", datatype: "INT32", shape: [1, 1] }] },
    { ...accumulatorRequest("acc", 2, { id: 1, end: true }), id: "a3" },
    { ...accumulatorRequest("acc", 1, { id: 2, end: true }), id: "b2" },
  ];
  for (const request of requests) stream.write(request);
  stream.end();
  await done;
  assert.deepEqual(
    answers.map((a) => a.infer_response?.id ?? ""),
    ["a1", "b1", "a2", "bad", "a3", "b2"],
  );
  assert.equal(int32Output(answers[0]!), 5);
  assert.equal(int32Output(answers[1]!), 100);
  assert.equal(int32Output(answers[2]!), 8);
  assert.match(errorOf(answers[3]!), /NOPE|raw_input_contents|data for input/);
  assert.equal(int32Output(answers[4]!), 10);
  assert.equal(int32Output(answers[5]!), 101);
});

test("answered as they complete, each sequence's answers come in its order, a refused request's included", async () => {
  const metadata = new Metadata();
  metadata.set(STREAM_ORDER_METADATA, "sequence");
  const stream = client.stream(metadata);
  const answers: ModelStreamInferResponseMessage[] = [];
  const done = new Promise<void>((resolve) => stream.on("end", resolve));
  stream.on("data", (m: ModelStreamInferResponseMessage) => answers.push(m));
  // Refused by the model's validation (it expects INT32) before the core runs it in its sequence.
  const mistyped = accumulatorRequest("acc", 1, { id: 4 });
  const mistypedInputs = [{ name: "INPUT", datatype: "FP32", shape: [1, 1] }];
  const requests: ModelInferRequestMessage[] = [
    { ...accumulatorRequest("acc", 5, { id: 3, start: true }), id: "a1" },
    // Waits in the backlog for the only slot, which sequence 3 holds until its end.
    { ...accumulatorRequest("acc", 100, { id: 4, start: true }), id: "b1" },
    { ...mistyped, inputs: mistypedInputs, id: "b-mistyped" },
    { ...accumulatorRequest("acc", 2, { id: 3, end: true }), id: "a2" },
    { ...accumulatorRequest("acc", 1, { id: 4, end: true }), id: "b2" },
  ];
  for (const request of requests) stream.write(request);
  stream.end();
  await done;
  const ids = answers.map((a) => a.infer_response?.id ?? "");
  assert.deepEqual(
    ids.filter((id) => id.startsWith("a")),
    ["a1", "a2"],
  );
  assert.deepEqual(
    ids.filter((id) => id.startsWith("b")),
    ["b1", "b-mistyped", "b2"],
  );
  const byId = new Map(answers.map((a) => [a.infer_response?.id ?? "", a]));
  assert.equal(int32Output(byId.get("a2")!), 7);
  assert.equal(int32Output(byId.get("b1")!), 100);
  assert.match(errorOf(byId.get("b-mistyped")!), /FP32/);
  assert.equal(int32Output(byId.get("b2")!), 101);
});
