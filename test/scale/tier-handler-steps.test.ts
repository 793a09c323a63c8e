import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type HandlerRepository, handlerRepository, LOG_MODEL } from "../handlers/support/handler-kit.ts";
import { type HttpAnswer, infer, outputData, type SequenceParams } from "../support/http-client.ts";
import { missingTools, RedisServer, Replica } from "./support/scale-kit.ts";

// A handler model's sequence on two replicas sharing a Redis state store: a step sent to
// the replica whose copy is out of date (the other replica advanced the sequence) runs
// again on the store's state, with its own inputs, as an ONNX model's step does. It failed
// with a 500 (its inputs had gone to the handler's thread with the first run) and the
// sequence went on from an empty state.

const skip = missingTools(["redis-server", "redis-cli"]);

describe("a handler's step on a replica whose copy is out of date", { skip }, () => {
  let redis: RedisServer;
  let repository: HandlerRepository;
  let a: Replica;
  let b: Replica;

  before(async () => {
    redis = await RedisServer.start();
    repository = handlerRepository({ log: LOG_MODEL });
    a = new Replica(repository.path, redis.url);
    b = new Replica(repository.path, redis.url);
    await Promise.all([a.ready(), b.ready()]);
  });

  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await redis?.stop();
    repository?.remove();
  });

  const add = (replica: Replica, values: number[], sequence: SequenceParams): Promise<HttpAnswer> =>
    infer(
      replica.url,
      "log",
      [{ name: "IN", datatype: "UINT8", shape: [values.length], data: values }],
      sequence,
    );
  const sum = (answer: HttpAnswer): number => outputData(answer, "SUM")[0] as number;

  it("runs again on the store's state, with its own inputs", async () => {
    assert.equal(sum(await add(a, [1], { id: 5, start: true })), 1);
    assert.equal(sum(await add(b, [2], { id: 5 })), 3);
    // A's copy holds [1]: the step runs again on the store's [1, 2].
    assert.equal(sum(await add(a, [3, 4], { id: 5 })), 10);
    assert.equal(sum(await add(b, [5], { id: 5, end: true })), 15);
    // The version check caught A's stale copy: the step ran again, not A's first run.
    assert.ok(((await a.summary("log")).tier as { conflicts: number }).conflicts >= 1);
  });
});
