import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { status } from "@grpc/grpc-js";
import { seeded } from "../../src/bench/seeded-random.ts";
import { accumulatorConfig, accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import {
  accumulatorRequest,
  errorOf,
  int32Output,
  StreamCall,
  startFlagError,
} from "../support/grpc-stream-call.ts";
import { getJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// The stateful suite's key cases over ModelStreamInfer, against the real server and the
// accumulator (a running sum kept as implicit state): sequences, Triton's admission
// errors in-band, restart, backlog, idle timeout, many sequences on one stream and one
// sequence over several streams.

/** The accumulator with the Direct strategy and an idle timeout of `idleUs`. */
const directConfig = (name: string, maxBatchSize: number, idleUs: number): string =>
  accumulatorConfig(name, maxBatchSize, `max_sequence_idle_microseconds: ${idleUs}\n  direct { }`);

/** 8 slots, no idle timeout within a test run. */
const ACC = "acc";
/** 2 slots: a third sequence waits in the backlog. */
const SMALL = "acc_small";
/** Sequences end after 300 ms without a request. */
const IDLE = "acc_idle";

let server: TestServer;
let client: TestClient;
before(async () => {
  server = await startTestServer(
    {
      [ACC]: { config: directConfig(ACC, 8, 600_000_000), onnx: accumulatorModel() },
      [SMALL]: { config: directConfig(SMALL, 2, 600_000_000), onnx: accumulatorModel() },
      [IDLE]: { config: directConfig(IDLE, 4, 300_000), onnx: accumulatorModel() },
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
}

interface SequencesAnswer {
  readonly sequences: SequenceEntry[];
  readonly summary: { live: number; backlog: number; ended: Record<string, number> };
}

async function sequences(model: string): Promise<SequencesAnswer> {
  const answer = await getJson(`${server.url}/v2/models/${model}/sequences`);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer.body as unknown as SequencesAnswer;
}

/** Polls the sequences API until `done` holds (fails after a generous deadline, never on timing). */
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

/** Tests that wait for the server fail after this instead of hanging. */
const WAIT = { timeout: 60_000 };

const entry = (answer: SequencesAnswer, id: number): SequenceEntry | undefined =>
  answer.sequences.find((s) => s.id === id);

test("a sequence keeps its running sum across stream requests and is freed at its end", WAIT, async () => {
  const call = new StreamCall(client);
  assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 5, { id: 11, start: true }))), 5);
  assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 3, { id: 11 }))), 8);
  assert.equal(entry(await sequences(ACC), 11)?.status, "active");
  assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 2, { id: 11, end: true }))), 10);
  assert.equal(entry(await sequences(ACC), 11), undefined);
  assert.equal((await call.end()).code, status.OK);
});

test(
  "a request without START is answered in-band with Triton's message and the stream goes on",
  WAIT,
  async () => {
    const call = new StreamCall(client);
    // Never seen.
    const unknown = await call.send(accumulatorRequest(ACC, 1, { id: 21 }));
    assert.equal(errorOf(unknown), startFlagError(21, ACC));
    // The stream is still usable: a sequence runs on it, then ends...
    assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 4, { id: 21, start: true }))), 4);
    assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 6, { id: 21, end: true }))), 10);
    // ...and after its end the id needs START again.
    const afterEnd = await call.send(accumulatorRequest(ACC, 1, { id: 21 }));
    assert.equal(errorOf(afterEnd), startFlagError(21, ACC));
    assert.equal(
      int32Output(await call.send(accumulatorRequest(ACC, 7, { id: 21, start: true, end: true }))),
      7,
    );
    assert.equal((await call.end()).code, status.OK);
  },
);

test("START on an active id restarts the sequence with fresh state", WAIT, async () => {
  const restartsBefore = (await sequences(ACC)).summary.ended.restart ?? 0;
  const call = new StreamCall(client);
  assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 10, { id: 31, start: true }))), 10);
  assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 5, { id: 31 }))), 15);
  assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 1, { id: 31, start: true }))), 1);
  assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 2, { id: 31 }))), 3);
  const listed = await sequences(ACC);
  assert.equal(listed.summary.ended.restart, restartsBefore + 1);
  assert.equal(listed.sequences.filter((s) => s.id === 31).length, 1);
  assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 4, { id: 31, end: true }))), 7);
  assert.equal((await call.end()).code, status.OK);
});

test("a sequence beyond the slots waits in the backlog and runs once a slot frees", WAIT, async () => {
  const call = new StreamCall(client);
  assert.equal(int32Output(await call.send(accumulatorRequest(SMALL, 1, { id: 41, start: true }))), 1);
  assert.equal(int32Output(await call.send(accumulatorRequest(SMALL, 2, { id: 42, start: true }))), 2);
  let thirdAnswered = false;
  // On a stream of its own: a stream answers in request order, so on the first stream the
  // answers after it would wait for it.
  const other = new StreamCall(client);
  const third = other.send(accumulatorRequest(SMALL, 3, { id: 43, start: true })).finally(() => {
    thirdAnswered = true;
  });
  const waiting = await waitForSequences(
    SMALL,
    (answer) => entry(answer, 43) !== undefined,
    "sequence 43 should be listed",
  );
  assert.equal(entry(waiting, 43)?.status, "backlogged");
  assert.equal(waiting.summary.backlog, 1);
  assert.equal(waiting.summary.live, 2);
  assert.equal(thirdAnswered, false);
  // The two live sequences go on meanwhile.
  assert.equal(int32Output(await call.send(accumulatorRequest(SMALL, 10, { id: 42 }))), 12);
  assert.equal(entry(await sequences(SMALL), 43)?.status, "backlogged");
  // Sequence 41 ends: its slot goes to 43, whose first request then runs.
  assert.equal(int32Output(await call.send(accumulatorRequest(SMALL, 5, { id: 41, end: true }))), 6);
  assert.equal(int32Output(await third), 3);
  assert.equal(entry(await sequences(SMALL), 43)?.status, "active");
  assert.equal(int32Output(await other.send(accumulatorRequest(SMALL, 4, { id: 43, end: true }))), 7);
  assert.equal(int32Output(await call.send(accumulatorRequest(SMALL, 1, { id: 42, end: true }))), 13);
  const done = await sequences(SMALL);
  assert.deepEqual([done.sequences.length, done.summary.backlog], [0, 0]);
  assert.equal((await call.end()).code, status.OK);
  assert.equal((await other.end()).code, status.OK);
});

test("an idle sequence times out; its next request is told to START, in-band", WAIT, async () => {
  const timeoutsBefore = (await sequences(IDLE)).summary.ended.timeout ?? 0;
  const call = new StreamCall(client);
  assert.equal(int32Output(await call.send(accumulatorRequest(IDLE, 9, { id: 51, start: true }))), 9);
  const afterwards = await waitForSequences(
    IDLE,
    (answer) => entry(answer, 51) === undefined,
    "sequence 51 should time out",
  );
  assert.equal(afterwards.summary.ended.timeout, timeoutsBefore + 1);
  assert.equal(errorOf(await call.send(accumulatorRequest(IDLE, 1, { id: 51 }))), startFlagError(51, IDLE));
  // The stream and the id are usable again: a new sequence starts from zero.
  assert.equal(
    int32Output(await call.send(accumulatorRequest(IDLE, 2, { id: 51, start: true, end: true }))),
    2,
  );
  assert.equal((await call.end()).code, status.OK);
});

test(
  "many sequences multiplexed on one stream, requests pipelined, each gets its own sums in order",
  WAIT,
  async () => {
    const count = 24; // three times the model's 8 slots: most wait in the backlog at first
    const steps = 8;
    const random = seeded(7);
    const values = Array.from({ length: count }, (_, s) =>
      Array.from({ length: steps }, (_, k) => s * 100 + k + 1),
    );
    // Every request is written at once, sequences interleaved at random, each in its own order.
    const next = new Array<number>(count).fill(0);
    const order: number[] = [];
    while (order.length < count * steps) {
      const s = Math.floor(random() * count);
      if (next[s]! < steps) {
        order.push(s);
        next[s]!++;
      }
    }
    next.fill(0);
    const call = new StreamCall(client);
    const arrivals: number[][] = Array.from({ length: count }, () => []);
    const answers = order.map((s) => {
      const k = next[s]!++;
      const id = 1000 + s;
      return call
        .send(accumulatorRequest(ACC, values[s]![k]!, { id, start: k === 0, end: k === steps - 1 }))
        .then((response) => {
          const sum = int32Output(response);
          arrivals[s]!.push(sum);
          return sum;
        });
    });
    await Promise.all(answers);
    for (let s = 0; s < count; s++) {
      let sum = 0;
      const expected = values[s]!.map((v) => {
        sum += v;
        return sum;
      });
      // Right sums, and answered in the order the sequence's requests were sent.
      assert.deepEqual(arrivals[s], expected, `sequence ${1000 + s}`);
    }
    const done = await sequences(ACC);
    assert.equal(done.sequences.filter((s) => Number(s.id) >= 1000).length, 0);
    assert.equal((await call.end()).code, status.OK);
  },
);

test("one sequence spread over several streams keeps its state", WAIT, async () => {
  const calls = [new StreamCall(client), new StreamCall(client), new StreamCall(client)];
  let expected = 0;
  for (let k = 0; k < 9; k++) {
    expected += k + 1;
    const request = accumulatorRequest(ACC, k + 1, { id: 61, start: k === 0, end: k === 8 });
    assert.equal(int32Output(await calls[k % calls.length]!.send(request)), expected, `step ${k}`);
  }
  for (const call of calls) assert.equal((await call.end()).code, status.OK);
});

test("string ids, and a START without an id gets one from the server in the response", WAIT, async () => {
  const call = new StreamCall(client);
  assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 2, { id: "call-7", start: true }))), 2);
  assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 3, { id: "call-7" }))), 5);
  assert.equal(
    errorOf(await call.send(accumulatorRequest(ACC, 3, { id: "call-8" }))),
    startFlagError("call-8", ACC),
  );
  assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 4, { id: "call-7", end: true }))), 9);

  const started = await call.send({
    ...accumulatorRequest(ACC, 20, { id: 0 }),
    parameters: { sequence_start: { bool_param: true } },
  });
  assert.equal(int32Output(started), 20);
  const assigned = started.infer_response?.parameters?.sequence_id;
  assert.equal(assigned?.parameter_choice, "int64_param");
  const id = BigInt.asUintN(64, BigInt(String(assigned?.int64_param)));
  assert.notEqual(id, 0n);
  // The assigned id addresses the sequence: its state goes on.
  assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 1, { id, end: true }))), 21);
  assert.equal((await call.end()).code, status.OK);
});

test(
  "bad requests and unknown models are answered in-band; good requests on the same stream still work",
  WAIT,
  async () => {
    const call = new StreamCall(client);
    assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 3, { id: 71, start: true }))), 3);
    const wrongType = await call.send({
      ...accumulatorRequest(ACC, 0, { id: 71 }),
      inputs: [{ name: "INPUT", datatype: "FP32", shape: [1, 1] }],
    });
    assert.match(errorOf(wrongType), /INPUT/);
    const missing = await call.send({
      ...accumulatorRequest(ACC, 0, { id: 72, start: true }),
      inputs: [],
      raw_input_contents: [],
    });
    assert.match(errorOf(missing), /INPUT/);
    const unknown = await call.send(accumulatorRequest("nope", 1, { id: 71 }));
    assert.equal(errorOf(unknown), "Request for unknown model: 'nope' is not found");
    const shortRaw = await call.send({
      ...accumulatorRequest(ACC, 0, { id: 71 }),
      raw_input_contents: [Buffer.alloc(2)],
    });
    assert.notEqual(errorOf(shortRaw), "");
    // A failed request of sequence 71 before it ran did not touch its state.
    assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 4, { id: 71 }))), 7);
    assert.equal(int32Output(await call.send(accumulatorRequest(ACC, 5, { id: 71, end: true }))), 12);
    assert.equal((await call.end()).code, status.OK);
  },
);
