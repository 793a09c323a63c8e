import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type HandlerRepository, handlerRepository, LOG_MODEL } from "../handlers/support/handler-kit.ts";
import { type HttpAnswer, infer, outputData, type SequenceParams } from "../support/http-client.ts";
import { missingTools, type Replica, SharedStoreCluster } from "./support/scale-kit.ts";

// A handler model's sequence on two replicas sharing a Redis state store: a step sent to
// the replica whose copy is out of date (the other replica advanced the sequence) runs
// again on the store's state, with its own inputs, as an ONNX model's step does. It failed
// with a 500 (its inputs had gone to the handler's thread with the first run) and the
// sequence went on from an empty state.

const skip = missingTools(["redis-server", "redis-cli"]);

describe("a handler's step on a replica whose copy is out of date", { skip }, () => {
  let repository: HandlerRepository;
  let cluster: SharedStoreCluster;
  let a: Replica;
  let b: Replica;

  before(async () => {
    repository = handlerRepository({ log: LOG_MODEL });
    cluster = await SharedStoreCluster.start(repository.path, [[], []]);
    [a, b] = cluster.replicas as [Replica, Replica];
  });

  after(async () => {
    await cluster?.stop();
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
