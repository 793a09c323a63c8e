import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type ServiceError, status } from "@grpc/grpc-js";
import type { ModelInferResponseMessage } from "../../src/frontends/grpc/messages.ts";
import { accumulatorConfig, accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { callError, TestClient } from "../grpc/support/grpc-harness.ts";
import {
  accumulatorRequest,
  errorOf,
  int32Output,
  StreamCall,
  startFlagError,
} from "../support/grpc-stream-call.ts";
import { getJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Cancellation frees state, over the real server: a sequence whose request is cancelled
// before it ran (its stream cancelled, or its unary call) ends with reason "cancelled",
// leaves the sequences API, and needs START again; sequences with nothing in flight on a
// stream that goes away carry on over another stream.
//
// The requests that must wait are made to wait deterministically, without timing:
//   gated  Direct, 2 slots, minimum_slot_utilization 1: a batch runs only when both
//          slots have a request, so a lone request of one sequence waits (for 600 s).
//   single Direct, 1 slot: a second sequence waits in the backlog.

const config = (name: string, maxBatchSize: number, direct: string): string =>
  accumulatorConfig(name, maxBatchSize, `max_sequence_idle_microseconds: 600000000\n  direct { ${direct} }`);

const GATED = "gated";
const SINGLE = "single";

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
      [SINGLE]: { config: config(SINGLE, 1, ""), onnx: accumulatorModel() },
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
  readonly status: string;
  readonly steps: number;
  readonly queued: number;
  readonly state_bytes: number;
}

interface SequencesAnswer {
  readonly sequences: SequenceEntry[];
  readonly summary: { live: number; backlog: number; state_bytes: number; ended: Record<string, number> };
}

async function sequences(model: string): Promise<SequencesAnswer> {
  const answer = await getJson(`${server.url}/v2/models/${model}/sequences`);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer.body as unknown as SequencesAnswer;
}

/** Polls the sequences API until `done` holds (a generous deadline; no timing is asserted). */
async function waitForSequences(
  model: string,
  done: (answer: SequencesAnswer) => boolean,
  what: string,
): Promise<SequencesAnswer> {
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

test("cancelling a stream ends a sequence whose request had not run and frees its state", WAIT, async () => {
  const cancelledBefore = await cancelledCount(GATED);
  const first = new StreamCall(client, "first-");
  // Both slots get a request: the batch runs. X holds state 5, Y state 1.
  const [x1, y1] = await Promise.all([
    first.send(accumulatorRequest(GATED, 5, { id: 1, start: true })),
    first.send(accumulatorRequest(GATED, 1, { id: 2, start: true })),
  ]);
  assert.deepEqual([int32Output(x1), int32Output(y1)], [5, 1]);
  // X alone: its request waits for the other slot to have work.
  const x2 = first.send(accumulatorRequest(GATED, 3, { id: 1 }));
  const waiting = await waitForSequences(
    GATED,
    (a) => entry(a, 1)?.queued === 1,
    "X's request should be queued",
  );
  assert.equal(entry(waiting, 1)?.steps, 1);
  assert.ok((entry(waiting, 1)?.state_bytes ?? 0) > 0, "X holds state");
  const stateBytes = waiting.summary.state_bytes;

  // The client goes away with X's request unanswered.
  const ended = await first.cancel();
  assert.equal(ended.code, status.CANCELLED);
  await assert.rejects(x2);

  const afterwards = await waitForSequences(GATED, (a) => entry(a, 1) === undefined, "X should end");
  assert.equal(afterwards.summary.ended.cancelled, cancelledBefore + 1);
  assert.equal(afterwards.summary.live, 1);
  assert.ok(afterwards.summary.state_bytes < stateBytes, "X's state is freed");
  // Y had nothing in flight when the stream went away: it is untouched.
  assert.deepEqual([entry(afterwards, 2)?.status, entry(afterwards, 2)?.steps], ["active", 1]);

  const second = new StreamCall(client, "second-");
  // X is gone: its next request needs START (answered at once, in-band).
  assert.equal(errorOf(await second.send(accumulatorRequest(GATED, 3, { id: 1 }))), startFlagError(1, GATED));
  // Y continues on a new stream, beside a new sequence Z in X's former slot.
  const [y2, z1] = await Promise.all([
    second.send(accumulatorRequest(GATED, 2, { id: 2 })),
    second.send(accumulatorRequest(GATED, 100, { id: 3, start: true })),
  ]);
  assert.deepEqual([int32Output(y2), int32Output(z1)], [3, 100]);
  // A stream that ends normally leaves its sequences alone too.
  assert.equal((await second.end()).code, status.OK);
  const third = new StreamCall(client, "third-");
  const [y3, z2] = await Promise.all([
    third.send(accumulatorRequest(GATED, 4, { id: 2, end: true })),
    third.send(accumulatorRequest(GATED, 1, { id: 3, end: true })),
  ]);
  assert.deepEqual([int32Output(y3), int32Output(z2)], [7, 101]);
  assert.equal((await third.end()).code, status.OK);
  const done = await sequences(GATED);
  assert.deepEqual(
    [done.sequences.length, done.summary.state_bytes, done.summary.ended.cancelled],
    [0, 0, cancelledBefore + 1],
  );
});

test("cancelling a unary call ends its backlogged sequence; the live one goes on", WAIT, async () => {
  const cancelledBefore = await cancelledCount(SINGLE);
  const infer = (request: object): Promise<ModelInferResponseMessage> =>
    client.unary<ModelInferResponseMessage>("ModelInfer", request);
  const sum = (response: ModelInferResponseMessage): number =>
    Buffer.from(response.raw_output_contents?.[0] ?? []).readInt32LE(0);

  assert.equal(sum(await infer(accumulatorRequest(SINGLE, 5, { id: 11, start: true }))), 5);
  // The only slot is taken: sequence 12 waits in the backlog with its first request.
  const { call, response } = client.start<ModelInferResponseMessage>(
    "ModelInfer",
    accumulatorRequest(SINGLE, 7, { id: 12, start: true }),
  );
  const waiting = await waitForSequences(
    SINGLE,
    (a) => entry(a, 12) !== undefined,
    "12 should be backlogged",
  );
  assert.equal(entry(waiting, 12)?.status, "backlogged");
  call.cancel();
  assert.equal(((await callError(response)) as ServiceError).code, status.CANCELLED);

  const afterwards = await waitForSequences(SINGLE, (a) => entry(a, 12) === undefined, "12 should end");
  assert.equal(afterwards.summary.ended.cancelled, cancelledBefore + 1);
  assert.equal(afterwards.summary.backlog, 0);
  const notStarted = await callError(infer(accumulatorRequest(SINGLE, 1, { id: 12 })));
  assert.equal(notStarted.code, status.INVALID_ARGUMENT);
  assert.equal(notStarted.details, startFlagError(12, SINGLE));
  // Sequence 11 never noticed.
  assert.equal(sum(await infer(accumulatorRequest(SINGLE, 3, { id: 11, end: true }))), 8);
});

test(
  "cancelling a stream ends its backlogged sequence; an idle one from that stream goes on elsewhere",
  WAIT,
  async () => {
    const cancelledBefore = await cancelledCount(SINGLE);
    const first = new StreamCall(client, "first-");
    assert.equal(int32Output(await first.send(accumulatorRequest(SINGLE, 5, { id: 21, start: true }))), 5);
    const backlogged = first.send(accumulatorRequest(SINGLE, 7, { id: 22, start: true }));
    await waitForSequences(SINGLE, (a) => entry(a, 22)?.status === "backlogged", "22 should be backlogged");
    assert.equal((await first.cancel()).code, status.CANCELLED);
    await assert.rejects(backlogged);

    const afterwards = await waitForSequences(SINGLE, (a) => entry(a, 22) === undefined, "22 should end");
    assert.equal(afterwards.summary.ended.cancelled, cancelledBefore + 1);
    const second = new StreamCall(client, "second-");
    assert.equal(
      errorOf(await second.send(accumulatorRequest(SINGLE, 1, { id: 22 }))),
      startFlagError(22, SINGLE),
    );
    assert.equal(int32Output(await second.send(accumulatorRequest(SINGLE, 3, { id: 21, end: true }))), 8);
    assert.equal((await second.end()).code, status.OK);
  },
);

test(
  "cancelling a stream drops a numbered START that waited in the backlog: it leaves no sequence, and ends none",
  WAIT,
  async () => {
    const cancelledBefore = await cancelledCount(SINGLE);
    const endedBefore = (await sequences(SINGLE)).summary.ended;
    const step = (n: number) => ({ parameters: { sequence_step: { int64_param: n } } });
    const holder = new StreamCall(client, "holder-");
    assert.equal(int32Output(await holder.send(accumulatorRequest(SINGLE, 1, { id: 23, start: true }))), 1);
    // Sequence 24's START, numbered, waits for the only slot, a step behind it; its stream goes away.
    const first = new StreamCall(client, "first-");
    const start = first.send(accumulatorRequest(SINGLE, 10, { id: 24, start: true }, step(1)));
    const next = first.send(accumulatorRequest(SINGLE, 20, { id: 24 }, step(2)));
    await waitForSequences(SINGLE, (a) => entry(a, 24)?.queued === 2, "24 should wait with two requests");
    assert.equal((await first.cancel()).code, status.CANCELLED);
    await assert.rejects(start);
    await assert.rejects(next);

    // It never began: nothing is left of it, and nothing ended.
    const afterwards = await waitForSequences(SINGLE, (a) => entry(a, 24) === undefined, "24 should be gone");
    assert.equal(afterwards.summary.backlog, 0);
    assert.deepEqual(afterwards.summary.ended, endedBefore);
    // Its client sends it again, from its START: it waits, and runs from scratch.
    const second = new StreamCall(client, "second-");
    const again = second.send(accumulatorRequest(SINGLE, 10, { id: 24, start: true }, step(1)));
    await waitForSequences(SINGLE, (a) => entry(a, 24)?.status === "backlogged", "24 should wait again");
    assert.equal(int32Output(await holder.send(accumulatorRequest(SINGLE, 2, { id: 23, end: true }))), 3);
    assert.equal(int32Output(await again), 10);
    assert.equal(int32Output(await second.send(accumulatorRequest(SINGLE, 20, { id: 24 }, step(2)))), 30);
    assert.equal(
      int32Output(await second.send(accumulatorRequest(SINGLE, 5, { id: 24, end: true }, step(3)))),
      35,
    );
    assert.equal((await second.end()).code, status.OK);
    assert.equal((await holder.end()).code, status.OK);
    assert.equal(await cancelledCount(SINGLE), cancelledBefore);
  },
);

test("a stream the client half-closes still answers its requests that had to wait", WAIT, async () => {
  const cancelledBefore = await cancelledCount(GATED);
  const first = new StreamCall(client, "first-");
  const [x1, y1] = await Promise.all([
    first.send(accumulatorRequest(GATED, 5, { id: 31, start: true })),
    first.send(accumulatorRequest(GATED, 1, { id: 32, start: true })),
  ]);
  assert.deepEqual([int32Output(x1), int32Output(y1)], [5, 1]);
  const x2 = first.send(accumulatorRequest(GATED, 3, { id: 31 }));
  await waitForSequences(GATED, (a) => entry(a, 31)?.queued === 1, "31's request should be queued");
  // Done sending, not gone: the stream's waiting request is not cancelled.
  const ended = first.end();
  const second = new StreamCall(client, "second-");
  const y2 = await second.send(accumulatorRequest(GATED, 2, { id: 32 }));
  assert.deepEqual([int32Output(await x2), int32Output(y2)], [8, 3]);
  assert.equal((await ended).code, status.OK);
  const [x3, y3] = await Promise.all([
    second.send(accumulatorRequest(GATED, 1, { id: 31, end: true })),
    second.send(accumulatorRequest(GATED, 1, { id: 32, end: true })),
  ]);
  assert.deepEqual([int32Output(x3), int32Output(y3)], [9, 4]);
  assert.equal((await second.end()).code, status.OK);
  assert.equal(await cancelledCount(GATED), cancelledBefore);
});

test(
  "cancelling a numbered request that had not run drops only it: its retry applies it once",
  WAIT,
  async () => {
    const cancelledBefore = await cancelledCount(GATED);
    const step = (n: number) => ({ parameters: { sequence_step: { int64_param: n } } });
    const first = new StreamCall(client, "first-");
    const [x1, y1] = await Promise.all([
      first.send(accumulatorRequest(GATED, 5, { id: 41, start: true }, step(1))),
      first.send(accumulatorRequest(GATED, 1, { id: 42, start: true })),
    ]);
    assert.deepEqual([int32Output(x1), int32Output(y1)], [5, 1]);
    // X's step 2 waits for the other slot to have work; its client goes away.
    const x2 = first.send(accumulatorRequest(GATED, 3, { id: 41 }, step(2)));
    await waitForSequences(GATED, (a) => entry(a, 41)?.queued === 1, "41's request should be queued");
    assert.equal((await first.cancel()).code, status.CANCELLED);
    await assert.rejects(x2);

    // X goes on: its client sends step 2 again, beside Y's next step.
    const second = new StreamCall(client, "second-");
    const [x2again, y2] = await Promise.all([
      second.send(accumulatorRequest(GATED, 3, { id: 41 }, step(2))),
      second.send(accumulatorRequest(GATED, 2, { id: 42 })),
    ]);
    assert.deepEqual([int32Output(x2again), int32Output(y2)], [8, 3]);
    const [x3, y3] = await Promise.all([
      second.send(accumulatorRequest(GATED, 1, { id: 41, end: true }, step(3))),
      second.send(accumulatorRequest(GATED, 1, { id: 42, end: true })),
    ]);
    assert.deepEqual([int32Output(x3), int32Output(y3)], [9, 4]);
    assert.equal((await second.end()).code, status.OK);
    assert.equal(await cancelledCount(GATED), cancelledBefore);
  },
);
