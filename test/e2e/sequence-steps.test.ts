import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Metadata } from "@grpc/grpc-js";
import type { ModelInferResponseMessage } from "../../src/frontends/grpc/messages.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { accumulatorRequest } from "../support/grpc-stream-call.ts";
import { infer, outputData, postJson } from "../support/http-client.ts";
import { accumulatorConfig, assertError, int32Input, listSequences } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Exactly-once steps on one server (no shared tier): a request that says which step of
// its sequence it is (`sequence_step`) and was already applied is answered from the
// recorded answer, not run again, on every frontend; a step from before the answers kept,
// or one that skips a step, is refused by name. And the sequence id a load balancer hashes
// on (X-Sequence-Id, `sequence-id` metadata) names the sequence when the body does not.

const MODEL = "acc";
const CONFIG = accumulatorConfig(
  MODEL,
  8,
  "max_sequence_idle_microseconds: 60000000\n  oldest { max_candidate_sequences: 64 }",
);

let server: TestServer;
let grpc: TestClient;
before(async () => {
  server = await startTestServer(
    { [MODEL]: { config: CONFIG, onnx: accumulatorModel() } },
    { sagemakerPort: 0, sagemakerModel: MODEL },
  );
  grpc = new TestClient(server.grpcPort);
});
after(async () => {
  grpc.close();
  await server.stop();
});

const sumOf = async (answer: Promise<Awaited<ReturnType<typeof infer>>>): Promise<number> =>
  outputData(await answer, "OUTPUT")[0] as number;

function add(value: number, id: number, step: number, flags: { start?: boolean; end?: boolean } = {}) {
  return infer(server.url, MODEL, int32Input(value), { id, step, ...flags });
}

describe("sequence_step: retried steps are answered, not applied again", () => {
  it("KServe HTTP: a retry gets the recorded answer; older, skipped and restarting steps are handled", async () => {
    assert.equal(await sumOf(add(5, 11, 1, { start: true })), 5);
    // The START sent again (a client that never saw its answer) does not restart the sequence.
    assert.equal(await sumOf(add(5, 11, 1, { start: true })), 5);
    assert.equal(await sumOf(add(3, 11, 2)), 8);
    assert.equal(await sumOf(add(3, 11, 2)), 8);
    for (let step = 3; step <= 7; step++) assert.equal(await sumOf(add(1, 11, step)), 6 + step);
    // Steps 4..7 are kept (the last four), step 2 no longer.
    assert.equal(await sumOf(add(1, 11, 4)), 10);
    assertError(
      await add(1, 11, 2),
      400,
      "step 2 of sequence 11 of model 'acc' was already applied and its answer is no longer kept (the sequence has applied 7 steps; only the answers of the last 4 steps sent with a step number are kept)",
    );
    assertError(
      await add(1, 11, 9),
      400,
      "step 9 of sequence 11 of model 'acc' cannot run yet: the sequence has applied 7 steps, so the next is step 8",
    );
    assert.equal(await sumOf(add(100, 11, 8, { end: true })), 113);
  });

  it("a START refused for its step leaves no sequence behind, END or not", async () => {
    for (const [id, end] of [
      [13, true],
      [14, false],
    ] as const) {
      assertError(
        await add(5, id, 3, { start: true, end }),
        400,
        `step 3 of sequence ${id} of model 'acc' cannot run yet: the sequence has applied 0 steps, so the next is step 1`,
      );
      assert.ok(!(await listSequences(server.url, MODEL)).sequences.some((s) => String(s.id) === String(id)));
      assertError(
        await add(1, id, 1),
        400,
        `inference request for sequence ${id} to model 'acc' must specify the START flag on the first request of the sequence`,
      );
    }
  });

  it("an END refused for its step changes nothing: the sequence goes on, and its END with the right step ends it", async () => {
    assert.equal(await sumOf(add(5, 12, 1, { start: true })), 5);
    assertError(
      await add(1, 12, 5, { end: true }),
      400,
      "step 5 of sequence 12 of model 'acc' cannot run yet: the sequence has applied 1 steps, so the next is step 2",
    );
    assert.equal(await sumOf(add(3, 12, 2)), 8);
    assert.equal(await sumOf(add(1, 12, 3, { end: true })), 9);
    assertError(
      await add(1, 12, 4),
      400,
      "inference request for sequence 12 to model 'acc' must specify the START flag on the first request of the sequence",
    );
  });

  it("a retry answered from its recorded answer counts as a success, not as an inference", async () => {
    const stats = async () => {
      const body = (await (await fetch(`${server.url}/v2/models/${MODEL}/stats`)).json()) as {
        model_stats: {
          inference_count: number;
          execution_count: number;
          inference_stats: { success: { count: number }; compute_infer: { count: number } };
        }[];
      };
      const [model] = body.model_stats;
      return [
        model!.inference_count,
        model!.execution_count,
        model!.inference_stats.success.count,
        model!.inference_stats.compute_infer.count,
      ];
    };
    const before = await stats();
    assert.equal(await sumOf(add(2, 12, 1, { start: true })), 2);
    assert.equal(await sumOf(add(3, 12, 2)), 5);
    assert.equal(await sumOf(add(3, 12, 2)), 5);
    const after = await stats();
    assert.deepEqual(
      after.map((n, i) => n - before[i]!),
      [2, 2, 3, 2],
      "inferences, executions, successes, compute_infer counts: the retry is a success alone",
    );
  });

  it("X-Sequence-Id names the sequence when the body does not, and must agree when it does", async () => {
    const post = (body: object, id: string) =>
      fetch(`${server.url}/v2/models/${MODEL}/infer`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-sequence-id": id },
        body: JSON.stringify(body),
      }).then(async (r) => ({ status: r.status, body: (await r.json()) as Record<string, unknown> }));
    const step = (value: number, parameters: object) => ({ parameters, inputs: int32Input(value) });
    const first = await post(step(4, { sequence_start: true }), "12");
    assert.equal(first.status, 200, JSON.stringify(first.body));
    const second = await post(step(6, {}), "12");
    assert.deepEqual((second.body.outputs as { data: number[] }[])[0]!.data, [10]);
    const other = await post(step(1, { sequence_id: 13 }), "12");
    assert.equal(other.status, 400);
    assert.equal(
      other.body.error,
      "the request names sequence 13, but its X-Sequence-Id header (or sequence-id metadata), by which a load balancer routes it, names 12",
    );
  });

  it("gRPC: the sequence-id metadata names the sequence; a retried sequence_step is answered", async () => {
    const metadata = new Metadata();
    metadata.set("sequence-id", "14");
    const call = (value: number, step: number, start = false) => {
      const { sequence_id: _named, ...parameters } = accumulatorRequest(MODEL, value, { id: 14, start })
        .parameters!;
      const request = {
        ...accumulatorRequest(MODEL, value, { id: 14, start }),
        parameters: { ...parameters, sequence_step: { int64_param: String(step) } },
      };
      return grpc.unary<ModelInferResponseMessage>("ModelInfer", request, undefined, metadata);
    };
    const value = (response: ModelInferResponseMessage) =>
      Buffer.from(response.raw_output_contents![0]!).readInt32LE(0);
    assert.equal(value(await call(2, 1, true)), 2);
    assert.equal(value(await call(3, 2)), 5);
    assert.equal(value(await call(3, 2)), 5);
    assert.equal(value(await call(1, 3)), 6);
  });

  it("TF-Serving REST: the sequence_step special input", async () => {
    const predict = (value: number, step: number, control = 0) =>
      postJson(`${server.url}/v1/models/${MODEL}:predict`, {
        inputs: {
          INPUT: [[value]],
          sequence_id: [15],
          sequence_step: [step],
          ...(control === 0 ? {} : { sequence_control_input: [control] }),
        },
      });
    const output = (answer: Awaited<ReturnType<typeof postJson>>) =>
      (answer.body.outputs as { OUTPUT: number[][] }).OUTPUT[0]![0];
    assert.equal(output(await predict(7, 1, 1)), 7);
    assert.equal(output(await predict(1, 2)), 8);
    assert.equal(output(await predict(1, 2)), 8);
    assert.equal(output(await predict(1, 3, 2)), 9);
  });

  it("SageMaker: sequence_step in the custom attributes", async () => {
    const port = server.server.sagemakerPort!;
    const invoke = (value: number, session: string, step: number) =>
      fetch(`http://127.0.0.1:${port}/invocations`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "x-amzn-sagemaker-session-id": session,
          "x-amzn-sagemaker-custom-attributes": `trace=abc, sequence_step=${step}`,
        },
        body: JSON.stringify({ inputs: int32Input(value) }),
      });
    const sum = async (response: Response) =>
      ((await response.json()) as { outputs: { data: number[] }[] }).outputs[0]!.data[0];
    const opened = await invoke(10, "NEW_SESSION", 1);
    const session = opened.headers.get("x-amzn-sagemaker-new-session-id")!.split(";")[0]!;
    assert.equal(await sum(opened), 10);
    assert.equal(await sum(await invoke(5, session, 2)), 15);
    assert.equal(await sum(await invoke(5, session, 2)), 15);
    assert.equal(await sum(await invoke(1, session, 3)), 16);
  });
});
