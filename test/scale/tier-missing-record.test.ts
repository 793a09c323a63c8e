import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { type HttpAnswer, infer, outputData, postJson, type SequenceParams } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { accumulatorConfig, findSequence, int32Input } from "../support/sequence-kit.ts";
import { missingTools, RedisServer, Replica } from "./support/scale-kit.ts";

// A sequence whose record is missing from the store is told why as far as the replica
// knows it: a loss of the store's data (a restart without persistence) is blamed only
// for sequences that began before it, not for every later sequence whose record is gone
// (deleted by hand, evicted, or never written because its START was refused); and a START
// the store refused leaves no sequence behind, as one the model refused does.

const MODEL = "acc";
const CONFIG = accumulatorConfig(
  MODEL,
  8,
  "max_sequence_idle_microseconds: 60000000\n  oldest { max_candidate_sequences: 64 }",
);

const skip = missingTools(["redis-server", "redis-cli"]);

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

describe("a sequence whose record is missing from the store", { skip }, () => {
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
    await replica?.stop();
    await redis?.stop();
    repository?.remove();
  });

  const add = (value: number, sequence: SequenceParams): Promise<HttpAnswer> =>
    infer(replica.url, MODEL, int32Input(value), sequence);
  const sum = (answer: HttpAnswer): number => outputData(answer, "OUTPUT")[0] as number;
  const stateLost = async (): Promise<number> =>
    ((await replica.summary(MODEL)).ended as Record<string, number>).state_lost!;

  it("is blamed on a loss of the store's data only when it began before the loss", async () => {
    // The store loses its data; the replica sees it, and the sequence it held is lost.
    assert.equal(sum(await add(1, { id: 1001, start: true })), 1);
    await redis.restart();
    let answer = await add(1, { id: 1001 });
    for (let tries = 0; answer.status === 503 && tries < 200; tries++) {
      await pause(25);
      answer = await add(1, { id: 1001 });
    }
    assert.match(answer.body.error as string, /was lost: .* \(it restarted without persistence\)/);
    const lostBefore = await stateLost();

    // A sequence started after the loss, whose record is then deleted by hand.
    assert.equal(sum(await add(5, { id: 1002, start: true })), 5);
    redis.cli("del", `seqserve:seq:${MODEL}:1:u:1002`);
    const gone = await add(1, { id: 1002 });
    assert.equal(gone.status, 400, JSON.stringify(gone.body));
    const said = gone.body.error as string;
    assert.doesNotMatch(said, /was lost|restarted without persistence/);
    assert.match(
      said,
      /sequence 1002 to model 'acc' must specify the START flag .*: its record is no longer in the state store at redis:\/\/127\.0\.0\.1:\d+ \(it expired after the sequence's idle timeout, or was evicted or deleted\)/,
    );
    assert.equal(await stateLost(), lostBefore, "not counted as lost with the store's data");
  });

  it("is OVMS's 404 to a TF-Serving client when the store lost its data", async () => {
    const predict = (value: number, control?: 1 | 2) =>
      postJson(`${replica.url}/v1/models/${MODEL}:predict`, {
        inputs: {
          INPUT: [[value]],
          sequence_id: [1004],
          ...(control === undefined ? {} : { sequence_control_input: [control] }),
        },
      });
    const started = await predict(1, 1);
    assert.equal(started.status, 200, JSON.stringify(started.body));
    await redis.restart();
    let answer = await predict(1);
    for (let tries = 0; answer.status === 503 && tries < 200; tries++) {
      await pause(25);
      answer = await predict(1);
    }
    // OVMS pairs its text for a missing sequence with NOT_FOUND (status.cpp, http_server.cpp).
    assert.equal(answer.status, 404, JSON.stringify(answer.body));
    assert.deepEqual(answer.body, { error: "Sequence with provided ID does not exist" });
  });

  it("leaves no sequence behind when the store refuses its START", async () => {
    redis.cli("config", "set", "maxmemory-policy", "noeviction");
    redis.cli("config", "set", "maxmemory", "1");
    try {
      const refused = await add(7, { id: 1003, start: true });
      assert.equal(refused.status, 503, JSON.stringify(refused.body));
      assert.match(refused.body.error as string, /the state store is full \(maxmemory\)/);
      assert.equal(await findSequence(replica.url, MODEL, 1003), undefined, "no sequence 1003 is held");
    } finally {
      redis.cli("config", "set", "maxmemory", "0");
    }
    // Its next request is told to START, as the client whose START was refused must.
    const next = await add(1, { id: 1003 });
    assert.equal(next.status, 400, JSON.stringify(next.body));
    assert.match(next.body.error as string, /must specify the START flag/);
    assert.doesNotMatch(next.body.error as string, /was lost/);
    assert.equal(sum(await add(7, { id: 1003, start: true })), 7);
  });
});
