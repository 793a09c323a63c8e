import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import {
  closeSession,
  invoke,
  jsonAnswer,
  newSession,
  sdkClient,
} from "../sagemaker/support/sagemaker-kit.ts";
import { infer, outputData } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { accumulatorConfig, int32Input } from "../support/sequence-kit.ts";
import { missingTools, type Replica, SharedStoreCluster } from "./support/scale-kit.ts";

// A replica's slots may hold copies of sequences that went on, or ended, on another
// replica (OVMS clients send no header a balancer could keep a sequence on one replica
// by). A new sequence that finds no room must not be refused for those copies: the tier
// says which are behind, they are let go, and the START (or a SageMaker session's open) is
// admitted, or refused as one server refuses it when the room really is full. Two replicas
// of a model listed in an OVMS config.json with max_sequence_number 3 share a Redis.

const MODEL = "acc";
const START = 1;
const END = 2;
/** OVMS's refusal of a sequence past max_sequence_number, over TF-Serving REST. */
const FULL = '503 {"error":"Max sequence number has been reached. Could not create new sequence."}';

/** A running sum: sum = stateN = state + value. */
const runningSum = new OnnxModelBuilder({ opset: 17 })
  .input("value", "FP32", [1, 1])
  .input("state", "FP32", [1, 1])
  .output("sum", "FP32", [1, 1])
  .output("stateN", "FP32", [1, 1])
  .node("Add", ["state", "value"], ["stateN"])
  .node("Identity", ["stateN"], ["sum"])
  .toBytes();

const skip = missingTools(["redis-server", "redis-cli"]);

/** One TF-Serving REST step of sequence `id` on `replica`: the sum, or the refusal's status and body. */
async function step(
  replica: Replica,
  id: number | bigint,
  value: number,
  control?: number,
): Promise<number | string> {
  // Written as text: an id the server assigned is past 2^53 (a bigint).
  const controlPart = control === undefined ? "" : `,"sequence_control_input":[${control}]`;
  const response = await fetch(`${replica.url}/v1/models/${MODEL}:predict`, {
    method: "POST",
    body: `{"inputs":{"value":[[${value}]],"sequence_id":[${id}]${controlPart}}}`,
  });
  const text = await response.text();
  if (response.status !== 200) return `${response.status} ${text}`;
  return (JSON.parse(text) as { outputs: { sum: number[][] } }).outputs.sum[0]![0]!;
}

/** An OVMS START without a sequence_id (value 1): the id the replica gave the new sequence. */
async function startWithoutId(replica: Replica): Promise<bigint> {
  const response = await fetch(`${replica.url}/v1/models/${MODEL}:predict`, {
    method: "POST",
    body: JSON.stringify({ inputs: { value: [[1]], sequence_control_input: [START] } }),
  });
  const text = await response.text();
  assert.equal(response.status, 200, text);
  // Read from the text: the id is past 2^53, beyond a JSON number's exact integers in JavaScript.
  const id = /"sequence_id":\s*\[\s*(\d+)/.exec(text)?.[1];
  assert.ok(id !== undefined, text);
  return BigInt(id);
}

/** The ids of the sequences `replica` holds, and their statuses. */
async function held(replica: Replica): Promise<string[]> {
  const text = await (await fetch(`${replica.url}/v2/models/${MODEL}/sequences`)).text();
  // Ids kept as text: an id the server assigned is past 2^53.
  const answer = JSON.parse(text.replace(/"id":(\d+)/g, '"id":"$1"')) as {
    sequences: { id: string; status: string }[];
  };
  return answer.sequences.map((s) => `${s.id} ${s.status}`).sort();
}

describe("a new sequence and the copies of sequences that moved on", { skip }, () => {
  let dir: string;
  let cluster: SharedStoreCluster;
  let r1: Replica;
  let r2: Replica;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "seqserve-ovms-scale-"));
    mkdirSync(join(dir, MODEL, "1"), { recursive: true });
    writeFileSync(join(dir, MODEL, "1", "model.onnx"), runningSum);
    const config = { name: MODEL, base_path: MODEL, stateful: true, max_sequence_number: 3 };
    writeFileSync(join(dir, "config.json"), JSON.stringify({ model_config_list: [{ config }] }));
    const sagemaker = ["--allow-sagemaker", "true", "--sagemaker-port", "0"];
    cluster = await SharedStoreCluster.start({ configPath: join(dir, "config.json") }, [
      sagemaker,
      sagemaker,
    ]);
    [r1, r2] = cluster.replicas as [Replica, Replica];
  });

  after(async () => {
    await cluster?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it("an OVMS START is admitted in place of copies of sequences that ended on another replica, and refused when the room is full", async () => {
    const base = 1000;
    for (const id of [base + 1, base + 2, base + 3]) {
      assert.equal(await step(r1, id, 1, START), 1);
      assert.equal(await step(r1, id, 2), 3);
    }
    // The balancer sends their next steps to the other replica, which ends them.
    for (const id of [base + 1, base + 2, base + 3]) {
      assert.equal(await step(r2, id, 4), 7);
      assert.equal(await step(r2, id, 8, END), 15);
    }
    // Nothing is live, though r1 still holds (and lists) its copies of the three.
    assert.deepEqual(await held(r1), [`${base + 1} active`, `${base + 2} active`, `${base + 3} active`]);
    assert.equal(await step(r1, base + 9, 5, START), 5);
    assert.deepEqual(await held(r1), [`${base + 9} active`]);
    // Two more fill the room; a fourth live sequence is refused as OVMS refuses it.
    assert.equal(await step(r1, base + 10, 1, START), 1);
    assert.equal(await step(r1, base + 11, 1, START), 1);
    assert.equal(await step(r1, base + 12, 1, START), FULL);
    // A copy of a sequence that went on elsewhere is behind as well: its slot is given.
    assert.equal(await step(r2, base + 10, 2), 3);
    assert.equal(await step(r1, base + 12, 1, START), 1);
    assert.deepEqual(await held(r1), [`${base + 9} active`, `${base + 11} active`, `${base + 12} active`]);
    // The sequence goes on where it went, with its state.
    assert.equal(await step(r2, base + 10, 4, END), 7);
    for (const id of [base + 9, base + 11, base + 12])
      assert.equal(typeof (await step(r1, id, 0, END)), "number");
  });

  it("a step of a sequence begun on another replica is taken up in place of copies of sequences that ended there", async () => {
    const base = 300;
    for (const id of [base + 1, base + 2, base + 3]) {
      assert.equal(await step(r1, id, 1, START), 1);
      assert.equal(await step(r1, id, 2), 3);
    }
    for (const id of [base + 1, base + 2, base + 3]) {
      assert.equal(await step(r2, id, 4), 7);
      assert.equal(await step(r2, id, 8, END), 15);
    }
    assert.deepEqual(await held(r1), [`${base + 1} active`, `${base + 2} active`, `${base + 3} active`]);
    // Begun on r2, its next step reaches r1, whose slots hold only those copies: it is
    // taken up as a START would be, not refused as if the room were full.
    assert.equal(await step(r2, base + 9, 5, START), 5);
    assert.equal(await step(r1, base + 9, 1), 6);
    assert.deepEqual(await held(r1), [`${base + 9} active`]);
    assert.equal(await step(r1, base + 9, 0, END), 6);
  });

  it("an OVMS START without an id that waits for the copies to be let go keeps the id it was given", async () => {
    const base = 400;
    // The id the replica gives next (its ids come from a block the store reserved for it).
    const first = await startWithoutId(r1);
    assert.equal(await step(r1, first, 0, END), 1);
    for (const id of [base + 1, base + 2, base + 3]) {
      assert.equal(await step(r1, id, 1, START), 1);
      assert.equal(await step(r2, id, 2, END), 3);
    }
    assert.deepEqual(await held(r1), [`${base + 1} active`, `${base + 2} active`, `${base + 3} active`]);
    // It waits for the look that lets the copies go, then is admitted under the id it was
    // first given: none is taken and dropped on the way.
    const second = await startWithoutId(r1);
    assert.equal(second, first + 1n);
    assert.deepEqual(await held(r1), [`${second} active`]);
    assert.equal(await step(r1, second, 0, END), 1);
  });

  it("a SageMaker session opens in place of copies of sessions closed on another replica", async () => {
    const onR1 = sdkClient(r1.sagemakerPort);
    const onR2 = sdkClient(r2.sagemakerPort);
    const open = (client: typeof onR1, value: number) =>
      invoke(client, { body: JSON.stringify([[value]]), sessionId: "NEW_SESSION", targetModel: MODEL });
    try {
      // Opened on r1 (the balancer hashes a NEW_SESSION on its request), used and closed on r2.
      for (let i = 0; i < 3; i++) {
        const { id } = newSession(await open(onR1, 1));
        const next = await invoke(onR2, { body: JSON.stringify([[2]]), sessionId: id });
        assert.deepEqual(jsonAnswer(next), [[3]]);
        assert.equal((await closeSession(onR2, id)).ClosedSessionId, id);
      }
      const opened = await open(onR1, 7);
      const { id } = newSession(opened);
      assert.deepEqual(await held(r1), [`${id} active`]);
      assert.equal((await closeSession(onR1, id)).ClosedSessionId, id);
    } finally {
      onR1.destroy();
      onR2.destroy();
    }
  });
});

describe("a KServe START past max_candidate_sequence_use_ratio and the copies of sequences that ended elsewhere", {
  skip,
}, () => {
  const RATIO = "acc_ratio";
  let repository: TempRepository;
  let cluster: SharedStoreCluster;

  before(async () => {
    repository = tempRepository({
      [RATIO]: {
        // Two live sequences of four slots.
        config: accumulatorConfig(
          RATIO,
          4,
          "max_sequence_idle_microseconds: 60000000\n  oldest { max_candidate_sequences: 4 }",
          'parameters { key: "max_candidate_sequence_use_ratio" value { string_value: "0.5" } }',
        ),
        onnx: accumulatorModel(),
      },
    });
    cluster = await SharedStoreCluster.start(repository.path, [[], []]);
  });

  after(async () => {
    await cluster?.stop();
    repository?.remove();
  });

  it("is admitted once the tier says the copies are behind, and refused while two are live", async () => {
    const [r1, r2] = cluster.replicas as [Replica, Replica];
    const add = async (
      replica: Replica,
      id: number,
      value: number,
      flags: { start?: boolean; end?: boolean } = {},
    ) => {
      const answer = await infer(replica.url, RATIO, int32Input(value), { id, ...flags });
      return answer.status === 200 ? (outputData(answer, "OUTPUT")[0] as number) : answer.status;
    };
    for (const id of [1, 2]) assert.equal(await add(r1, id, 1, { start: true }), 1);
    for (const id of [1, 2]) assert.equal(await add(r2, id, 2, { end: true }), 3);
    assert.equal(await add(r1, 3, 5, { start: true }), 5);
    assert.equal(await add(r1, 4, 5, { start: true }), 5);
    assert.equal(await add(r1, 5, 5, { start: true }), 503);
  });
});
