import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import {
  closeSession,
  invoke,
  jsonAnswer,
  openSession,
  sdkClient,
} from "../sagemaker/support/sagemaker-kit.ts";
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

// A full Redis (`maxmemory` with `noeviction`, as deploy/kubernetes/redis.yaml runs it)
// refuses new state, and says so in words an operator can act on; but it takes every end
// (an END step, an operator's DELETE on either replica, a SageMaker CLOSE), each of which
// drops its sequence's state, so that ending sequences is how a full store is freed.

const MODEL = "acc";
const CONFIG = accumulatorConfig(
  MODEL,
  8,
  "max_sequence_idle_microseconds: 60000000\n  oldest { max_candidate_sequences: 64 }",
);

const skip = missingTools(["redis-server", "redis-cli"]);

const add = (replica: Replica, value: number, sequence: SequenceParams): Promise<HttpAnswer> =>
  infer(replica.url, MODEL, int32Input(value), sequence);
const sum = (answer: HttpAnswer): number => outputData(answer, "OUTPUT")[0] as number;
const key = (id: number) => `seqserve:seq:${MODEL}:1:u:${id}`;

describe("a full state store", { skip }, () => {
  let repository: TempRepository;
  let cluster: SharedStoreCluster;
  let a: Replica;
  let b: Replica;

  before(async () => {
    repository = tempRepository({ [MODEL]: { config: CONFIG, onnx: accumulatorModel() } });
    cluster = await SharedStoreCluster.start(repository.path, [
      ["--allow-sagemaker", "true", "--sagemaker-port", "0"],
      [],
    ]);
    [a, b] = cluster.replicas as [Replica, Replica];
  });

  after(async () => {
    await cluster?.stop();
    repository?.remove();
  });

  it("refuses new state in plain words, and takes every end, which frees the state", async () => {
    const redis = cluster.redis;
    // Numbered steps record their answers: sequence 1's are numbered, the others' not, so
    // that their ends' records hold nothing but the end.
    for (let id = 1; id <= 10; id++) {
      const numbered = id === 1;
      assert.equal(sum(await add(a, id, { id, start: true, ...(numbered ? { step: 1 } : {}) })), id);
      assert.equal(sum(await add(a, 1, { id, ...(numbered ? { step: 2 } : {}) })), id + 1);
    }
    const sagemaker = sdkClient(a.sagemakerPort);
    try {
      const session = await openSession(sagemaker, MODEL);
      await invoke(sagemaker, { body: JSON.stringify([5]), sessionId: session.id });
      const stateBytes = Number(redis.cli("hstrlen", key(2), "body"));

      // Full: Redis uses more than its maxmemory, and evicts nothing.
      redis.cli("config", "set", "maxmemory-policy", "noeviction");
      redis.cli("config", "set", "maxmemory", "1000000");
      try {
        const refused = await add(a, 1, { id: 1, step: 3 });
        assert.equal(refused.status, 503, JSON.stringify(refused.body));
        const said = refused.body.error as string;
        assert.match(
          said,
          /^writing the state of sequence 1 of model 'acc' in the state store at redis:\/\/127\.0\.0\.1:\d+ failed \(the state store is full \(maxmemory\): it takes no new state until sequences end or its maxmemory is raised\); retry the request \(with sequence_step/,
        );
        assert.doesNotMatch(said, /script|OOM|@user_script/);

        // An END step, on the replica that holds the sequence: its state is dropped.
        assert.equal(sum(await add(a, 1, { id: 2, end: true })), 4);
        assert.equal(redis.cli("hget", key(2), "ended"), "end");
        assert.ok(Number(redis.cli("hstrlen", key(2), "body")) < stateBytes, "the end dropped the state");
        // An operator's DELETE, on the replica that holds it and on one that does not.
        for (const [replica, id] of [
          [a, 3],
          [b, 4],
        ] as const) {
          const deleted = await deleteJson(`${replica.url}/v2/models/${MODEL}/sequences/${id}`);
          assert.equal(deleted.status, 200, JSON.stringify(deleted.body));
          assert.equal(redis.cli("hget", key(id), "ended"), "forced");
        }
        // A SageMaker CLOSE.
        assert.equal((await closeSession(sagemaker, session.id)).ClosedSessionId, session.id);
      } finally {
        redis.cli("config", "set", "maxmemory", "0");
      }
      // With room again, the refused step goes through when retried.
      assert.equal(sum(await add(a, 1, { id: 1, step: 3 })), 3);
      assert.deepEqual(
        jsonAnswer(
          await invoke(sagemaker, {
            body: JSON.stringify([1]),
            sessionId: "NEW_SESSION",
            targetModel: MODEL,
          }),
        ),
        [[1]],
      );
    } finally {
      sagemaker.destroy();
    }
  });
});
