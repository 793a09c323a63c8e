import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { securityOptions } from "../../src/config/security-options.ts";
import { stateEntryBytes } from "../../src/core/sequence/state-store.ts";
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

/** What a state entry holds besides its data: its key and the entry itself. */
const entryBytes = (key: string) =>
  stateEntryBytes(key, { datatype: "UINT8", shape: [0], data: new Uint8Array(0) });
/** The growing model's one state entry, and the log handler's, each without data. */
const CACHE = entryBytes("CACHE");
const LOG = entryBytes("log");
/** Room for one entry of each, and 32 bytes of data. */
const BUDGET = CACHE + LOG + 32;

let repository: HandlerRepository;
let server: TestServer;
before(async () => {
  repository = handlerRepository({
    growing: {
      config: growingStateConfig("max_sequence_idle_microseconds: 60000000"),
      files: { "1/model.onnx": growingStateModel() },
    },
    log: LOG_MODEL,
    // Keeps its strings as they came, under the name it is given (the README's example).
    keep: {
      config: `
backend: "typescript"
max_batch_size: 0
input [
  { name: "KEY" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] }
]
output [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching { max_sequence_idle_microseconds: 60000000 }
`,
      files: {
        "1/model.ts": `
export default {
  execute(requests: any[]) {
    return requests.map((request: any) => {
      const key = new TextDecoder().decode(request.inputs.KEY.data[0]);
      request.sequence.state.set(key, request.inputs.TEXT);
      const count = request.inputs.TEXT.data.length;
      return { outputs: { N: { datatype: "INT32", shape: [1], data: Int32Array.of(count) } } };
    });
  },
};
`,
      },
    },
    // The growing model with its cache fixed at 1024 FP32 values: 4096 bytes a sequence.
    wide: {
      config: growingStateConfig("max_sequence_idle_microseconds: 60000000")
        .replace('name: "growing"', 'name: "wide"')
        .replace("dims: [ -1 ] } ]", "dims: [ 1024 ] } ]"),
      files: { "1/model.onnx": growingStateModel() },
    },
  });
  server = await startTestServer(repository.path, {
    modelControlMode: "explicit",
    loadModels: ["growing", "log", "keep"],
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
  // 4 more a step, 32 after the seventh step; with a handler's sequence holding an empty
  // log beside it, the budget is full.
  assert.deepEqual(outputData(await note(20, 0, { start: true }), "KEPT"), [0]);
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
    error: `the state of sequence 1 of model 'growing' would hold ${CACHE + 36} bytes, more than the server's sequence state memory has left (--max-state-bytes ${BUDGET}, for every model's sequences together): the step is not applied, and the state stays as it was`,
  });
  // Another sequence cannot start: its first state (8 bytes) has no room either, and the
  // START, not applied, leaves no sequence behind (nor a slot taken).
  const refusedStart = await grow(2, 1, { start: true });
  assert.equal(refusedStart.status, 429);
  assert.deepEqual(refusedStart.body, {
    error: `the state of a new sequence 2 of model 'growing' would hold ${CACHE + 8} bytes, more than the server's sequence state memory has left (--max-state-bytes ${BUDGET}, for every model's sequences together): the sequence is not started`,
  });
  assert.equal(await refusals(), before + 2);
  assert.deepEqual(await liveIds("growing"), [1]);
  assert.deepEqual(outputData(await note(20, 0, { end: true }), "KEPT"), [0]);
  // The refused step left nothing behind: the END adds its value to the sum of the seven.
  const end = await grow(1, 5, { end: true });
  assert.deepEqual([outputData(end, "OUTPUT"), outputData(end, "LENGTH")], [[sum + 5], [9]]);
  assert.equal(await heldBytes(), 0);
  assert.deepEqual(outputData(await grow(2, 1, { start: true, end: true }), "OUTPUT"), [1]);
});

test("a handler's state: its worker refuses the step past the budget and gives the state back as it was", async () => {
  assert.deepEqual(outputData(await note(10, 20, { start: true }), "KEPT"), [20]);
  // An ONNX sequence beside it holds 8 bytes: 28 of the 32 bytes of data.
  assert.equal((await grow(3, 1, { start: true })).status, 200);
  assert.equal(await heldBytes(), BUDGET - 4);
  const before = await refusals();
  const refusedStart = await note(12, 5, { start: true });
  assert.equal(refusedStart.status, 429, JSON.stringify(refusedStart.body));
  assert.match(
    String(refusedStart.body.error),
    new RegExp(
      `^the state of a new sequence 12 of model 'log' would hold ${LOG + 5} bytes.*: the sequence is not started$`,
    ),
  );
  assert.deepEqual(await liveIds("log"), [10]);
  // Its handler ran it, so the life it began ends, as a START that failed (not as a client's giving up).
  const { ended } = (await listSequences(server.url, "log")).summary;
  assert.deepEqual([ended.forced, ended.cancelled], [1, 0]);
  const refused = await note(10, 5);
  assert.equal(refused.status, 429);
  assert.deepEqual(refused.body, {
    error: `the state of sequence 10 of model 'log' would hold ${LOG + 25} bytes, more than the server's sequence state memory has left (--max-state-bytes ${BUDGET}, for every model's sequences together): the step is not applied, and the state stays as it was`,
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
  assert.equal(await heldBytes(), CACHE + 8);
  assert.equal((await grow(3, 1, { end: true })).status, 200);
  assert.equal(await heldBytes(), 0);
});

test("a handler keeping BYTES: each string counts what holding it costs, and so does its key's name", async () => {
  const keep = (
    id: number,
    key: string,
    strings: number,
    sequence: { start?: boolean; end?: boolean } = {},
  ) =>
    infer(
      server.url,
      "keep",
      [
        { name: "KEY", datatype: "BYTES", shape: [1], data: [key] },
        { name: "TEXT", datatype: "BYTES", shape: [strings], data: new Array(strings).fill("") },
      ],
      { id, ...sequence },
    );
  const budgetError = (id: number) =>
    new RegExp(
      `^the state of sequence ${id} of model 'keep' would hold \\d+ bytes, more than the server's sequence state memory has left \\(--max-state-bytes ${BUDGET}, for every model's sequences together\\): the step is not applied, and the state stays as it was$`,
    );
  // One empty string is not free to keep: the sequences API counts it.
  assert.deepEqual(outputData(await keep(40, "last", 1, { start: true }), "N"), [1]);
  const listing = await listSequences(server.url, "keep");
  const held = listing.summary.state_bytes;
  assert.ok(held > 0 && held <= BUDGET, `held ${held}`);
  assert.deepEqual(
    listing.sequences.map((s) => s.stateBytes),
    [held],
  );
  const before = await refusals();
  // A thousand empty strings (about 100 kB of heap) do not fit in the budget's few hundred bytes.
  const many = await keep(40, "last", 1000);
  assert.equal(many.status, 429, JSON.stringify(many.body));
  assert.match(String(many.body.error), budgetError(40));
  // It left the state as it was.
  assert.equal((await listSequences(server.url, "keep")).summary.state_bytes, held);
  assert.deepEqual(outputData(await keep(40, "last", 1, { end: true }), "N"), [1]);
  assert.equal((await listSequences(server.url, "keep")).summary.state_bytes, 0);
  // Nor, with the budget empty, does one empty string kept under a name of 100,000
  // characters: a new sequence's START is refused.
  const named = await keep(41, "k".repeat(100_000), 1, { start: true });
  assert.equal(named.status, 429, JSON.stringify(named.body));
  assert.match(
    String(named.body.error),
    new RegExp(
      `^the state of a new sequence 41 of model 'keep' would hold \\d+ bytes, more than the server's sequence state memory has left \\(--max-state-bytes ${BUDGET}, for every model's sequences together\\): the sequence is not started$`,
    ),
  );
  assert.equal(await refusals(), before + 2);
  assert.deepEqual(await liveIds("keep"), []);
});

test("a model whose fixed state per sequence is larger than the budget does not load", async () => {
  const load = await postJson(`${server.url}/v2/repository/models/wide/load`, "{}");
  assert.equal(load.status, 400);
  assert.match(
    String(load.body.error),
    new RegExp(
      `the state of model 'wide' takes 4096 bytes per sequence, more than the server's --max-state-bytes \\(${BUDGET}\\) for every model's sequences together`,
    ),
  );
});
