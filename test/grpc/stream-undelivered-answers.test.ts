import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { status } from "@grpc/grpc-js";
import { accumulatorConfig, accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { accumulatorRequest, errorOf, int32Output, StreamCall } from "../support/grpc-stream-call.ts";
import { getJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { TestClient } from "./support/grpc-harness.ts";

// A step that ran on a ModelStreamInfer stream but whose answer was never written (it
// waited, in request order, behind a slower answer of another sequence) when the stream
// went away: its step was applied, and its sequence goes on, as in Triton (a completed
// request leaves the stream's in-flight set; its response is simply not written). The
// request still waiting when the stream went away is cancelled and its sequence ends. So
// does the sequence of a START sent without an id whose answer was never written: that
// answer alone told its client the id the server gave it.
//
// The slower answer is made to wait deterministically, without timing:
//   gated  Direct, 2 slots, minimum_slot_utilization 1: a batch runs only when both
//          slots have a request, so a lone request of one sequence waits (for 600 s).
//   acc    Direct, 8 slots: runs every request at once.

const config = (name: string, maxBatchSize: number, direct: string): string =>
  accumulatorConfig(name, maxBatchSize, `max_sequence_idle_microseconds: 600000000\n  direct { ${direct} }`);

const GATED = "gated";
const ACC = "acc";

/** Tests that wait for the server fail after this instead of hanging. */
const WAIT = { timeout: 60_000 };

let server: TestServer;
let client: TestClient;
before(async () => {
  server = await startTestServer(
    {
      [GATED]: {
        config: config(GATED, 2, "minimum_slot_utilization: 1.0 max_queue_delay_microseconds: 600000000"),
        onnx: accumulatorModel(),
      },
      [ACC]: { config: config(ACC, 8, ""), onnx: accumulatorModel() },
    },
    { exitTimeoutSecs: 1 },
  );
  client = new TestClient(server.grpcPort);
});
after(async () => {
  client.close();
  await server.stop();
});

interface SequenceEntry {
  readonly id: number | string;
  readonly steps: number;
  readonly queued: number;
}

interface SequencesAnswer {
  readonly sequences: SequenceEntry[];
  readonly summary: { ended: Record<string, number> };
}

async function sequences(model: string): Promise<SequencesAnswer> {
  const answer = await getJson(`${server.url}/v2/models/${model}/sequences`);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer.body as unknown as SequencesAnswer;
}

/** Polls the sequences API until `done` holds (a generous deadline; no timing is asserted). */
async function waitForSequences(model: string, done: (answer: SequencesAnswer) => boolean, what: string) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const answer = await sequences(model);
    if (done(answer)) return answer;
    if (Date.now() > deadline) assert.fail(`${what}: still ${JSON.stringify(answer)}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const entry = (answer: SequencesAnswer, id: number): SequenceEntry | undefined =>
  answer.sequences.find((s) => s.id === id);

const cancelledCount = async (model: string): Promise<number> =>
  (await sequences(model)).summary.ended.cancelled ?? 0;

const step = (n: number) => ({ parameters: { sequence_step: { int64_param: n } } });

/**
 * On a new stream: `id`'s START (5) on the accumulator, then a lone gated request (it
 * waits), then `id`'s next step (3, `numbered`: as step 2), which runs and whose answer
 * waits behind the gated one. Resolves once that step has run, with the stream.
 */
async function stepHeldBehindGated(id: number, gatedId: number, numbered: boolean): Promise<StreamCall> {
  const call = new StreamCall(client, `held-${id}-`);
  const first = await call.send(accumulatorRequest(ACC, 5, { id, start: true }, numbered ? step(1) : {}));
  assert.equal(int32Output(first), 5);
  call.send(accumulatorRequest(GATED, 1, { id: gatedId, start: true })).catch(() => {});
  call.send(accumulatorRequest(ACC, 3, { id }, numbered ? step(2) : {})).catch(() => {});
  await waitForSequences(GATED, (a) => entry(a, gatedId)?.queued === 1, "the gated request should wait");
  await waitForSequences(ACC, (a) => entry(a, id)?.steps === 2, "the held step should have run");
  return call;
}

test(
  "a step that ran but whose answer waited behind a slower one keeps its sequence when the stream is cancelled",
  WAIT,
  async () => {
    const cancelledBefore = await cancelledCount(ACC);
    const gatedCancelledBefore = await cancelledCount(GATED);
    const first = await stepHeldBehindGated(61, 62, false);
    assert.equal((await first.cancel()).code, status.CANCELLED);
    // The gated request had not run: it is cancelled and its sequence ends, as before.
    await waitForSequences(GATED, (a) => entry(a, 62) === undefined, "the gated sequence should end");
    assert.equal(await cancelledCount(GATED), gatedCancelledBefore + 1);

    // The client reconnects and goes on: the step it was not answered was applied (5 + 3).
    const second = new StreamCall(client, "again-");
    assert.equal(int32Output(await second.send(accumulatorRequest(ACC, 100, { id: 61 }))), 108);
    assert.equal(int32Output(await second.send(accumulatorRequest(ACC, 1, { id: 61, end: true }))), 109);
    assert.equal((await second.end()).code, status.OK);
    assert.equal(await cancelledCount(ACC), cancelledBefore);
  },
);

test(
  "a numbered step that ran but was never answered is answered again when its client resends it",
  WAIT,
  async () => {
    const cancelledBefore = await cancelledCount(ACC);
    const first = await stepHeldBehindGated(71, 72, true);
    assert.equal((await first.cancel()).code, status.CANCELLED);
    await waitForSequences(GATED, (a) => entry(a, 72) === undefined, "the gated sequence should end");

    // The client resends step 2 on a new stream: its recorded answer, not a second 3 added.
    const second = new StreamCall(client, "retry-");
    assert.equal(int32Output(await second.send(accumulatorRequest(ACC, 3, { id: 71 }, step(2)))), 8);
    assert.equal(
      int32Output(await second.send(accumulatorRequest(ACC, 100, { id: 71, end: true }, step(3)))),
      108,
    );
    assert.equal((await second.end()).code, status.OK);
    assert.equal(await cancelledCount(ACC), cancelledBefore);
  },
);

test(
  "a START sent without an id whose answer, naming the id the server gave it, is never written: its sequence ends",
  WAIT,
  async () => {
    const live = (await sequences(ACC)).sequences.length;
    const cancelledBefore = await cancelledCount(ACC);
    const call = new StreamCall(client, "unnamed-");
    // A lone gated request waits; the START without an id runs at once, and its answer
    // (the only place its id is told) waits behind the gated one.
    call.send(accumulatorRequest(GATED, 1, { id: 82, start: true })).catch(() => {});
    await waitForSequences(GATED, (a) => entry(a, 82)?.queued === 1, "the gated request should wait");
    call.send(accumulatorRequest(ACC, 5, { id: 0, start: true })).catch(() => {});
    await waitForSequences(
      ACC,
      (a) => a.sequences.length === live + 1 && a.sequences.some((s) => s.steps === 1),
      "the START without an id should have run",
    );
    assert.equal((await call.cancel()).code, status.CANCELLED);

    // Nobody knows its id: it does not wait for its idle timeout (10 minutes) holding a slot.
    await waitForSequences(ACC, (a) => a.sequences.length === live, "the unreachable sequence should end");
    assert.equal(await cancelledCount(ACC), cancelledBefore + 1);
  },
);

test(
  "a numbered END that ran but was never answered is answered again when resent: its sequence does not start again",
  WAIT,
  async () => {
    const endedBefore = (await sequences(ACC)).summary.ended.end ?? 0;
    const call = await stepHeldBehindGated(91, 92, true);
    // The END (step 3) runs at once; its answer waits, in request order, behind the gated one.
    call.send(accumulatorRequest(ACC, 100, { id: 91, end: true }, step(3))).catch(() => {});
    await waitForSequences(
      ACC,
      (a) => entry(a, 91) === undefined && (a.summary.ended.end ?? 0) === endedBefore + 1,
      "the END should have run",
    );
    assert.equal((await call.cancel()).code, status.CANCELLED);
    await waitForSequences(GATED, (a) => entry(a, 92) === undefined, "the gated sequence should end");

    // On one server, without a store: the END sent again gets its answer (5 + 3 + 100), as
    // does its step 2, and nothing runs or begins.
    const second = new StreamCall(client, "end-retry-");
    assert.equal(
      int32Output(await second.send(accumulatorRequest(ACC, 100, { id: 91, end: true }, step(3)))),
      108,
    );
    assert.equal(int32Output(await second.send(accumulatorRequest(ACC, 3, { id: 91 }, step(2)))), 8);
    // A step it never applied is told to START: the sequence is over.
    assert.match(
      errorOf(await second.send(accumulatorRequest(ACC, 1, { id: 91 }, step(4)))),
      /must specify the START flag/,
    );
    assert.equal((await second.end()).code, status.OK);
    const after = await sequences(ACC);
    assert.equal(entry(after, 91), undefined);
    assert.equal(after.summary.ended.end ?? 0, endedBefore + 1);
  },
);
