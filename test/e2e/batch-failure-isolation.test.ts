import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { ModelStreamInferResponseMessage } from "../../src/frontends/grpc/messages.ts";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { infer, outputData } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// One request's data can fail a whole batch's run (here an index out of the model's
// table: ONNX Runtime's Gather refuses the run). Its batch's other requests, of other
// clients and other sequences, are run again alone and answered as if it had not been
// there; only the request at fault fails, and every sequence's state is as a plain run of
// its own steps leaves it. The batches are made to form: 9 requests at once, a preferred
// batch of 9, and a queue delay far longer than the test. Both models take a scalar all
// of a batch shares (OFFSET, as Silero VAD's `sr`), which the failed run must not take
// from the request that brought it.

const TABLE = Float32Array.from({ length: 10 }, (_, i) => i * 10);
const BATCH = 9;
const BAD_INDEX = 12;

/** VALUE = TABLE[INDEX + OFFSET]: INDEX INT64 [batch, 1], OFFSET an INT64 scalar. */
function lookupModel(): Uint8Array {
  return new OnnxModelBuilder({ opset: 17 })
    .input("INDEX", "INT64", ["batch", 1])
    .input("OFFSET", "INT64", [])
    .output("VALUE", "FP32", ["batch", 1])
    .initializer("table", "FP32", [TABLE.length], TABLE)
    .node("Add", ["INDEX", "OFFSET"], ["at"])
    .node("Gather", ["table", "at"], ["VALUE"], { axis: 0 })
    .toBytes();
}

/** A running sum of looked-up values: OUTPUT = STATE_OUT = STATE + TABLE[INDEX + OFFSET]. */
function summingLookupModel(): Uint8Array {
  return new OnnxModelBuilder({ opset: 17 })
    .input("INDEX", "INT64", ["batch", 1])
    .input("OFFSET", "INT64", [])
    .input("STATE", "FP32", ["batch", 1])
    .output("OUTPUT", "FP32", ["batch", 1])
    .output("STATE_OUT", "FP32", ["batch", 1])
    .initializer("table", "FP32", [TABLE.length], TABLE)
    .node("Add", ["INDEX", "OFFSET"], ["at"])
    .node("Gather", ["table", "at"], ["picked"], { axis: 0 })
    .node("Add", ["STATE", "picked"], ["OUTPUT"])
    .node("Identity", ["OUTPUT"], ["STATE_OUT"])
    .toBytes();
}

const LOOKUP_CONFIG = `
name: "lookup"
backend: "onnxruntime"
max_batch_size: 16
input [
  { name: "INDEX" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "OFFSET" data_type: TYPE_INT64 dims: [ ] }
]
output [ { name: "VALUE" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching { preferred_batch_size: [ ${BATCH} ] max_queue_delay_microseconds: 600000000 }
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "shared_inputs" value { string_value: "OFFSET" } }
`;

const SUMS_CONFIG = `
name: "sums"
backend: "onnxruntime"
max_batch_size: 16
input [
  { name: "INDEX" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "OFFSET" data_type: TYPE_INT64 dims: [ ] }
]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 600000000
  oldest { max_candidate_sequences: 16 preferred_batch_size: [ ${BATCH} ] max_queue_delay_microseconds: 600000000 }
  state [ { input_name: "STATE" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "shared_inputs" value { string_value: "OFFSET" } }
`;

const index = (i: number) => [
  { name: "INDEX", datatype: "INT64", shape: [1, 1], data: [i] },
  { name: "OFFSET", datatype: "INT64", shape: [], data: [0] },
];

describe("a batch whose run one request fails", { timeout: 60_000 }, () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer({
      lookup: { config: LOOKUP_CONFIG, onnx: lookupModel() },
      // Each request run alone, at once.
      lookup_alone: {
        config: LOOKUP_CONFIG.replace('name: "lookup"', 'name: "lookup_alone"').replace(
          /^dynamic_batching .*$/m,
          "",
        ),
        onnx: lookupModel(),
      },
      sums: { config: SUMS_CONFIG, onnx: summingLookupModel() },
    });
  });
  after(() => server?.stop());

  it("stateless: the others are answered exactly, the one at fault is refused", async () => {
    const indexes = [1, 2, 3, BAD_INDEX, 4, 5, 6, 7, 8];
    const answers = await Promise.all(indexes.map((i) => infer(server.url, "lookup", index(i))));
    for (const [n, i] of indexes.entries()) {
      if (i === BAD_INDEX) {
        assert.equal(answers[n]!.status, 500);
        assert.match(String(answers[n]!.body.error), /out of (data )?bounds|idx=12/i);
      } else assert.deepEqual(outputData(answers[n]!, "VALUE"), [TABLE[i]]);
    }
  });

  it("over ModelStreamInfer, a run that fails is answered as Triton's stream answers it: named and flagged final; a refusal is not", async () => {
    const client = new TestClient(server.grpcPort);
    try {
      const stream = client.stream();
      const answers: ModelStreamInferResponseMessage[] = [];
      const done = new Promise<void>((resolve) => {
        stream.on("data", (answer: ModelStreamInferResponseMessage) => answers.push(answer));
        stream.on("end", resolve);
      });
      const lookup = (id: string, inputs: object[]) =>
        stream.write({ model_name: "lookup_alone", id, inputs });
      const int64 = (name: string, shape: number[], value: number) => ({
        name,
        datatype: "INT64",
        shape,
        contents: { int64_contents: [String(value)] },
      });
      lookup("fails", [int64("INDEX", [1, 1], BAD_INDEX), int64("OFFSET", [], 0)]);
      lookup("refused", [int64("INDEX", [1, 1], 1)]);
      stream.end();
      await done;
      const byId = new Map(answers.map((a) => [a.infer_response?.id, a]));
      const failed = byId.get("fails")!;
      assert.match(failed.error_message ?? "", /out of (data )?bounds|idx=12/i);
      assert.equal(failed.infer_response?.model_name, "lookup_alone");
      // Named as the request named it (Triton echoes the request's fields): no version.
      assert.equal(failed.infer_response?.model_version ?? "", "");
      assert.deepEqual(failed.infer_response?.parameters?.triton_final_response, {
        bool_param: true,
        parameter_choice: "bool_param",
      });
      const refused = byId.get("refused")!;
      assert.match(refused.error_message ?? "", /expected 2 inputs but got 1/);
      assert.equal(refused.infer_response?.parameters?.triton_final_response, undefined);
    } finally {
      client.close();
    }
  });

  it("stateful: the other sequences step on exactly; the one at fault keeps its state", async () => {
    const ids = Array.from({ length: BATCH }, (_, i) => 500 + i);
    const step = (id: number, i: number, start = false, end = false) =>
      infer(server.url, "sums", index(i), { id, start, end });
    // Step 1, all at once: every sequence starts.
    const first = await Promise.all(ids.map((id, n) => step(id, n, true)));
    for (const [n, answer] of first.entries()) assert.deepEqual(outputData(answer, "OUTPUT"), [TABLE[n]]);
    // Step 2: the fourth sequence's index is out of the table.
    const second = await Promise.all(ids.map((id, n) => step(id, n === 3 ? BAD_INDEX : 1)));
    for (const [n, answer] of second.entries()) {
      if (n === 3) assert.equal(answer.status, 500);
      else assert.deepEqual(outputData(answer, "OUTPUT"), [TABLE[n]! + TABLE[1]!]);
    }
    // Step 3 ends them all: the fourth goes on from its first step's state.
    const third = await Promise.all(ids.map((id) => step(id, 2, false, true)));
    for (const [n, answer] of third.entries()) {
      const expected = TABLE[n]! + (n === 3 ? 0 : TABLE[1]!) + TABLE[2]!;
      assert.deepEqual(outputData(answer, "OUTPUT"), [expected], `sequence ${ids[n]}`);
    }
  });
});
