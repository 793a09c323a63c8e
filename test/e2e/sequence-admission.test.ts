import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { infer, inferBody, outputData } from "../support/http-client.ts";
import {
  accumulate,
  accumulatorConfig,
  assertError,
  findSequence,
  int32Input,
  listSequences,
  startFlagMessage,
  waitFor,
  waitForSequence,
} from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Triton's admission checks for sequence requests (L0_sequence_batcher's simple, length-1,
// batch-size, missing-id and missing-START cases), with Triton's messages, plus seqserve's
// server-assigned ids and the restart of a live id.

const BATCHING = "max_sequence_idle_microseconds: 60000000";
const MODELS = ["acc", "acc_length1", "acc_assigned", "acc_restart"];
/** Two slots that only run together: a lone request waits for the other slot's. */
const PAIRED = `${BATCHING}
  direct { max_queue_delay_microseconds: 30000000 minimum_slot_utilization: 1 }`;

let server: TestServer;
before(async () => {
  server = await startTestServer(
    Object.fromEntries([
      ...MODELS.map((name) => [
        name,
        { config: accumulatorConfig(name, 4, BATCHING), onnx: accumulatorModel() },
      ]),
      ["acc_pair", { config: accumulatorConfig("acc_pair", 2, PAIRED), onnx: accumulatorModel() }],
    ]),
  );
});
after(() => server.stop());

describe("sequence admission", () => {
  it("runs a simple sequence: state carries from request to request and is freed on END", async () => {
    assert.equal(await accumulate(server.url, "acc", 5, { id: 1001, start: true }), 5);
    const live = await findSequence(server.url, "acc", 1001);
    assert.equal(live?.status, "active");
    assert.equal(live?.steps, 1);
    assert.equal(live?.stateBytes, 4);
    assert.equal(await accumulate(server.url, "acc", 3, { id: 1001 }), 8);
    assert.equal(await accumulate(server.url, "acc", -2, { id: 1001 }), 6);
    assert.equal((await findSequence(server.url, "acc", 1001))?.steps, 3);
    assert.equal(await accumulate(server.url, "acc", 10, { id: 1001, end: true }), 16);
    assert.equal(await findSequence(server.url, "acc", 1001), undefined);
    const { summary } = await listSequences(server.url, "acc");
    assert.equal(summary.live, 0);
    assert.equal(summary.state_bytes, 0);
  });

  it("runs a length-1 sequence (START and END on one request) and frees it at once", async () => {
    const before = (await listSequences(server.url, "acc_length1")).summary.ended.end!;
    assert.equal(await accumulate(server.url, "acc_length1", 42, { id: 7, start: true, end: true }), 42);
    const { sequences, summary } = await listSequences(server.url, "acc_length1");
    assert.deepEqual(sequences, []);
    assert.equal(summary.ended.end, before + 1);
    assert.equal(summary.state_bytes, 0);
    // Its id is free again: the next request needs START, and a new START begins from zero.
    assertError(
      await infer(server.url, "acc_length1", int32Input(1), { id: 7 }),
      400,
      startFlagMessage(7, "acc_length1"),
    );
    assert.equal(await accumulate(server.url, "acc_length1", 3, { id: 7, start: true, end: true }), 3);
  });

  it("refuses a batch of more than one row with Triton's message", async () => {
    const two = [{ name: "INPUT", datatype: "INT32", shape: [2, 1], data: [1, 2] }];
    assertError(
      await infer(server.url, "acc", two, { id: 1002, start: true }),
      400,
      "inference request to model 'acc' must specify batch-size 1 due to requirements of sequence batcher",
    );
    // Nothing was admitted: the id is unknown.
    assert.equal(await findSequence(server.url, "acc", 1002), undefined);
  });

  it("refuses a request without a correlation id with Triton's message", async () => {
    const message = "inference request to model 'acc' must specify a non-zero or non-empty correlation ID";
    assertError(await infer(server.url, "acc", int32Input(1)), 400, message);
    assertError(await infer(server.url, "acc", int32Input(1), { id: 0 }), 400, message);
    assertError(await infer(server.url, "acc", int32Input(1), { id: "" }), 400, message);
    assertError(await infer(server.url, "acc", int32Input(1), { id: 0, end: true }), 400, message);
  });

  it("refuses a request without START for an id never seen, and for one that ended", async () => {
    assertError(
      await infer(server.url, "acc", int32Input(1), { id: 1003 }),
      400,
      startFlagMessage(1003, "acc"),
    );
    assertError(
      await infer(server.url, "acc", int32Input(1), { id: 1003, end: true }),
      400,
      startFlagMessage(1003, "acc"),
    );
    assertError(
      await infer(server.url, "acc", int32Input(1), { id: "never-seen" }),
      400,
      startFlagMessage("never-seen", "acc"),
    );

    assert.equal(await accumulate(server.url, "acc", 4, { id: 1004, start: true }), 4);
    assert.equal(await accumulate(server.url, "acc", 4, { id: 1004, end: true }), 8);
    assertError(
      await infer(server.url, "acc", int32Input(1), { id: 1004 }),
      400,
      startFlagMessage(1004, "acc"),
    );
    // A refused request leaves nothing behind.
    assert.equal(await findSequence(server.url, "acc", 1004), undefined);
  });

  it("gives a START without an id a server-assigned id, usable for the next requests", async () => {
    // The assigned id is a uint64 that may exceed 2^53: read it from the text, not through JSON.parse.
    const startText = async (value: number): Promise<{ id: bigint; text: string }> => {
      const response = await fetch(`${server.url}/v2/models/acc_assigned/infer`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: inferBody(int32Input(value), { start: true }),
      });
      const text = await response.text();
      assert.equal(response.status, 200, text);
      const match = /"sequence_id":(\d+)/.exec(text);
      assert.ok(match !== null, `no parameters.sequence_id in ${text}`);
      return { id: BigInt(match[1]!), text };
    };
    const first = await startText(5);
    const second = await startText(100);
    assert.notEqual(first.id, 0n);
    assert.notEqual(first.id, second.id);
    assert.match(first.text, /"outputs":\[\{"name":"OUTPUT".*"data":\[5\]/);

    // Each id continues its own sequence.
    assert.equal(await accumulate(server.url, "acc_assigned", 1, { id: first.id }), 6);
    assert.equal(await accumulate(server.url, "acc_assigned", 1, { id: second.id }), 101);
    const listed = await listSequences(server.url, "acc_assigned");
    assert.deepEqual(listed.sequences.map((s) => s.id).sort(), [first.id, second.id].sort());
    assert.equal(await accumulate(server.url, "acc_assigned", 1, { id: first.id, end: true }), 7);
    assert.equal(await accumulate(server.url, "acc_assigned", 1, { id: second.id, end: true }), 102);
    assert.equal((await listSequences(server.url, "acc_assigned")).summary.live, 0);
  });

  it("restarts a live id on a new START: fresh state, the old life counted as ended by 'restart'", async () => {
    assert.equal(await accumulate(server.url, "acc_restart", 10, { id: 55, start: true }), 10);
    assert.equal(await accumulate(server.url, "acc_restart", 10, { id: 55 }), 20);
    const before = await findSequence(server.url, "acc_restart", 55);
    assert.equal(before?.steps, 2);

    assert.equal(await accumulate(server.url, "acc_restart", 1, { id: 55, start: true }), 1);
    const restarted = await findSequence(server.url, "acc_restart", 55);
    assert.equal(restarted?.steps, 1, "the restarted sequence is a new life");
    assert.equal(restarted?.slot, before?.slot, "the restart keeps the slot");
    assert.equal(await accumulate(server.url, "acc_restart", 2, { id: 55 }), 3);

    const { summary, sequences } = await listSequences(server.url, "acc_restart");
    assert.equal(summary.ended.restart, 1);
    assert.equal(summary.live, 1);
    assert.equal(sequences.length, 1);
    assert.equal(await accumulate(server.url, "acc_restart", 2, { id: 55, end: true }), 5);
    const done = (await listSequences(server.url, "acc_restart")).summary;
    assert.deepEqual([done.live, done.ended.restart, done.ended.end], [0, 1, 1]);
  });

  it("restarts an id whose old life still has a request waiting: that request runs first, with the old state", async () => {
    assert.deepEqual(
      await Promise.all([
        accumulate(server.url, "acc_pair", 1, { id: 1, start: true }),
        accumulate(server.url, "acc_pair", 2, { id: 2, start: true }),
      ]),
      [1, 2],
    );
    // Sequence 1's next request waits for sequence 2's; meanwhile a START restarts id 1.
    const oldStep = accumulate(server.url, "acc_pair", 10, { id: 1 });
    await waitForSequence(server.url, "acc_pair", 1, (s) => s.queued === 1);
    const newStart = accumulate(server.url, "acc_pair", 100, { id: 1, start: true });
    await waitFor("the new life of id 1", async () => {
      const { sequences } = await listSequences(server.url, "acc_pair");
      return sequences.filter((s) => s.id === 1n).length === 2 ? true : undefined;
    });
    const lives = (await listSequences(server.url, "acc_pair")).sequences.filter((s) => s.id === 1n);
    assert.deepEqual(
      lives.map((s) => [s.status, s.queued]),
      [
        ["ending", 1],
        ["backlogged", 1],
      ],
    );
    // The new life waits for the old one's slot: it is not live yet.
    const waiting = (await listSequences(server.url, "acc_pair")).summary;
    assert.deepEqual([waiting.live, waiting.backlog], [2, 1]);
    // The old life's request runs with sequence 2's, then the new life takes over the slot.
    assert.equal(await accumulate(server.url, "acc_pair", 20, { id: 2 }), 22);
    assert.equal(await oldStep, 11);
    assert.equal(await accumulate(server.url, "acc_pair", 30, { id: 2 }), 52);
    assert.equal(await newStart, 100);
    const { sequences, summary } = await listSequences(server.url, "acc_pair");
    assert.deepEqual(
      sequences.map((s) => [s.id, s.status, s.steps]),
      [
        [2n, "active", 3],
        [1n, "active", 1],
      ],
    );
    assert.equal(summary.ended.restart, 1);
    assert.deepEqual(
      await Promise.all([
        accumulate(server.url, "acc_pair", 1, { id: 1, end: true }),
        accumulate(server.url, "acc_pair", 1, { id: 2, end: true }),
      ]),
      [101, 53],
    );
    assert.equal((await listSequences(server.url, "acc_pair")).summary.live, 0);
  });

  it("answers a successful sequence request with its outputs only (no state)", async () => {
    const answer = await infer(server.url, "acc", int32Input(9), { id: 1005, start: true, end: true });
    assert.deepEqual(outputData(answer, "OUTPUT"), [9]);
    const names = (answer.body.outputs as { name: string }[]).map((o) => o.name);
    assert.deepEqual(names, ["OUTPUT"]);
  });
});
