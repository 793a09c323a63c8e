import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { accumulatorModel, growingStateConfig, growingStateModel } from "../../tools/onnx/sequence-models.ts";
import {
  type HttpAnswer,
  infer,
  inferBody,
  outputData,
  postJson,
  type SequenceParams,
} from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { accumulatorConfig, int32Input } from "../support/sequence-kit.ts";
import { SILERO_PATH, SILERO_STATEFUL_CONFIG, SILERO_STATEFUL_MODEL } from "../support/silero-oracle.ts";
import { missingTools, RedisServer, type Replica, startReplicas, stopReplicas } from "./support/scale-kit.ts";

// A rolling upgrade: replicas serving different versions of a model share the store, and
// a sequence begun on a replica serving version 1 reaches one serving only version 2.
// That replica takes it over as a reload would when the two versions' state is the same
// (its record moves to version 2 with its state, and the old record is fenced, saying
// where it went); when the state differs it cannot go on there, and the client is told
// which version holds it. Never that the sequence is unknown, which clients take as gone.
// Only a version the replica does not serve is taken over from: two versions served side
// by side are two models, as in Triton, each with its own sequences.

const MODEL = "acc";
const BATCHING = "max_sequence_idle_microseconds: 60000000";
const CONFIG = accumulatorConfig(MODEL, 8, BATCHING);
/** Version 2 of MODEL with other state (a growing FP32 cache, not an INT32 sum). */
const OTHER_STATE_CONFIG = growingStateConfig(BATCHING).replace('name: "growing"', `name: "${MODEL}"`);

const skip = missingTools(["redis-server", "redis-cli"]);

const add = (replica: Replica, value: number, sequence: SequenceParams): Promise<HttpAnswer> =>
  infer(replica.url, MODEL, int32Input(value), sequence);
const sum = (answer: HttpAnswer): number => {
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return outputData(answer, "OUTPUT")[0] as number;
};

describe("a sequence reaching a replica that serves another version of its model", { skip }, () => {
  let version1: TempRepository;
  let version2: TempRepository;
  let otherState: TempRepository;
  let redis: RedisServer;
  let replicas: Replica[] = [];

  before(async () => {
    version1 = tempRepository({ [MODEL]: { config: CONFIG, onnx: accumulatorModel() } });
    version2 = tempRepository({ [MODEL]: { config: CONFIG, onnx: { 2: accumulatorModel() } } });
    otherState = tempRepository({
      [MODEL]: { config: OTHER_STATE_CONFIG, onnx: { 2: growingStateModel() } },
    });
    redis = await RedisServer.start();
  });

  after(async () => {
    await stopReplicas(replicas);
    await redis?.stop();
    for (const repository of [version1, version2, otherState]) repository?.remove();
  });

  it("is taken over when the state is the same: its record moves, and the old version's replica says where", async () => {
    const [r1] = (replicas = await startReplicas(version1.path, redis.url, [[]]));
    const [r2] = await startReplicas(version2.path, redis.url, [[]]);
    replicas.push(r2!);
    const id = 330001;
    assert.equal(sum(await add(r1!, 1, { id, start: true })), 1);
    assert.equal(sum(await add(r1!, 2, { id })), 3);
    // Its next step reaches the replica serving only version 2: it goes on from its state.
    assert.equal(sum(await add(r2!, 3, { id })), 6);
    assert.equal(redis.cli("hget", `seqserve:seq:${MODEL}:1:u:${id}`, "moved_to"), "2");
    // The replica serving version 1 (which holds a copy of it) no longer advances it.
    const refused = await add(r1!, 100, { id });
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.match(
      refused.body.error as string,
      new RegExp(
        `sequence ${id} of model '${MODEL}' moved to version 2 of model '${MODEL}'; this replica serves version 1: send its requests to a replica serving version 2`,
      ),
    );
    assert.equal(sum(await add(r2!, 4, { id, end: true })), 10);

    // An OpenVINO-style client (TF-Serving REST) the same: its step is not OVMS's 404.
    const predict = (replica: Replica, value: number, control?: 1) =>
      postJson(`${replica.url}/v1/models/${MODEL}:predict`, {
        inputs: {
          INPUT: [[value]],
          sequence_id: [330002],
          ...(control === undefined ? {} : { sequence_control_input: [control] }),
        },
      });
    assert.equal((await predict(r1!, 5, 1)).status, 200);
    const step = await predict(r2!, 6);
    assert.equal(step.status, 200, JSON.stringify(step.body));
    assert.deepEqual((step.body.outputs as { OUTPUT: number[][] }).OUTPUT, [[11]]);
  });

  it("is sent to the version that holds it when the state differs", async () => {
    const [r3] = await startReplicas(otherState.path, redis.url, [[]]);
    replicas.push(r3!);
    const r1 = replicas[0]!;
    const id = 330003;
    assert.equal(sum(await add(r1, 7, { id, start: true })), 7);
    const step = await infer(
      r3!.url,
      MODEL,
      [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [1] }],
      {
        id,
      },
    );
    assert.equal(step.status, 503, JSON.stringify(step.body));
    assert.equal(step.headers["retry-after"], "1");
    assert.match(
      step.body.error as string,
      new RegExp(
        `sequence ${id} of model '${MODEL}' is live in version 1 of model '${MODEL}', whose state differs from version 2's, served here \\(.*\\): send its requests to a replica serving version 1`,
      ),
    );
    // It was left where it is: version 1 goes on with it.
    assert.equal(sum(await add(r1, 1, { id })), 8);
  });
});

describe("a sequence of a version the replica serves beside the one a step names", { skip }, () => {
  let both: TempRepository;
  let redis: RedisServer;
  let replicas: Replica[] = [];

  before(async () => {
    both = tempRepository({
      [MODEL]: {
        config: accumulatorConfig(MODEL, 8, BATCHING, "version_policy: { all { } }"),
        onnx: { 1: accumulatorModel(), 2: accumulatorModel() },
      },
    });
    redis = await RedisServer.start();
  });

  after(async () => {
    await stopReplicas(replicas);
    await redis?.stop();
    both?.remove();
  });

  /** A step to one version of MODEL, as a KServe client names it. */
  const addTo = (replica: Replica, version: number, value: number, sequence: SequenceParams) =>
    postJson(
      `${replica.url}/v2/models/${MODEL}/versions/${version}/infer`,
      inferBody(int32Input(value), sequence),
    );

  it("is not taken over: each version keeps its own, as Triton's models do", async () => {
    const [replica] = (replicas = await startReplicas(both.path, redis.url, [[]]));
    const id = 330101;
    assert.equal(sum(await addTo(replica!, 2, 100, { id, start: true })), 100);
    // Version 1 never saw the id: it asks for a START, as one server does.
    const unknown = await addTo(replica!, 1, 1, { id });
    assert.equal(unknown.status, 400, JSON.stringify(unknown.body));
    assert.match(unknown.body.error as string, /must specify the START flag/);
    assert.equal(redis.cli("hexists", `seqserve:seq:${MODEL}:2:u:${id}`, "moved_to"), "0");
    // Version 2's client goes on with its sequence.
    assert.equal(sum(await addTo(replica!, 2, 5, { id, end: true })), 105);
  });

  it("is taken over once the replica no longer serves that version (a reload retired it)", async () => {
    const explicit = ["--model-control-mode", "explicit", "--load-model", MODEL];
    const [reloading, serving1] = await startReplicas(both.path, redis.url, [explicit, []]);
    replicas.push(reloading!, serving1!);
    // Only version 2 stays on the reloading replica; the other still serves version 1.
    both.add(MODEL, {
      config: accumulatorConfig(MODEL, 8, BATCHING, "version_policy: { specific { versions: [ 2 ] } }"),
      onnx: { 1: accumulatorModel(), 2: accumulatorModel() },
    });
    const loaded = await postJson(`${reloading!.url}/v2/repository/models/${MODEL}/load`, {});
    assert.equal(loaded.status, 200, JSON.stringify(loaded.body));
    const id = 330102;
    assert.equal(sum(await addTo(serving1!, 1, 1, { id, start: true })), 1);
    assert.equal(sum(await addTo(reloading!, 2, 2, { id })), 3);
    assert.equal(redis.cli("hget", `seqserve:seq:${MODEL}:1:u:${id}`, "moved_to"), "2");
  });
  it("is taken over by a replica whose load of that version failed: a failed load never counts as served", async () => {
    // Version 1 fails to load here (a Silero VAD, whose 1 KiB of state passes
    // --max-state-bytes), and so must register nothing; version 2 (the accumulator) loads.
    const version1 = tempRepository({ [MODEL]: { config: CONFIG, onnx: accumulatorModel() } });
    const failing = tempRepository({
      [MODEL]: {
        config: SILERO_STATEFUL_CONFIG.replace(`name: "${SILERO_STATEFUL_MODEL}"`, `name: "${MODEL}"`).concat(
          "\nversion_policy: { specific { versions: [ 1 ] } }\n",
        ),
        onnx: { 1: readFileSync(SILERO_PATH) },
      },
    });
    try {
      const flags = ["--model-control-mode", "explicit", "--max-state-bytes", "100"];
      const [upgraded] = await startReplicas(failing.path, redis.url, [flags]);
      replicas.push(upgraded!);
      const refused = await postJson(`${upgraded!.url}/v2/repository/models/${MODEL}/load`, {});
      assert.notEqual(refused.status, 200, JSON.stringify(refused.body));
      assert.match(refused.body.error as string, /--max-state-bytes/);
      failing.add(MODEL, {
        config: accumulatorConfig(MODEL, 8, BATCHING, "version_policy: { specific { versions: [ 2 ] } }"),
        onnx: { 1: accumulatorModel(), 2: accumulatorModel() },
      });
      const loaded = await postJson(`${upgraded!.url}/v2/repository/models/${MODEL}/load`, {});
      assert.equal(loaded.status, 200, JSON.stringify(loaded.body));
      // Another replica serves version 1 (the describe's repository may serve 2 only by now).
      const [serving1] = await startReplicas(version1.path, redis.url, [[]]);
      replicas.push(serving1!);
      const id = 330103;
      assert.equal(sum(await addTo(serving1!, 1, 10, { id, start: true })), 10);
      assert.equal(sum(await addTo(upgraded!, 2, 5, { id })), 15);
    } finally {
      failing.remove();
      version1.remove();
    }
  });
});
