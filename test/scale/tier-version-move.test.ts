import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { type HttpAnswer, infer, outputData, postJson, type SequenceParams } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { accumulatorConfig, int32Input } from "../support/sequence-kit.ts";
import { missingTools, RedisServer, type Replica, startReplicas, stopReplicas } from "./support/scale-kit.ts";

// A reload on one replica that moves live sequences to a new version of their model moves
// their records in the shared store with them: the old version's record is fenced with
// the move (a replica still serving the old version refuses the sequence's next step,
// saying where it went, rather than forking it), the new version's record carries the
// state on from the current record (a step another replica made before the move is kept),
// and a replica serving the new version continues it after the first one dies.

const MODEL = "accumulator";
const CONFIG = accumulatorConfig(MODEL, 8, "max_sequence_idle_microseconds: 60000000");

const skip = missingTools(["redis-server", "redis-cli"]);

const add = (replica: Replica, value: number, sequence: SequenceParams): Promise<HttpAnswer> =>
  infer(replica.url, MODEL, int32Input(value), sequence);
const sum = (answer: HttpAnswer): number => outputData(answer, "OUTPUT")[0] as number;

describe("a sequence moved to a new version by a reload on one replica", { skip }, () => {
  let repository: TempRepository;
  let redis: RedisServer;
  let replicas: Replica[] = [];

  before(async () => {
    repository = tempRepository({ [MODEL]: { config: CONFIG, onnx: accumulatorModel() } });
    redis = await RedisServer.start();
  });

  after(async () => {
    await stopReplicas(replicas);
    await redis?.stop();
    repository?.remove();
  });

  it("moves its record: the old version's refuses further steps, the new version's goes on from the current state", async () => {
    const explicit = ["--model-control-mode", "explicit", "--load-model", MODEL];
    const [reloading, serving1] = (replicas = await startReplicas(repository.path, redis.url, [
      explicit,
      [],
    ]));
    assert.ok(reloading !== undefined && serving1 !== undefined);
    const moved = 14001;
    const advancedElsewhere = 14002;
    for (const [step, total] of [
      [1, 1],
      [2, 3],
      [3, 6],
    ] as const) {
      assert.equal(sum(await add(reloading, step, { id: moved, start: step === 1 })), total);
    }
    assert.equal(sum(await add(reloading, 1, { id: advancedElsewhere, start: true })), 1);

    // Version 2 appears; only the explicit replica loads it. Its live sequences move to it.
    repository.add(MODEL, { config: CONFIG, onnx: { 2: accumulatorModel() } });
    const loaded = await postJson(`${reloading.url}/v2/repository/models/${MODEL}/load`, {});
    assert.equal(loaded.status, 200, JSON.stringify(loaded.body));

    // Before the moved copy's next step, a replica serving version 1 advances the record
    // it still holds under version 1: that step must not be lost by the move.
    assert.equal(sum(await add(serving1, 10, { id: advancedElsewhere })), 11);
    assert.equal(sum(await add(reloading, 100, { id: advancedElsewhere })), 111);

    for (const [step, total] of [
      [4, 10],
      [5, 15],
      [6, 21],
    ] as const) {
      assert.equal(sum(await add(reloading, step, { id: moved })), total);
    }

    // Version 1's records are fenced with the move: the replica serving version 1 (which
    // holds an old copy of one of them, and none of the other) says where they went.
    for (const id of [moved, advancedElsewhere]) {
      const refused = await add(serving1, 7, { id });
      assert.equal(refused.status, 503, JSON.stringify(refused.body));
      assert.match(
        refused.body.error as string,
        new RegExp(
          `sequence ${id} of model '${MODEL}' moved to version 2 of model '${MODEL}'; this replica serves version 1: send its requests to a replica serving version 2`,
        ),
      );
      const old = `seqserve:seq:${MODEL}:1:u:${id}`;
      assert.equal(redis.cli("hget", old, "moved_to"), "2");
      assert.equal(redis.cli("hget", old, "ended"), "reloaded");
      assert.equal(redis.cli("hexists", `seqserve:seq:${MODEL}:2:u:${id}`, "ended"), "0");
    }

    // The replica that moved them dies; one serving version 2 goes on from their state.
    await reloading.kill();
    const [serving2] = await startReplicas(repository.path, redis.url, [explicit]);
    replicas.push(serving2!);
    assert.equal(sum(await add(serving2!, 7, { id: moved })), 28);
    assert.equal(sum(await add(serving2!, 1, { id: advancedElsewhere, end: true })), 112);
  });
});
