import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { ModelStatisticsSnapshot } from "../../src/core/statistics.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { getJson, infer, inferBinary, outputData } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { difference, rowsOf, simpleConfig, simpleInputs, sum } from "./support/serving.ts";

// The dynamic batcher really batches requests of a real model, and every response still
// holds exactly its own rows; a thousand concurrent requests are all answered correctly;
// instance_group { count: 2 } runs two instances.

const ACCUMULATOR_CONFIG = `
name: "acc"
backend: "onnxruntime"
max_batch_size: 1
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "STATE" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
instance_group [ { count: 2 kind: KIND_CPU } ]
`;

let server: TestServer;
before(async () => {
  server = await startTestServer({
    // One instance, so concurrent requests can only be served by batching them.
    batched: {
      config: simpleConfig("batched", {
        dynamicBatching: "max_queue_delay_microseconds: 20000",
        instances: 1,
      }),
      onnx: addSubModel("INT32", [-1, 16]),
    },
    pair: {
      config: simpleConfig("pair", { dynamicBatching: "max_queue_delay_microseconds: 1000", instances: 2 }),
      onnx: addSubModel("INT32", [-1, 16]),
    },
    acc: { config: ACCUMULATOR_CONFIG, onnx: accumulatorModel() },
  });
});
after(() => server.stop());

async function statsOf(model: string): Promise<ModelStatisticsSnapshot> {
  const answer = await getJson(`${server.url}/v2/models/${model}/stats`);
  const [stats] = answer.body.model_stats as ModelStatisticsSnapshot[];
  assert.ok(stats !== undefined, JSON.stringify(answer.body));
  return stats;
}

describe("dynamic batching", () => {
  it("batches concurrent requests, and each response holds exactly its own rows", async () => {
    const REQUESTS = 48;
    let totalRows = 0;
    const requests = Array.from({ length: REQUESTS }, async (_, i) => {
      // 1 to 3 rows each, so a batch mixes requests of different sizes; half JSON, half binary.
      const rows = 1 + (i % 3);
      totalRows += rows;
      const a = rowsOf(i + 1, rows);
      const b = rowsOf(-(i + 1), rows).map((v) => v * 3);
      if (i % 2 === 0) {
        const answer = await infer(server.url, "batched", simpleInputs(a, b));
        assert.deepEqual(outputData(answer, "OUTPUT0"), sum(a, b), `request ${i}`);
        assert.deepEqual(outputData(answer, "OUTPUT1"), difference(a, b), `request ${i}`);
        assert.deepEqual(
          (answer.body.outputs as { shape: number[] }[]).map((o) => o.shape),
          [
            [rows, 16],
            [rows, 16],
          ],
        );
      } else {
        const answer = await inferBinary(server.url, "batched", [
          { name: "INPUT0", datatype: "INT32", shape: [rows, 16], data: new Int32Array(a) },
          { name: "INPUT1", datatype: "INT32", shape: [rows, 16], data: new Int32Array(b) },
        ]);
        assert.equal(answer.status, 200, answer.error);
        const int32 = (name: string) => {
          const bytes = answer.outputs.get(name)!;
          return [
            ...new Int32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)),
          ];
        };
        assert.deepEqual(int32("OUTPUT0"), sum(a, b), `request ${i}`);
        assert.deepEqual(int32("OUTPUT1"), difference(a, b), `request ${i}`);
      }
    });
    await Promise.all(requests);

    const stats = await statsOf("batched");
    assert.equal(stats.inference_stats.success.count, REQUESTS);
    assert.ok(
      stats.execution_count < REQUESTS,
      `${REQUESTS} concurrent requests took ${stats.execution_count} executions: they were not batched`,
    );
    assert.ok(
      stats.batch_stats.some((b) => b.batch_size > 1 && b.compute_infer.count > 0),
      `no execution had more than one row: ${JSON.stringify(stats.batch_stats)}`,
    );
    assert.ok(
      stats.batch_stats.every((b) => b.batch_size <= 8),
      "no batch exceeds max_batch_size",
    );
    // Every row ran exactly once: the batches' rows add up to the requests' rows.
    const rowsRun = stats.batch_stats.reduce((n, b) => n + b.batch_size * b.compute_infer.count, 0);
    assert.equal(rowsRun, totalRows);
    assert.equal(
      stats.batch_stats.reduce((n, b) => n + b.compute_infer.count, 0),
      stats.execution_count,
    );
  });
});

describe("a thousand concurrent requests", () => {
  it("are every one answered, correctly, and none lost", async () => {
    const REQUESTS = 1000;
    const answers = await Promise.all(
      Array.from({ length: REQUESTS }, async (_, i) => {
        const a = rowsOf(i);
        const b = rowsOf(REQUESTS - i);
        const answer = await infer(server.url, "pair", simpleInputs(a, b), {}, ["OUTPUT0"]);
        return { i, ok: answer.status === 200 && isDeepEqual(outputData(answer, "OUTPUT0"), sum(a, b)) };
      }),
    );
    const wrong = answers.filter((answer) => !answer.ok).map((answer) => answer.i);
    assert.deepEqual(wrong, [], `requests answered wrongly: ${wrong.slice(0, 20).join(", ")}`);
    const stats = await statsOf("pair");
    assert.equal(stats.inference_stats.success.count, REQUESTS);
    assert.equal(stats.inference_stats.fail.count, 0);
  });
});

function isDeepEqual(actual: unknown, expected: unknown): boolean {
  try {
    assert.deepEqual(actual, expected);
    return true;
  } catch {
    return false;
  }
}

describe("instance_group count 2", () => {
  it("the configuration says two instances", async () => {
    const config = (await getJson(`${server.url}/v2/models/pair/config`)).body;
    assert.deepEqual(
      (config.instance_group as { count: number }[]).map((g) => g.count),
      [2],
    );
  });

  it("runs two instances: two sequences take one slot on each", async () => {
    const value = (v: number) => [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [v] }];
    // max_batch_size 1: each instance has one slot, so two live sequences need both instances.
    assert.deepEqual(
      outputData(await infer(server.url, "acc", value(5), { id: 11, start: true }), "OUTPUT"),
      [5],
    );
    assert.deepEqual(
      outputData(await infer(server.url, "acc", value(7), { id: 12, start: true }), "OUTPUT"),
      [7],
    );
    const listed = (await getJson(`${server.url}/v2/models/acc/sequences`)).body.sequences as {
      id: number;
      instance: string;
    }[];
    assert.deepEqual(listed.map((s) => s.instance).sort(), ["acc_0", "acc_1"]);
    // Each instance keeps its own sequence's state.
    assert.deepEqual(outputData(await infer(server.url, "acc", value(1), { id: 11 }), "OUTPUT"), [6]);
    assert.deepEqual(outputData(await infer(server.url, "acc", value(2), { id: 12 }), "OUTPUT"), [9]);
    assert.deepEqual(
      outputData(await infer(server.url, "acc", value(10), { id: 11, end: true }), "OUTPUT"),
      [16],
    );
    assert.deepEqual(
      outputData(await infer(server.url, "acc", value(20), { id: 12, end: true }), "OUTPUT"),
      [29],
    );
  });
});
