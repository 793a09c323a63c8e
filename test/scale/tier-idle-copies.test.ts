import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import {
  eventOf,
  type HandlerEvent,
  type HandlerRepository,
  handlerRepository,
  RECORDER,
  readEvents,
} from "../handlers/support/handler-kit.ts";
import {
  closeSession,
  invoke,
  jsonAnswer,
  newSession,
  sdkClient,
} from "../sagemaker/support/sagemaker-kit.ts";
import { infer, outputData } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { accumulatorConfig, findSequence, listSequences, waitFor } from "../support/sequence-kit.ts";
import { missingTools, type Replica, SharedStoreCluster } from "./support/scale-kit.ts";

// Copies of a sequence on the replicas its steps went to (a balancer without stickiness):
// on one server a sequence ends once, so it ends once across replicas too. A copy that
// reaches its idle timeout, or a session's copy quiet for a while, on a replica where
// the sequence does not go on, asks the tier first: one whose sequence ended, or went
// on, elsewhere is let go without a word (model code is not told, no end is counted or
// logged); the current one times out as on one server, and a session keeps its expiry.
// Without the question, the replica that did not see a sequence's END told model code of
// a second, false `timeout` end with stale state, and a session closed on another replica
// stayed live, counted and listed active, until its expiry (20 minutes).

const skip = missingTools(["redis-server", "redis-cli"]);

/** Handler model code that adds X to its sequence's sum, and records each end with its replica's pid. */
const COUNTER = `${RECORDER}
export default {
  initialize(context: any) {
    eventsFile = context.model.parameters.events_file;
  },
  execute(requests: any[]) {
    return requests.map((request: any) => {
      const state = request.sequence.state;
      const sum = (state.get("sum") ?? 0) + Number(request.inputs.X.data[0]);
      state.set("sum", sum);
      return { outputs: { SUM: { datatype: "INT32", shape: [1, 1], data: Int32Array.of(sum) } } };
    });
  },
  sequenceEnded(sequence: any, reason: string) {
    record({ hook: "sequenceEnded", pid: process.pid, id: sequence.id, reason, sum: sequence.state.get("sum") });
  },
};
`;

const counterConfig = (eventsFile: string): string => `
backend: "typescript"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1, 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1, 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 2000000
  oldest { max_candidate_sequences: 8 }
}
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "events_file" value { string_value: "${eventsFile}" } }
`;

describe("a handler model's sequence spread over two replicas ends once", { skip }, () => {
  let repository: HandlerRepository;
  let cluster: SharedStoreCluster;
  let a: Replica;
  let b: Replica;

  before(async () => {
    repository = handlerRepository((eventsFile) => ({
      counter: { config: counterConfig(eventsFile), files: { "1/model.ts": COUNTER } },
    }));
    cluster = await SharedStoreCluster.start(repository.path, [[], []]);
    [a, b] = cluster.replicas as [Replica, Replica];
  });

  after(async () => {
    await cluster?.stop();
    repository?.remove();
  });

  const add = async (
    replica: Replica,
    id: number,
    value: number,
    flags: { start?: boolean; end?: boolean } = {},
  ): Promise<number> => {
    const answer = await infer(
      replica.url,
      "counter",
      [{ name: "X", datatype: "INT32", shape: [1, 1], data: [value] }],
      { id, ...flags },
    );
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    return outputData(answer, "SUM")[0] as number;
  };
  const held = async (replica: Replica): Promise<string[]> =>
    (await listSequences(replica.url, "counter")).sequences.map((s) => String(s.id));
  const ends = (): string[] =>
    readEvents(repository.eventsFile)
      .filter((e) => e.hook === "sequenceEnded")
      .map((e) => `${e.pid === a.process.child.pid ? "A" : "B"} ${e.id} ${e.reason} sum=${e.sum}`)
      .sort();
  const idleLines = (replica: Replica): unknown[] =>
    replica.process.lines.filter((line) => JSON.stringify(line).includes("ms without a request"));

  it("the copy of the replica that did not see the END is let go, and a copy still current times out once", async () => {
    // Started and ended on A, with one middle step on B.
    assert.equal(await add(a, 1, 1, { start: true }), 1);
    assert.equal(await add(b, 1, 2), 3);
    assert.equal(await add(a, 1, 3, { end: true }), 6);
    await eventOf(repository.eventsFile, "A's end of sequence 1", (e: HandlerEvent) => e.id === "1");

    // Started on A, then going on on B (each step there keeps its record alive) until A's
    // copy, behind B's, has left A; then B's copy, the current one, reaches its idle timeout.
    assert.equal(await add(a, 2, 1, { start: true }), 1);
    let sum = 1;
    for (let value = 1; (await held(a)).includes("2"); value++) {
      sum += value;
      assert.equal(await add(b, 2, value), sum);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await waitFor("both replicas to hold no sequence", async () =>
      (await held(a)).length === 0 && (await held(b)).length === 0 ? true : undefined,
    );
    // A sequence begun and ended on each replica: its model code hears of its end after
    // any end that replica's copies had (one instance, one worker).
    assert.equal(await add(a, 8, 8, { start: true, end: true }), 8);
    assert.equal(await add(b, 9, 9, { start: true, end: true }), 9);
    await eventOf(repository.eventsFile, "the end of sequence 8", (e: HandlerEvent) => e.id === "8");
    await eventOf(repository.eventsFile, "the end of sequence 9", (e: HandlerEvent) => e.id === "9");

    assert.deepEqual(ends(), ["A 1 end sum=6", "A 8 end sum=8", `B 2 timeout sum=${sum}`, "B 9 end sum=9"]);
    const [onA, onB] = [await a.summary("counter"), await b.summary("counter")];
    assert.deepEqual(
      [onA.ended, onB.ended].map((e) => (e as Record<string, number>).timeout),
      [0, 1],
      "only the current copy's timeout is counted",
    );
    assert.ok((onA.tier as { handed_over: number }).handed_over >= 1);
    assert.ok((onB.tier as { handed_over: number }).handed_over >= 1);
    assert.equal(idleLines(a).length, 0);
    assert.equal(idleLines(b).length, 1);
  });
  it("abandoned with its last steps milliseconds apart on both replicas, it times out once, where it is current", async () => {
    const ids = [11, 12, 13, 14, 15];
    await Promise.all(
      ids.map(async (id) => {
        assert.equal(await add(a, id, 1, { start: true }), 1);
        assert.equal(await add(b, id, 2), 3);
        assert.equal(await add(a, id, 3), 6);
      }),
    );
    await waitFor("both replicas to hold none of them", async () => {
      const left = [...(await held(a)), ...(await held(b))].filter((id) => ids.includes(Number(id)));
      return left.length === 0 ? true : undefined;
    });
    // Markers: a replica's model code hears of their ends after any end its copies had.
    assert.equal(await add(a, 18, 1, { start: true, end: true }), 1);
    assert.equal(await add(b, 19, 1, { start: true, end: true }), 1);
    await eventOf(repository.eventsFile, "the end of sequence 18", (e: HandlerEvent) => e.id === "18");
    await eventOf(repository.eventsFile, "the end of sequence 19", (e: HandlerEvent) => e.id === "19");
    assert.deepEqual(
      ends().filter((end) => ids.some((id) => end.split(" ")[1] === String(id))),
      ids.map((id) => `A ${id} timeout sum=6`),
    );
  });
});

describe("a SageMaker session opened on one replica and closed on the other", { skip }, () => {
  const MODEL = "acc";
  let repository: TempRepository;
  let cluster: SharedStoreCluster;

  before(async () => {
    repository = tempRepository({
      // An idle timeout of 1 s: a session's copy quiet here that long is asked about.
      [MODEL]: {
        config: accumulatorConfig(
          MODEL,
          4,
          "max_sequence_idle_microseconds: 1000000\n  oldest { max_candidate_sequences: 8 }",
        ),
        onnx: accumulatorModel(),
      },
    });
    const sagemaker = ["--allow-sagemaker", "true", "--sagemaker-port", "0"];
    cluster = await SharedStoreCluster.start(repository.path, [sagemaker, sagemaker]);
  });

  after(async () => {
    await cluster?.stop();
    repository?.remove();
  });

  it("leaves the opener soon after, uncounted; a session still current there keeps its expiry", async () => {
    const [r1, r2] = cluster.replicas as [Replica, Replica];
    const onR1 = sdkClient(r1.sagemakerPort);
    const onR2 = sdkClient(r2.sagemakerPort);
    const body = (value: number) =>
      JSON.stringify({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }] });
    const sumOf = (answer: Awaited<ReturnType<typeof invoke>>) =>
      (jsonAnswer(answer) as { outputs: { data: number[] }[] }).outputs[0]!.data[0];
    try {
      // Opened on r1 and left there: r1's copy is the current one.
      const kept = newSession(
        await invoke(onR1, { body: body(5), sessionId: "NEW_SESSION", targetModel: MODEL }),
      );
      const keptEntry = await findSequence(r1.url, MODEL, kept.id);
      // Opened on r1 (the balancer hashes a NEW_SESSION on its request), used and closed on r2.
      const opened = await invoke(onR1, { body: body(1), sessionId: "NEW_SESSION", targetModel: MODEL });
      const { id } = newSession(opened);
      assert.equal(sumOf(await invoke(onR2, { body: body(2), sessionId: id, targetModel: MODEL })), 3);
      assert.equal((await closeSession(onR2, id, MODEL)).ClosedSessionId, id);

      // r1 asks the tier about its quiet copies, the one opened first no later than the
      // other: once the closed session's copy has left, the current one was asked about too.
      await waitFor(`r1 to let go of its copy of session ${id}`, async () =>
        (await findSequence(r1.url, MODEL, id)) === undefined ? true : undefined,
      );
      const stillKept = await findSequence(r1.url, MODEL, kept.id);
      assert.equal(stillKept?.status, "active");
      assert.equal(stillKept?.expiresAt, keptEntry?.expiresAt);
      const summary = await r1.summary(MODEL);
      assert.equal(summary.live, 1);
      assert.deepEqual(
        Object.values(summary.ended as Record<string, number>).filter((n) => n !== 0),
        [],
        "the copy let go is no end on r1",
      );
      assert.ok((summary.tier as { handed_over: number }).handed_over >= 1);

      // The session kept goes on on r1, and closes there.
      assert.equal(sumOf(await invoke(onR1, { body: body(1), sessionId: kept.id, targetModel: MODEL })), 6);
      assert.equal((await closeSession(onR1, kept.id, MODEL)).ClosedSessionId, kept.id);
    } finally {
      onR1.destroy();
      onR2.destroy();
    }
  });
});
