import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { securityOptions } from "../../src/config/security-options.ts";
import { growingStateConfig, growingStateModel } from "../../tools/onnx/sequence-models.ts";
import { type HandlerRepository, handlerRepository, LOG_MODEL } from "../handlers/support/handler-kit.ts";
import { infer, outputData, postJson } from "../support/http-client.ts";
import { listSequences, metricValue } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// --max-state-bytes bounds the state every model's sequences keep together, where each
// model alone is bounded only by its sequence count times sequence_state_max_bytes. A step
// whose state would pass it fails with 429 naming the flag, its state stays as it was,
// other sequences go on, an END is never refused, and an end makes room again: for an
// ONNX model whose state grows (refused where the core keeps state) and for a handler's
// state (refused by its worker, which alone still has the state as it was). A model whose
// fixed state per sequence is larger than the budget does not load.

const BUDGET = 32;

let repository: HandlerRepository;
let server: TestServer;
before(async () => {
  repository = handlerRepository({
    growing: {
      config: growingStateConfig("max_sequence_idle_microseconds: 60000000"),
      files: { "1/model.onnx": growingStateModel() },
    },
    log: LOG_MODEL,
    // The growing model with its cache fixed at 16 FP32 values: 64 bytes a sequence.
    wide: {
      config: growingStateConfig("max_sequence_idle_microseconds: 60000000")
        .replace('name: "growing"', 'name: "wide"')
        .replace("dims: [ -1 ] } ]", "dims: [ 16 ] } ]"),
      files: { "1/model.onnx": growingStateModel() },
    },
  });
  server = await startTestServer(repository.path, {
    modelControlMode: "explicit",
    loadModels: ["growing", "log"],
    security: securityOptions({ limits: { ...securityOptions().limits, maxStateBytes: BUDGET } }),
  });
});
after(async () => {
  await server.stop();
  repository.remove();
});

const grow = (id: number, value: number, sequence: { start?: boolean; end?: boolean } = {}) =>
  infer(server.url, "growing", [{ name: "INPUT", datatype: "FP32", shape: [1, 1], data: [value] }], {
    id,
    ...sequence,
  });

const note = (id: number, bytes: number, sequence: { start?: boolean; end?: boolean } = {}) =>
  infer(
    server.url,
    "log",
    [{ name: "IN", datatype: "UINT8", shape: [bytes], data: new Array(bytes).fill(7) }],
    {
      id,
      ...sequence,
    },
  );

const refusals = async () =>
  (await metricValue(server.metricsUrl, "seqserve_limit_refusals_total", { limit: "state_bytes" })) ?? 0;

const liveIds = async (model: string) =>
  (await listSequences(server.url, model)).sequences.map((s) => Number(s.id));

const heldBytes = async () => {
  const [growing, log] = await Promise.all(
    ["growing", "log"].map((model) => listSequences(server.url, model)),
  );
  return growing!.summary.state_bytes + log!.summary.state_bytes;
};

test("an ONNX model's growing state: the step past the budget fails and changes nothing, an end makes room", async () => {
  // The cache starts as one zero column and gains one per step: 8 bytes after the start,
  // 4 more a step, 32 (the budget) after the seventh step.
  let sum = 0;
  for (let step = 1; step <= 7; step++) {
    sum += step;
    assert.deepEqual(outputData(await grow(1, step, { start: step === 1 }), "OUTPUT"), [sum]);
  }
  assert.equal(await heldBytes(), BUDGET);
  const before = await refusals();
  const refused = await grow(1, 100);
  assert.equal(refused.status, 429);
  assert.deepEqual(refused.body, {
    error: `the state of sequence 1 of model 'growing' would hold 36 bytes, more than the server's sequence state memory has left (--max-state-bytes ${BUDGET}, for every model's sequences together): the step is not applied, and the state stays as it was`,
  });
  // Another sequence cannot start: its first state (8 bytes) has no room either, and the
  // START, not applied, leaves no sequence behind (nor a slot taken).
  const refusedStart = await grow(2, 1, { start: true });
  assert.equal(refusedStart.status, 429);
  assert.deepEqual(refusedStart.body, {
    error: `the state of a new sequence 2 of model 'growing' would hold 8 bytes, more than the server's sequence state memory has left (--max-state-bytes ${BUDGET}, for every model's sequences together): the sequence is not started`,
  });
  assert.equal(await refusals(), before + 2);
  assert.deepEqual(await liveIds("growing"), [1]);
  // The refused step left nothing behind: the END adds its value to the sum of the seven.
  const end = await grow(1, 5, { end: true });
  assert.deepEqual([outputData(end, "OUTPUT"), outputData(end, "LENGTH")], [[sum + 5], [9]]);
  assert.equal(await heldBytes(), 0);
  assert.deepEqual(outputData(await grow(2, 1, { start: true, end: true }), "OUTPUT"), [1]);
});

test("a handler's state: its worker refuses the step past the budget and gives the state back as it was", async () => {
  assert.deepEqual(outputData(await note(10, 20, { start: true }), "KEPT"), [20]);
  // An ONNX sequence beside it holds 8 bytes: 28 of 32.
  assert.equal((await grow(3, 1, { start: true })).status, 200);
  assert.equal(await heldBytes(), 28);
  const before = await refusals();
  const refusedStart = await note(12, 5, { start: true });
  assert.equal(refusedStart.status, 429, JSON.stringify(refusedStart.body));
  assert.match(
    String(refusedStart.body.error),
    /^the state of a new sequence 12 of model 'log' would hold 5 bytes.*: the sequence is not started$/,
  );
  assert.deepEqual(await liveIds("log"), [10]);
  // Its handler ran it, so the life it began ends, as a START that failed (not as a client's giving up).
  const { ended } = (await listSequences(server.url, "log")).summary;
  assert.deepEqual([ended.forced, ended.cancelled], [1, 0]);
  const refused = await note(10, 5);
  assert.equal(refused.status, 429);
  assert.deepEqual(refused.body, {
    error: `the state of sequence 10 of model 'log' would hold 25 bytes, more than the server's sequence state memory has left (--max-state-bytes ${BUDGET}, for every model's sequences together): the step is not applied, and the state stays as it was`,
  });
  assert.equal(await refusals(), before + 2);
  // Within the room left, the state grows from what it was: 20 + 4 bytes, 32 held.
  const grown = await note(10, 4);
  assert.deepEqual([outputData(grown, "KEPT"), outputData(grown, "SUM")], [[24], [24 * 7]]);
  assert.equal(await heldBytes(), BUDGET);
  // An END frees its state: it is not refused, however much it adds (nor is a sequence
  // of one request).
  assert.deepEqual(outputData(await note(11, 4, { start: true, end: true }), "KEPT"), [4]);
  assert.deepEqual(outputData(await note(10, 8, { end: true }), "KEPT"), [32]);
  assert.equal(await heldBytes(), 8);
  assert.equal((await grow(3, 1, { end: true })).status, 200);
  assert.equal(await heldBytes(), 0);
});

test("a model whose fixed state per sequence is larger than the budget does not load", async () => {
  const load = await postJson(`${server.url}/v2/repository/models/wide/load`, "{}");
  assert.equal(load.status, 400);
  assert.match(
    String(load.body.error),
    /the state of model 'wide' takes 64 bytes per sequence, more than the server's --max-state-bytes \(32\) for every model's sequences together/,
  );
});
