import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { type OvmsServer, startOvmsServer } from "../tfs/support/ovms-server.ts";

// OVMS has no cancellation: a client that gives up on a stateful request (a timeout, a
// cancel, a closed connection) keeps its sequence. seqserve drops the request if it has
// not run yet (a client that retries does not pile requests up, nor apply them twice);
// Triton's rule, which ends the whole sequence of a cancelled request, is not OVMS's.

/** A running sum (stateN = state + value) that also does some slow work on each step. */
function slowSum(): Uint8Array {
  const size = 512;
  const depth = 64;
  const builder = new OnnxModelBuilder({ opset: 17 })
    .input("value", "FP32", [1, 1])
    .input("state", "FP32", [1, 1])
    .output("sum", "FP32", [1, 1])
    .output("stateN", "FP32", [1, 1])
    .output("work", "FP32", [])
    .initializer("square", "INT64", [2], [size, size])
    .initializer("average", "FP32", [size, size], new Float32Array(size * size).fill(1 / size))
    .node("Add", ["state", "value"], ["stateN"])
    .node("Identity", ["stateN"], ["sum"])
    .node("Expand", ["value", "square"], ["product_0"]);
  for (let i = 0; i < depth; i++) builder.node("MatMul", [`product_${i}`, "average"], [`product_${i + 1}`]);
  return builder.node("ReduceMean", [`product_${depth}`], ["work"], { keepdims: 0 }).toBytes();
}

const body = (id: number, value: number, control?: number) =>
  JSON.stringify({
    inputs: {
      value: [[value]],
      sequence_id: [id],
      ...(control === undefined ? {} : { sequence_control_input: [control] }),
    },
  });

describe("an OVMS client that gives up on a stateful request", () => {
  let ovms: OvmsServer;
  before(async () => {
    ovms = await startOvmsServer({ sum: { config: { stateful: true }, onnx: slowSum() } });
  });
  after(() => ovms.stop());

  const post = (text: string, signal?: AbortSignal) =>
    fetch(`${ovms.url}/v1/models/sum:predict`, { method: "POST", body: text, ...(signal ? { signal } : {}) });
  const sumOf = async (response: Response): Promise<number> => {
    const text = await response.text();
    assert.equal(response.status, 200, text);
    return (JSON.parse(text) as { outputs: { sum: number[][] } }).outputs.sum[0]![0]!;
  };

  it("keeps its sequence; the request it gave up on before it ran is dropped", async () => {
    const first = post(body(77, 1, 1));
    // Sent while the first step runs, so it waits behind it; then the client gives up.
    await new Promise((resolve) => setTimeout(resolve, 30));
    const gaveUp = new AbortController();
    const abandoned = post(body(77, 2), gaveUp.signal).catch((error: Error) => error.name);
    await new Promise((resolve) => setTimeout(resolve, 30));
    gaveUp.abort();
    assert.equal(await abandoned, "AbortError");
    assert.equal(await sumOf(await first), 1);
    assert.equal(await sumOf(await post(body(77, 4))), 5);
    assert.equal(await sumOf(await post(body(77, 8, 2))), 13);
  });

  /** Waits until the server lists sequence `id` with `queued` requests waiting to run (handed to the instance: 0). */
  async function listed(id: number, queued = 0): Promise<void> {
    for (;;) {
      const answer = await fetch(`${ovms.url}/v2/models/sum/sequences`);
      const { sequences } = (await answer.json()) as { sequences: { id: number; queued: number }[] };
      if (sequences.some((s) => s.id === id && s.queued === queued)) return;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  /** Sends `text` for sequence `id` while the model's instance is busy, and gives up on it while it waits. */
  async function giveUpWhileQueued(id: number, text: string): Promise<void> {
    const gaveUp = new AbortController();
    const abandoned = post(text, gaveUp.signal).catch((error: Error) => error.name);
    await listed(id, 1);
    gaveUp.abort();
    assert.equal(await abandoned, "AbortError");
  }

  it("a START with its id, given up on before it ran, leaves no sequence: the retried START begins it", async () => {
    // Two sequences' steps hold the instance: one runs, the other waits in its worker.
    const running = post(body(80, 1, 1));
    await listed(80);
    const next = post(body(84, 1, 1));
    await listed(84);
    await giveUpWhileQueued(81, body(81, 5, 1));
    assert.equal(await sumOf(await running), 1);
    assert.equal(await sumOf(await next), 1);
    assert.equal(await sumOf(await post(body(81, 5, 1))), 5, "the retried START is applied, once");
    assert.equal(await sumOf(await post(body(81, 1, 2))), 6);
    for (const id of [80, 84]) assert.equal(await sumOf(await post(body(id, 0, 2))), 1);
  });

  it("an END given up on before it ran leaves the sequence going on: the retried END applies", async () => {
    // The END waits behind its sequence's step, which runs.
    const running = post(body(82, 1, 1));
    await listed(82);
    await giveUpWhileQueued(82, body(82, 7, 2));
    assert.equal(await sumOf(await running), 1);
    assert.equal(await sumOf(await post(body(82, 7, 2))), 8, "the retried END is applied, once");
    const after = await post(body(82, 1));
    assert.equal(after.status, 404, "and it ended the sequence");
  });
});
