import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { type LogLine, memoryLogger } from "../security/support/memory-logger.ts";
import { getJson } from "../support/http-client.ts";
import { type OvmsServer, startOvmsServer } from "../tfs/support/ovms-server.ts";
import { waitUntil } from "./support/serving.ts";

// A config reload that lowers max_sequence_number leaves the new version fewer places than
// there are live sequences: those it takes over go on with their state, the others end
// ("reloaded"). The log must say which is which: it called them all moved, and said
// nothing of the ends.

/** A running sum: sum = stateN = state + value. */
const runningSum = new OnnxModelBuilder({ opset: 17 })
  .input("value", "FP32", [1, 1])
  .input("state", "FP32", [1, 1])
  .output("sum", "FP32", [1, 1])
  .output("stateN", "FP32", [1, 1])
  .node("Add", ["state", "value"], ["stateN"])
  .node("Identity", ["stateN"], ["sum"])
  .toBytes();

const acc = (maxSequenceNumber: number) => ({
  acc: { config: { stateful: true, max_sequence_number: maxSequenceNumber }, onnx: runningSum },
});

const lines: LogLine[] = [];
let ovms: OvmsServer;
before(async () => {
  ovms = await startOvmsServer(acc(10), { configPollSecs: 1 }, memoryLogger(lines));
});
after(() => ovms.stop());

/** One TF-Serving REST step of sequence `id`: the sum, or the refusal. */
async function step(id: number, value: number, control?: number): Promise<number | string> {
  const response = await fetch(`${ovms.url}/v1/models/acc:predict`, {
    method: "POST",
    body: JSON.stringify({
      inputs: {
        value: [[value]],
        sequence_id: [id],
        ...(control === undefined ? {} : { sequence_control_input: [control] }),
      },
    }),
  });
  const body = (await response.json()) as { outputs?: { sum: number[][] }; error?: string };
  return response.status === 200 ? body.outputs!.sum[0]![0]! : `${response.status} ${body.error}`;
}

test("a reload to fewer places logs the sequences moved and, apart, those ended with why", async () => {
  const ids = [1, 2, 3, 4, 5];
  for (const id of ids) assert.equal(await step(id, id, 1), id);

  ovms.write(acc(2));
  await waitUntil("the reload to be applied", async () => {
    const config = (await getJson(`${ovms.url}/v2/models/acc/config`)).body as {
      sequence_batching?: { oldest?: { max_candidate_sequences: number } };
    };
    return config.sequence_batching?.oldest?.max_candidate_sequences === 2;
  });

  const answers = [];
  for (const id of ids) answers.push(await step(id, 10));
  const kept = answers.filter((a) => typeof a === "number");
  assert.equal(kept.length, 2, JSON.stringify(answers));
  // The two moved with their state.
  for (const [i, answer] of answers.entries())
    if (typeof answer === "number") assert.equal(answer, ids[i]! + 10);

  const moved = lines.filter((l) => l.event === "sequences_moved" && l.model === "acc");
  assert.deepEqual(
    moved.map((l) => l.count),
    [2],
  );
  assert.equal(
    moved[0]!.msg,
    "2 live sequence(s) of model 'acc' moved from version 1 to version 1 with their state",
  );
  const ended = lines.filter((l) => l.event === "sequences_ended" && l.model === "acc");
  assert.deepEqual(
    ended.map((l) => [l.level, l.count, l.reason, l.version]),
    [[40, 3, "reloaded", "1"]],
  );
  assert.match(
    String(ended[0]!.msg),
    /^3 live sequence\(s\) of model 'acc' version 1 ended: the reloaded model 'acc' has no room \(/,
  );
  const summary = (
    (await getJson(`${ovms.url}/v2/models/acc/sequences`)).body as {
      summary: { live: number; ended: Record<string, number> };
    }
  ).summary;
  assert.deepEqual([summary.live, summary.ended.reloaded], [2, 3]);
});
