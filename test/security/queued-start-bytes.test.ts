import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { securityOptions } from "../../src/config/security-options.ts";
import { QUEUED_REQUEST_OVERHEAD } from "../../src/core/scheduler/queue-budget.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { type HandlerRepository, handlerRepository, LOG_MODEL } from "../handlers/support/handler-kit.ts";
import { type HttpAnswer, infer, inferBody, outputData, postJson } from "../support/http-client.ts";
import { touchModel } from "../support/model-repository.ts";
import {
  assertError,
  listSequences,
  metricValue,
  startFlagMessage,
  waitFor,
} from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// --max-queued-start-bytes bounds the input bytes of the STARTs every model holds queued
// and not yet running, where a sequence backlog alone is bounded only by a count (1024
// STARTs of 64 MiB each). Reported: a client filled a model's sequence slots with tiny
// sessions, then parked 30 STARTs of 30 MB each in its backlog. Here the slots are full,
// big STARTs wait, and the START that would pass the budget is refused at once as a full
// backlog is (503, Retry-After), while the running sequences' steps and ENDs (which free
// the slots) and every other model's requests go on: only STARTs count, and the steps
// sent behind a START while it waits (held for the same slot; the one past the budget
// withdraws the sequence, which has not begun, its START and steps refused with it). What the STARTs
// hold comes back exactly once, whether they ran, were cancelled, were refused, or moved
// to a reloaded version: the count is 0 when nothing waits.

/** What requests waiting with inputs of these sizes hold: each its inputs and itself. */
const held = (...inputBytes: number[]): number =>
  inputBytes.reduce((total, bytes) => total + bytes + QUEUED_REQUEST_OVERHEAD, 0);

// Room for three requests and 2500 bytes of their inputs.
const BUDGET = 2500 + 3 * QUEUED_REQUEST_OVERHEAD;

let repository: HandlerRepository;
let server: TestServer;
before(async () => {
  repository = handlerRepository({
    // LOG_MODEL (state: every byte sent; answers KEPT and SUM) with 2 sequence slots.
    session: {
      config: `name: "session"\n${LOG_MODEL.config!.replace("max_candidate_sequences: 4", "max_candidate_sequences: 2")}\ninstance_group [ { count: 1 kind: KIND_CPU } ]`,
      files: LOG_MODEL.files,
    },
    // The same with slots to spare.
    roomy: {
      config: `name: "roomy"\n${LOG_MODEL.config!}\ninstance_group [ { count: 1 kind: KIND_CPU } ]`,
      files: LOG_MODEL.files,
    },
    // A stateless model.
    plain: {
      config: `
name: "plain"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]
`,
      files: { "1/model.onnx": identityModel("UINT8", [-1, -1]) },
    },
  });
  server = await startTestServer(repository.path, {
    modelControlMode: "explicit",
    loadModels: ["session", "roomy", "plain"],
    sagemakerPort: 0,
    sagemakerModel: "session",
    security: securityOptions({ limits: { ...securityOptions().limits, maxQueuedStartBytes: BUDGET } }),
  });
});
after(async () => {
  await server.stop();
  repository.remove();
});

const queuedBytes = async () =>
  (await metricValue(server.metricsUrl, "seqserve_queued_start_bytes", {})) ?? 0;
const refusals = async () =>
  (await metricValue(server.metricsUrl, "seqserve_limit_refusals_total", {
    limit: "queued_start_bytes",
  })) ?? 0;
const untilQueued = (bytes: number) =>
  waitFor(`${bytes} bytes queued`, async () => ((await queuedBytes()) === bytes ? true : undefined));

/** A step of `session` sending `bytes` bytes of value `value`. */
const note = (id: number, bytes: number, value: number, sequence: { start?: boolean; end?: boolean } = {}) =>
  infer(
    server.url,
    "session",
    [{ name: "IN", datatype: "UINT8", shape: [bytes], data: new Array(bytes).fill(value) }],
    {
      id,
      ...sequence,
    },
  );

/** [KEPT, SUM] of an answer of `session`. */
const kept = (answer: HttpAnswer) => [outputData(answer, "KEPT")[0], outputData(answer, "SUM")[0]];

const refusedMessage = (model: string, bytes: number) =>
  `[request id: <id_unknown>] model '${model}' cannot queue the START: its ${held(bytes)} bytes (inputs, and ${QUEUED_REQUEST_OVERHEAD} for the request itself) would take the STARTs waiting to run past the server's limit of ${BUDGET} bytes (--max-queued-start-bytes, for every model's together); retry later`;

test("a full model's backlog of big STARTs: the START past the budget is refused at once, the running sequences go on", async () => {
  // Tiny sessions take both slots.
  assert.deepEqual(kept(await note(1, 1, 1, { start: true })), [1, 1]);
  assert.deepEqual(kept(await note(2, 1, 2, { start: true })), [1, 2]);
  // Two big STARTs wait in the backlog, holding 2000 of the 2500 bytes of inputs.
  const big11 = note(11, 1000, 1, { start: true });
  await untilQueued(held(1000));
  const big12 = note(12, 1000, 2, { start: true });
  await untilQueued(held(1000, 1000));
  assert.equal((await listSequences(server.url, "session")).summary.backlog, 2);

  // A third would take 3000 bytes of inputs: refused before it is queued, as a full backlog refuses.
  const refused = await note(13, 1000, 3, { start: true });
  assertError(refused, 503, refusedMessage("session", 1000));
  assert.equal(refused.headers["retry-after"], "1");
  assert.equal(await refusals(), 1);
  const listing = await listSequences(server.url, "session");
  assert.deepEqual(
    listing.sequences.map((s) => Number(s.id)).sort((a, b) => a - b),
    [1, 2, 11, 12],
  );
  assert.equal(await queuedBytes(), held(1000, 1000));

  // One that fits waits, until its client gives up: what it held comes back.
  const gaveUp = new AbortController();
  const abandoned = fetch(`${server.url}/v2/models/session/infer`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: inferBody([{ name: "IN", datatype: "UINT8", shape: [400], data: new Array(400).fill(4) }], {
      id: 14,
      start: true,
    }),
    signal: gaveUp.signal,
  }).catch((error: Error) => error.name);
  await untilQueued(held(1000, 1000, 400));
  gaveUp.abort();
  assert.equal(await abandoned, "AbortError");
  await untilQueued(held(1000, 1000));

  // The running sequences' steps do not count, and are answered as ever.
  assert.deepEqual(kept(await note(1, 2, 5)), [3, 11]);
  assert.deepEqual(kept(await note(2, 3, 1)), [4, 5]);
  assert.equal(await queuedBytes(), held(1000, 1000));

  // A reload moves the sequences with their queued requests, which keep what they hold.
  touchModel(repository.path, "session");
  const reload = await postJson(`${server.url}/v2/repository/models/session/load`, {});
  assert.equal(reload.status, 200, JSON.stringify(reload.body));
  assert.equal(await queuedBytes(), held(1000, 1000));

  // Slots free up: the big STARTs run, and the budget has room again.
  assert.deepEqual(kept(await note(1, 1, 0, { end: true })), [4, 11]);
  assert.deepEqual(kept(await big11), [1000, 1000]);
  assert.deepEqual(kept(await note(2, 1, 0, { end: true })), [5, 5]);
  assert.deepEqual(kept(await big12), [1000, 2000]);
  assert.equal(await queuedBytes(), 0);
  await note(11, 1, 0, { end: true });
  assert.deepEqual(kept(await note(13, 1000, 3, { start: true })), [1000, 3000]);
  for (const id of [12, 13]) await note(id, 1, 0, { end: true });
  assert.equal(await queuedBytes(), 0);
  assert.equal(await refusals(), 1);
});

test("only STARTs that wait count: with the budget full, the running sequences' steps and ENDs and other models' requests are served; a START larger than the whole budget waits alone", async () => {
  const refusedBefore = await refusals();
  assert.deepEqual(kept(await note(21, 1, 1, { start: true })), [1, 1]);
  assert.deepEqual(kept(await note(22, 1, 2, { start: true })), [1, 2]);
  const big31 = note(31, 1200, 1, { start: true });
  await untilQueued(held(1200));
  const big32 = note(32, 1200, 2, { start: true });
  await untilQueued(held(1200, 1200));
  assertError(await note(33, 200, 3, { start: true }), 503, refusedMessage("session", 200));
  // A START that finds a free slot waits for nothing: it holds nothing, and is served.
  const roomy = await infer(
    server.url,
    "roomy",
    [{ name: "IN", datatype: "UINT8", shape: [1000], data: new Array(1000).fill(1) }],
    {
      id: 41,
      start: true,
      end: true,
    },
  );
  assert.deepEqual(kept(roomy), [1000, 1000]);
  // Steps larger than the whole budget, of the sequences holding the slots, and a stateless request.
  const large = BUDGET + 1;
  assert.deepEqual(kept(await note(21, large, 1)), [large + 1, large + 1]);
  const plain = await infer(server.url, "plain", [
    { name: "INPUT0", datatype: "UINT8", shape: [1, large], data: new Array(large).fill(9) },
  ]);
  assert.deepEqual(outputData(plain, "OUTPUT0"), new Array(large).fill(9));
  assert.equal(await queuedBytes(), held(1200, 1200));
  // The ENDs free the slots the STARTs wait for.
  assert.deepEqual(kept(await note(21, 1, 0, { end: true })), [large + 2, large + 1]);
  assert.deepEqual(kept(await big31), [1200, 1200]);
  assert.deepEqual(kept(await note(22, 1, 0, { end: true })), [2, 2]);
  assert.deepEqual(kept(await big32), [1200, 2400]);
  assert.equal(await queuedBytes(), 0);

  // With both slots taken, a START larger than the whole budget waits, alone: others are refused.
  const hugeBytes = BUDGET;
  const huge = note(33, hugeBytes, 3, { start: true });
  await untilQueued(held(hugeBytes));
  assertError(await note(34, 1, 4, { start: true }), 503, refusedMessage("session", 1));
  await note(31, 1, 0, { end: true });
  assert.deepEqual(kept(await huge), [hugeBytes, 3 * hugeBytes]);
  for (const id of [32, 33]) await note(id, 1, 0, { end: true });
  assert.equal(await queuedBytes(), 0);
  assert.equal(await refusals(), refusedBefore + 2);
});

test("the steps sent behind a START that waits in the backlog count with it: the one past the budget withdraws the sequence, which never began", async () => {
  const refusedBefore = await refusals();
  const endedBefore = (await listSequences(server.url, "session")).summary.ended;
  assert.deepEqual(kept(await note(61, 1, 1, { start: true })), [1, 1]);
  assert.deepEqual(kept(await note(62, 1, 2, { start: true })), [1, 2]);
  // A 4-byte START waits for a slot; its client goes on sending steps, which wait behind it.
  const start = note(71, 4, 1, { start: true });
  await untilQueued(held(4));
  const first = note(71, 1000, 1);
  await untilQueued(held(4, 1000));
  const second = note(71, 1000, 1);
  await untilQueued(held(4, 1000, 1000));
  // A third would take 3004 (and a fourth request): refused at once, as a START past the
  // budget is, and with it the START and the steps before it: going on without it would
  // apply the client's next steps without it.
  const refusal = `[request id: <id_unknown>] model 'session' cannot queue a step of sequence 71, whose START waits in the backlog for a slot: its ${held(1000)} bytes (inputs, and ${QUEUED_REQUEST_OVERHEAD} for the request itself) would take the requests waiting for a sequence slot past the server's limit of ${BUDGET} bytes (--max-queued-start-bytes, for every model's together); the sequence is withdrawn, not started: its START and every step sent behind it are refused alike, and its next request must be its START again; retry later`;
  for (const answer of [await note(71, 1000, 1), await start, await first, await second]) {
    assertError(answer, 503, refusal);
    assert.equal(answer.headers["retry-after"], "1");
  }
  assert.equal(await refusals(), refusedBefore + 1);
  assert.equal(await queuedBytes(), 0);
  assert.deepEqual(
    (await listSequences(server.url, "session")).sequences.map((s) => Number(s.id)).sort((a, b) => a - b),
    [61, 62],
  );
  // No sequence 71 is left to go on: its next step is told to START.
  assertError(await note(71, 1, 1), 400, startFlagMessage(71, "session"));
  // A slot frees: sent again, the sequence begins from scratch.
  await note(61, 1, 0, { end: true });
  assert.deepEqual(kept(await note(71, 4, 1, { start: true })), [4, 4]);
  assert.deepEqual(kept(await note(71, 1000, 1)), [1004, 1004]);
  for (const id of [62, 71]) await note(id, 1, 0, { end: true });
  assert.equal(await queuedBytes(), 0);
  // Three sequences ended, as their ENDs asked: the withdrawn one ended nothing.
  assert.deepEqual((await listSequences(server.url, "session")).summary.ended, {
    ...endedBefore,
    end: (endedBefore.end ?? 0) + 3,
  });
});

test("a SageMaker session whose opening step would pass the budget is refused as a START is: it leaves no session, and no end is counted", async () => {
  const refusedBefore = await refusals();
  const endedBefore = (await listSequences(server.url, "session")).summary.ended;
  assert.deepEqual(kept(await note(81, 1, 1, { start: true })), [1, 1]);
  assert.deepEqual(kept(await note(82, 1, 2, { start: true })), [1, 2]);
  // Two big STARTs wait for a slot, holding 2000 of the 2500 bytes of inputs.
  const big91 = note(91, 1000, 1, { start: true });
  await untilQueued(held(1000));
  const big92 = note(92, 1000, 2, { start: true });
  await untilQueued(held(1000, 1000));

  // The session is opened, waits for a slot, and its opening step would take 3000 bytes.
  const opened = await fetch(`http://127.0.0.1:${server.server.sagemakerPort!}/invocations`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-amzn-sagemaker-session-id": "NEW_SESSION" },
    body: JSON.stringify({
      inputs: [{ name: "IN", datatype: "UINT8", shape: [1000], data: new Array(1000).fill(3) }],
    }),
  });
  const body = await opened.text();
  assert.equal(opened.status, 503, body);
  assert.equal(opened.headers.get("retry-after"), "1");
  assert.equal(opened.headers.get("x-amzn-sagemaker-new-session-id"), null);
  assert.equal(await refusals(), refusedBefore + 1);
  const listing = await listSequences(server.url, "session");
  assert.deepEqual(
    listing.sequences.map((s) => Number(s.id)).sort((a, b) => a - b),
    [81, 82, 91, 92],
  );
  // Nothing ended: no session was left behind to end (it was ended, counted `forced`).
  assert.deepEqual(listing.summary.ended, endedBefore);
  assert.equal(await queuedBytes(), held(1000, 1000));

  await note(81, 1, 0, { end: true });
  assert.deepEqual(kept(await big91), [1000, 1000]);
  await note(82, 1, 0, { end: true });
  assert.deepEqual(kept(await big92), [1000, 2000]);
  for (const id of [91, 92]) await note(id, 1, 0, { end: true });
  const ended = (await listSequences(server.url, "session")).summary.ended;
  assert.deepEqual(ended, { ...endedBefore, end: (endedBefore.end ?? 0) + 4 });
});
