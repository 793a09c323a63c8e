import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import type { ServerError } from "../../src/core/errors.ts";
import type { SequenceSummary } from "../../src/core/model.ts";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { callError, TestClient } from "../grpc/support/grpc-harness.ts";
import { infer, inferBody, type JsonInput, postJson } from "../support/http-client.ts";
import {
  ACCUMULATOR_CONTROLS,
  accumulate,
  accumulatorConfig,
  assertError,
  int32Input,
  listSequences,
  startFlagMessage,
  waitFor,
  waitForSequence,
} from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Ending well: on stop the server refuses new sequences (503) but lets live ones send
// their remaining requests until they end or the exit timeout passes, then ends the rest
// (counted "shutdown"); and a failed END request still frees its sequence.

const IDLE = "max_sequence_idle_microseconds: 60000000";

/** The sequences summary of `model`, read in-process: it outlives the HTTP endpoint. */
function summaryOf(server: TestServer, model: string): () => SequenceSummary {
  const admin = server.server.repository.model(model).sequences;
  assert.ok(admin !== undefined);
  return () => admin.summary();
}

/**
 * The accumulator with a table lookup: acc = STATE*(1-START) + TABLE[INPUT]*READY, TABLE
 * = [0..9]. An INPUT outside 0..9 makes the run itself fail (an out-of-range gather).
 */
function fragileAccumulatorModel(): Uint8Array {
  return new OnnxModelBuilder({ opset: 17 })
    .input("INPUT", "INT64", ["batch", 1])
    .input("START", "INT32", ["batch", 1])
    .input("READY", "INT32", ["batch", 1])
    .input("STATE", "INT32", ["batch", 1])
    .output("OUTPUT", "INT32", ["batch", 1])
    .output("STATE_OUT", "INT32", ["batch", 1])
    .initializer("table", "INT32", [10], new Int32Array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]))
    .initializer("one", "INT32", [1], new Int32Array([1]))
    .node("Gather", ["table", "INPUT"], ["looked_up"], { axis: 0 })
    .node("Sub", ["one", "START"], ["keep"])
    .node("Mul", ["STATE", "keep"], ["kept"])
    .node("Mul", ["looked_up", "READY"], ["added"])
    .node("Add", ["kept", "added"], ["OUTPUT"])
    .node("Identity", ["OUTPUT"], ["STATE_OUT"])
    .toBytes();
}

const FRAGILE_CONFIG = `
name: "fragile"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  ${IDLE}
  ${ACCUMULATOR_CONTROLS}
}
`;

const int64Input = (value: number): JsonInput[] => [
  { name: "INPUT", datatype: "INT64", shape: [1, 1], data: [value] },
];

describe("ending well", { timeout: 60_000 }, () => {
  it("on stop, new starts get 503 while a live sequence sends its remaining requests to its end", async () => {
    const server = await startTestServer(
      {
        acc: { config: accumulatorConfig("acc", 4, IDLE), onnx: accumulatorModel() },
        plain: { onnx: identityModel("FP32", [-1, 2]) },
      },
      { exitTimeoutSecs: 30 },
    );
    const grpc = new TestClient(server.grpcPort);
    const summary = summaryOf(server, "acc");
    assert.equal(await accumulate(server.url, "acc", 5, { id: 1, start: true }), 5);
    let stopped = false;
    const stopping = server.stop().then(() => {
      stopped = true;
    });

    const refused = await infer(server.url, "acc", int32Input(1), { id: 2, start: true });
    assertError(
      refused,
      503,
      /^Server is stopping, scheduler for model has stopped accepting new inference requests$/,
    );
    // A start on the live id would begin a new sequence: refused too, and the old one goes on.
    assertError(
      await infer(server.url, "acc", int32Input(1), { id: 1, start: true }),
      503,
      /^Server is stopping/,
    );
    assert.equal(await accumulate(server.url, "acc", 3, { id: 1 }), 8);
    // Stateless requests are refused as Triton's stopped scheduler refuses them, and the
    // health checks say the server is exiting (a balancer sends the next ones elsewhere).
    assertError(
      await infer(server.url, "plain", [{ name: "INPUT0", datatype: "FP32", shape: [1, 2], data: [1, 2] }]),
      503,
      /^\[request id: <id_unknown>\] Server is stopping, scheduler for model has stopped accepting new inference requests$/,
    );
    for (const health of ["live", "ready"]) {
      const answer = await fetch(`${server.url}/v2/health/${health}`);
      assert.deepEqual([answer.status, await answer.json()], [503, { error: "Server exiting" }], health);
    }
    for (const rpc of ["ServerLive", "ServerReady"]) {
      const refused = await callError(grpc.unary(rpc, {}));
      assert.deepEqual([refused.code, refused.details], [status.UNAVAILABLE, "Server exiting"], rpc);
    }
    // Nor is any model ready, though its live sequence goes on: Triton's ModelIsReady
    // refuses "Server not ready" once the server is not READY.
    const modelReady = await fetch(`${server.url}/v2/models/acc/ready`);
    assert.deepEqual([modelReady.status, await modelReady.json()], [503, { error: "Server not ready" }]);
    const refusedReady = await callError(grpc.unary("ModelReady", { name: "acc" }));
    assert.deepEqual([refusedReady.code, refusedReady.details], [status.UNAVAILABLE, "Server not ready"]);
    grpc.close();
    assert.equal(stopped, false, "the server stopped while a sequence was live");
    assert.equal(await accumulate(server.url, "acc", 2, { id: 1, end: true }), 10);
    // With nothing live the stop completes, long before the 30 s exit timeout.
    await stopping;
    assert.deepEqual(summary(), {
      live: 0,
      backlog: 0,
      stateBytes: 0,
      // The slab reserved for the model's 4 slots stays until the model is unloaded.
      stateAllocatedBytes: 16,
      ended: {
        end: 1,
        timeout: 0,
        restart: 0,
        forced: 0,
        cancelled: 0,
        backlog_timeout: 0,
        evicted: 0,
        shutdown: 0,
        expired: 0,
        unloaded: 0,
        reloaded: 0,
        instance_failed: 0,
        state_lost: 0,
      },
    });
  });

  it("on stop, the repository API loads and unloads nothing, as Triton answers ('Server not ready'), while live sequences finish", async () => {
    const server = await startTestServer(
      { acc: { config: accumulatorConfig("acc", 4, IDLE), onnx: accumulatorModel() } },
      { exitTimeoutSecs: 30, modelControlMode: "explicit", loadModels: ["acc"] },
    );
    assert.equal(await accumulate(server.url, "acc", 5, { id: 1, start: true }), 5);
    const stopping = server.stop();
    for (const action of ["load", "unload"]) {
      const answer = await postJson(`${server.url}/v2/repository/models/acc/${action}`, {});
      assertError(answer, 503, /^Server not ready$/);
    }
    assert.equal(await accumulate(server.url, "acc", 2, { id: 1, end: true }), 7);
    await stopping;
  });

  it("sequences still live when the exit timeout passes are ended, counted 'shutdown'", async () => {
    // Utilization 1 on two slots with a long delay: a lone request waits, so one sequence
    // can have a request in the queue when the time is up.
    const batching = `${IDLE}
  direct { max_queue_delay_microseconds: 60000000 minimum_slot_utilization: 1 }`;
    const server = await startTestServer(
      { pair: { config: accumulatorConfig("pair", 2, batching), onnx: accumulatorModel() } },
      { exitTimeoutSecs: 1 },
    );
    const summary = summaryOf(server, "pair");
    const [a, b] = await Promise.all([
      accumulate(server.url, "pair", 1, { id: 1, start: true }),
      accumulate(server.url, "pair", 2, { id: 2, start: true }),
    ]);
    assert.deepEqual([a, b], [1, 2]);
    const waiting = infer(server.url, "pair", int32Input(10), { id: 1 });
    await waitForSequence(server.url, "pair", 1, (s) => s.queued === 1);

    const pair = server.server.repository.model("pair");
    await server.stop();
    assertError(await waiting, 503, "the server is shutting down");
    // A request for a sequence the deadline ended is told so, not asked for a START.
    const late = await callError(
      pair.infer({
        id: "",
        inputs: new Map([["INPUT", { datatype: "INT32", shape: [1, 1], data: Int32Array.of(1) }]]),
        outputs: undefined,
        parameters: {},
        sequence: { id: 2n, start: false, end: false, timeoutUs: undefined },
      }),
    );
    assert.equal((late as unknown as ServerError).code, "UNAVAILABLE");
    assert.equal(late.message, "the server is shutting down: sequence 2 of model 'pair' has ended with it");
    assert.deepEqual(summary(), {
      live: 0,
      backlog: 0,
      stateBytes: 0,
      stateAllocatedBytes: 8,
      ended: {
        end: 0,
        timeout: 0,
        restart: 0,
        forced: 0,
        cancelled: 0,
        backlog_timeout: 0,
        evicted: 0,
        shutdown: 2,
        expired: 0,
        unloaded: 0,
        reloaded: 0,
        instance_failed: 0,
        state_lost: 0,
      },
    });
  });

  it("a client that gives up on a waiting request ends its sequence (counted 'cancelled')", async () => {
    const batching = `${IDLE}
  direct { max_queue_delay_microseconds: 60000000 minimum_slot_utilization: 1 }`;
    const server = await startTestServer({
      pair: { config: accumulatorConfig("pair", 2, batching), onnx: accumulatorModel() },
    });
    try {
      await Promise.all([
        accumulate(server.url, "pair", 1, { id: 1, start: true }),
        accumulate(server.url, "pair", 2, { id: 2, start: true }),
      ]);
      const abort = new AbortController();
      const gaveUp = fetch(`${server.url}/v2/models/pair/infer`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: inferBody(int32Input(10), { id: 1 }),
        signal: abort.signal,
      }).catch((error: unknown) => error);
      await waitForSequence(server.url, "pair", 1, (s) => s.queued === 1);
      abort.abort();
      assert.ok((await gaveUp) instanceof Error);
      const summary = await waitFor("the sequence to end", async () => {
        const listing = await listSequences(server.url, "pair");
        return listing.summary.ended.cancelled === 1 ? listing.summary : undefined;
      });
      assert.deepEqual([summary.live, summary.state_bytes], [1, 4]);
      assertError(
        await infer(server.url, "pair", int32Input(1), { id: 1 }),
        400,
        startFlagMessage(1, "pair"),
      );
      // The other sequence goes on, with a new partner in the freed slot.
      assert.deepEqual(
        await Promise.all([
          accumulate(server.url, "pair", 5, { id: 3, start: true, end: true }),
          accumulate(server.url, "pair", 5, { id: 2, end: true }),
        ]),
        [5, 7],
      );
    } finally {
      await server.stop();
    }
  });

  it("a failed request keeps the sequence's state; a failed END still frees the sequence", async () => {
    const server = await startTestServer({
      fragile: { config: FRAGILE_CONFIG, onnx: fragileAccumulatorModel() },
    });
    try {
      const step = (value: number, flags: { id: number; start?: boolean; end?: boolean }) =>
        infer(server.url, "fragile", int64Input(value), flags);
      assert.deepEqual((await step(3, { id: 1, start: true })).body.outputs, [
        { name: "OUTPUT", datatype: "INT32", shape: [1, 1], data: [3] },
      ]);
      const failedMiddle = await step(99, { id: 1 });
      assert.equal(failedMiddle.status, 500, JSON.stringify(failedMiddle.body));
      // The step that failed did not touch the state.
      assert.equal((await step(4, { id: 1 })).status, 200);
      const listed = await listSequences(server.url, "fragile");
      assert.deepEqual(
        listed.sequences.map((s) => [s.id, s.stateBytes]),
        [[1n, 4]],
      );

      const failedEnd = await step(99, { id: 1, end: true });
      assert.equal(failedEnd.status, 500, JSON.stringify(failedEnd.body));
      const { sequences, summary } = await listSequences(server.url, "fragile");
      assert.deepEqual(sequences, []);
      assert.deepEqual([summary.live, summary.state_bytes, summary.ended.end], [0, 0, 1]);
      assertError(await step(1, { id: 1 }), 400, startFlagMessage(1, "fragile"));
      // The slot is free for the next sequence, which starts from zero.
      assert.deepEqual((await step(5, { id: 1, start: true, end: true })).body.outputs, [
        { name: "OUTPUT", datatype: "INT32", shape: [1, 1], data: [5] },
      ]);
    } finally {
      await server.stop();
    }
  });
});
