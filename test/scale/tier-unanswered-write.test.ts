import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { type HttpAnswer, infer, outputData, type SequenceParams } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { accumulatorConfig, int32Input } from "../support/sequence-kit.ts";
import { missingTools, RedisServer, Replica } from "./support/scale-kit.ts";

// A step whose write the store was sent but did not answer (Redis frozen past the client's
// command timeout, 10 s) has an unknown outcome: the write waits in the connection and
// lands when Redis answers again. The client is told that the step may have been applied,
// and that only its sequence_step makes a retry safe; not that it failed, which would make
// a client without numbered steps send it again and have it applied twice.

const MODEL = "acc";
const CONFIG = accumulatorConfig(MODEL, 8, "max_sequence_idle_microseconds: 60000000");

const skip = missingTools(["redis-server", "redis-cli"]);

describe("a step whose write the store did not answer", { skip }, () => {
  let repository: TempRepository;
  let redis: RedisServer;
  let replica: Replica;

  before(async () => {
    repository = tempRepository({ [MODEL]: { config: CONFIG, onnx: accumulatorModel() } });
    redis = await RedisServer.start();
    replica = new Replica(repository.path, redis.url);
    await replica.ready();
  });

  after(async () => {
    redis?.resume();
    await replica?.stop();
    await redis?.stop();
    repository?.remove();
  });

  const add = (value: number, sequence: SequenceParams): Promise<HttpAnswer> =>
    infer(replica.url, MODEL, int32Input(value), sequence);
  const sum = (answer: HttpAnswer): number => outputData(answer, "OUTPUT")[0] as number;

  it("is told it may have been applied; its numbered retry is applied once, and the write lands", async () => {
    const numbered = 5001;
    const bare = 5002;
    assert.equal(sum(await add(1, { id: numbered, start: true, step: 1 })), 1);
    assert.equal(sum(await add(1, { id: bare, start: true })), 1);
    redis.pause();
    let answers: HttpAnswer[];
    try {
      answers = await Promise.all([add(10, { id: numbered, step: 2 }), add(10, { id: bare })]);
    } finally {
      redis.resume();
    }
    for (const [answer, id] of [
      [answers[0]!, numbered],
      [answers[1]!, bare],
    ] as const) {
      assert.equal(answer.status, 503, JSON.stringify(answer.body));
      const said = answer.body.error as string;
      assert.match(
        said,
        new RegExp(
          `writing the state of sequence ${id} of model '${MODEL}' in the state store at redis://127\\.0\\.0\\.1:\\d+ was not confirmed \\(it did not answer within 10 s\\): the step may have been applied, or may be when the store answers; retry it with its sequence_step to have it applied once \\(without one, a retry may apply it twice\\)`,
        ),
      );
      assert.doesNotMatch(said, /failed/);
    }
    // The write landed once Redis answered: the numbered retry is answered from it, not
    // applied again, and the unnumbered sequence holds the step too.
    assert.equal(sum(await add(10, { id: numbered, step: 2 })), 11);
    assert.equal(sum(await add(100, { id: numbered, step: 3 })), 111);
    assert.equal(sum(await add(100, { id: bare })), 111);
  });
});
