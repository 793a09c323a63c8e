import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import {
  deleteJson,
  type HttpAnswer,
  infer,
  outputData,
  type SequenceParams,
} from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { accumulatorConfig, int32Input } from "../support/sequence-kit.ts";
import { missingTools, type Replica, SharedStoreCluster } from "./support/scale-kit.ts";

// With a shared state store, a replica takes up a sequence another replica started (from
// its record in Redis) only when its own --max-state-bytes has room for the state: a
// replica that takes over a dead one's sequences is where the budget matters most. Without
// room the step is refused (429, naming the flag), the record stays in the store, and the
// sequence goes on where there is room. Ending or closing a sequence needs no room.

const MODEL = "acc";
const CONFIG = accumulatorConfig(MODEL, 8, "max_sequence_idle_microseconds: 60000000");
/** The accumulator keeps one INT32: 4 bytes a sequence; the small replica has room for one. */
const SMALL_BUDGET = 4;

const skip = missingTools(["redis-server", "redis-cli"]);

describe("a replica takes a sequence from the shared store only with room in its state budget", {
  skip,
}, () => {
  let repository: TempRepository;
  let cluster: SharedStoreCluster;
  let roomy: Replica;
  let small: Replica;

  before(async () => {
    repository = tempRepository({ [MODEL]: { config: CONFIG, onnx: accumulatorModel() } });
    cluster = await SharedStoreCluster.start(repository.path, [
      [],
      ["--max-state-bytes", String(SMALL_BUDGET)],
    ]);
    [roomy, small] = cluster.replicas as [Replica, Replica];
  });

  after(async () => {
    await cluster?.stop();
    repository?.remove();
  });

  const add = (replica: Replica, value: number, sequence: SequenceParams): Promise<HttpAnswer> =>
    infer(replica.url, MODEL, int32Input(value), sequence);
  const sum = (answer: HttpAnswer): number => outputData(answer, "OUTPUT")[0] as number;

  it("takes the first sequence, refuses the second and leaves it in the store, where it goes on", async () => {
    assert.equal(sum(await add(roomy, 1, { id: 1, start: true })), 1);
    assert.equal(sum(await add(roomy, 10, { id: 2, start: true })), 10);
    assert.equal(sum(await add(roomy, 100, { id: 3, start: true })), 100);
    // The small replica takes sequence 1 up: its 4 bytes fit.
    assert.equal(sum(await add(small, 2, { id: 1 })), 3);
    // Sequence 2 does not: refused before anything changes.
    const refused = await add(small, 20, { id: 2 });
    assert.equal(refused.status, 429, JSON.stringify(refused.body));
    assert.match(
      String(refused.body.error),
      /sequence 2 of model 'acc' would hold 4 bytes.*--max-state-bytes 4/,
    );
    assert.equal((await small.summary(MODEL)).state_bytes, SMALL_BUDGET);
    // The record was left as it was: sequence 2 goes on from 10 on the replica with room.
    assert.equal(sum(await add(roomy, 5, { id: 2 })), 15);
    // An END frees the state it takes up: the small replica ends sequence 2 all the same,
    // from the state the other replica left, and closes sequence 3.
    assert.equal(sum(await add(small, 1, { id: 2, end: true })), 16);
    const closed = await deleteJson(`${small.url}/v2/models/${MODEL}/sequences/3`);
    assert.equal(closed.status, 200, JSON.stringify(closed.body));
    // Its END makes room, and sequence 1 ends where it is.
    assert.equal(sum(await add(small, 4, { id: 1, end: true })), 7);
    assert.equal((await small.summary(MODEL)).state_bytes, 0);
  });
});
