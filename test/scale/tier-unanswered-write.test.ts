import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Metadata, type ServiceError, status } from "@grpc/grpc-js";
import type { ModelInferRequestMessage } from "../../src/frontends/grpc/messages.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { callError, TestClient } from "../grpc/support/grpc-harness.ts";
import { rawBytes } from "../support/grpc-stream-call.ts";
import { type HttpAnswer, infer, outputData, postJson, type SequenceParams } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { accumulatorConfig, int32Input } from "../support/sequence-kit.ts";
import { missingTools, RedisServer, Replica } from "./support/scale-kit.ts";

// A step whose write the store was sent but did not answer (Redis frozen past the client's
// command timeout, 10 s) has an unknown outcome: the write waits in the connection and
// lands when Redis answers again. The client is told that the step may have been applied,
// and that only its sequence_step makes a retry safe; not that it failed, which would make
// a client without numbered steps send it again and have it applied twice. Nor is it told
// in the signals that clients and gateways retry on their own (503 with Retry-After,
// UNAVAILABLE with grpc-retry-pushback-ms): it is 504 Gateway Timeout, DEADLINE_EXCEEDED
// over gRPC, in every family, with no retry hint.

const MODEL = "acc";
const CONFIG = accumulatorConfig(MODEL, 8, "max_sequence_idle_microseconds: 60000000");

const skip = missingTools(["redis-server", "redis-cli"]);

const notConfirmed = (id: number): RegExp =>
  new RegExp(
    `writing the state of sequence ${id} of model '${MODEL}' in the state store at redis://127\\.0\\.0\\.1:\\d+ was not confirmed \\(it did not answer within 10 s\\): the step may have been applied, or may be when the store answers; retry it with its sequence_step to have it applied once \\(without one, a retry may apply it twice\\)`,
  );

describe("a step whose write the store did not answer", { skip }, () => {
  let repository: TempRepository;
  let redis: RedisServer;
  let replica: Replica;
  let grpc: TestClient;

  before(async () => {
    repository = tempRepository({ [MODEL]: { config: CONFIG, onnx: accumulatorModel() } });
    redis = await RedisServer.start();
    replica = new Replica(repository.path, redis.url);
    await replica.ready();
    grpc = new TestClient(replica.ports.grpc);
  });

  after(async () => {
    grpc?.close();
    redis?.resume();
    await replica?.stop();
    await redis?.stop();
    repository?.remove();
  });

  const add = (value: number, sequence: SequenceParams): Promise<HttpAnswer> =>
    infer(replica.url, MODEL, int32Input(value), sequence);
  const sum = (answer: HttpAnswer): number => outputData(answer, "OUTPUT")[0] as number;
  /** An OpenVINO Model Server client's step (TF-Serving REST): never numbered unless it says so. */
  const predict = (id: number, value: number, step?: number): Promise<HttpAnswer> =>
    postJson(`${replica.url}/v1/models/${MODEL}:predict`, {
      inputs: {
        INPUT: [[value]],
        sequence_id: [id],
        ...(step === undefined ? {} : { sequence_step: [step] }),
      },
    });
  const grpcStep = (id: number, value: number): Promise<unknown> => {
    const request: ModelInferRequestMessage = {
      model_name: MODEL,
      parameters: { sequence_id: { int64_param: String(id) } },
      inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1] }],
      raw_input_contents: [rawBytes(Int32Array.of(value))],
    };
    return grpc.unary("ModelInfer", request);
  };

  it("is told it may have been applied, in no retry-inviting status; its numbered retry is applied once, and the write lands", async () => {
    const numbered = 5001;
    const bare = 5002;
    const overGrpc = 5003;
    const ovms = 5004;
    assert.equal(sum(await add(1, { id: numbered, start: true, step: 1 })), 1);
    for (const id of [bare, overGrpc, ovms]) assert.equal(sum(await add(1, { id, start: true })), 1);
    redis.pause();
    let answers: HttpAnswer[];
    let grpcError: ServiceError;
    let ovmsAnswer: HttpAnswer;
    try {
      [answers, grpcError, ovmsAnswer] = await Promise.all([
        Promise.all([add(10, { id: numbered, step: 2 }), add(10, { id: bare })]),
        callError(grpcStep(overGrpc, 10)),
        predict(ovms, 10),
      ]);
    } finally {
      redis.resume();
    }
    for (const [answer, id] of [
      [answers[0]!, numbered],
      [answers[1]!, bare],
      [ovmsAnswer, ovms],
    ] as const) {
      assert.equal(answer.status, 504, JSON.stringify(answer.body));
      assert.equal(answer.headers["retry-after"], undefined, "no Retry-After");
      const said = answer.body.error as string;
      assert.match(said, notConfirmed(id));
      assert.doesNotMatch(said, /failed/);
    }
    assert.equal(grpcError.code, status.DEADLINE_EXCEEDED, grpcError.details);
    assert.match(grpcError.details, notConfirmed(overGrpc));
    assert.ok(grpcError.metadata instanceof Metadata);
    assert.deepEqual(grpcError.metadata.get("grpc-retry-pushback-ms"), [], "no retry pushback");

    // The write landed once Redis answered: the numbered retry is answered from it, not
    // applied again, and the unnumbered sequences hold the step too.
    assert.equal(sum(await add(10, { id: numbered, step: 2 })), 11);
    assert.equal(sum(await add(100, { id: numbered, step: 3 })), 111);
    assert.equal(sum(await add(100, { id: bare })), 111);
    assert.equal(sum(await add(100, { id: overGrpc })), 111);
    // The OVMS client's step was sent without a number: following the advice now, numbered,
    // it is refused (its answer was never kept), in words that say only a step numbered
    // from the first can be retried safely; the refusal applies nothing.
    const late = await predict(ovms, 10, 2);
    assert.equal(late.status, 412, JSON.stringify(late.body));
    assert.equal(
      late.body.error,
      `step 2 of sequence ${ovms} of model '${MODEL}' was already applied and its answer is no longer kept (it was sent without a sequence_step, or its answer did not fit in the 256 KiB of answers kept: only a step sent with its sequence_step from the first can be retried safely)`,
    );
    assert.equal(sum(await add(100, { id: ovms })), 111);
  });
});
