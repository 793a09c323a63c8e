import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { status } from "@grpc/grpc-js";
import { securityOptions } from "../../src/config/security-options.ts";
import { QUEUED_REQUEST_OVERHEAD } from "../../src/core/scheduler/queue-budget.ts";
import type { ParameterMap } from "../../src/frontends/grpc/messages.ts";
import { accumulatorConfig, accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import {
  accumulatorRequest,
  errorOf,
  int32Output,
  StreamCall,
  startFlagError,
} from "../support/grpc-stream-call.ts";
import { listSequences, metricValue, waitFor } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { TestClient } from "./support/grpc-harness.ts";

// The steps a ModelStreamInfer client sends behind a START waiting in the backlog are not
// counted by the stream's limits (they wait for a slot another stream frees), but by
// --max-queued-start-bytes, at what each holds in memory: its inputs and the request
// itself. Reported: counted by their tensor bytes alone, 10,000 steps of an INT32 [1]
// queued behind a START counted 40 KB and held 50 MB.
//
// The step that does not fit withdraws its sequence, which has not begun: its START and
// the steps queued behind it are refused with it, the same refusal, and the client's later
// steps of the id are told to START. Reported: the sequence went on without the refused
// step, so its later steps were applied without it (a START of 10 and steps of 20, 30, 40
// refused, 50 and 60 answered 110 and 170, where 150 and 210 are right); numbered with
// sequence_step, the later steps were told they could not run yet, and the sequence held
// its slot until its idle timeout while the stream's answers waited behind it.

const MODEL = "one_slot";
/** What a waiting request of an INT32 [1] holds. */
const HELD = 4 + QUEUED_REQUEST_OVERHEAD;
/** The START and two steps fit; a third step does not. */
const ROOM = 3;

let server: TestServer;
let client: TestClient;
before(async () => {
  server = await startTestServer(
    {
      [MODEL]: {
        config: accumulatorConfig(MODEL, 1, "max_sequence_idle_microseconds: 600000000\n  direct { }"),
        onnx: accumulatorModel(),
      },
    },
    {
      security: securityOptions({
        limits: { ...securityOptions().limits, maxQueuedStartBytes: ROOM * HELD },
      }),
    },
  );
  client = new TestClient(server.grpcPort);
});
after(async () => {
  client.close();
  await server.stop();
});

const queuedBytes = async () =>
  (await metricValue(server.metricsUrl, "seqserve_queued_start_bytes", {})) ?? 0;
const refusals = async () =>
  (await metricValue(server.metricsUrl, "seqserve_limit_refusals_total", { limit: "queued_start_bytes" })) ??
  0;
const ended = async () => (await listSequences(server.url, MODEL)).summary.ended;

/** The refusal every request of the withdrawn sequence `id` gets, under its own request id. */
const withdrawn = (requestId: string, id: number) =>
  `[request id: ${requestId}] model '${MODEL}' cannot queue a step of sequence ${id}, whose START waits in the backlog for a slot: its ${HELD} bytes (inputs, and ${QUEUED_REQUEST_OVERHEAD} for the request itself) would take the requests waiting for a sequence slot past the server's limit of ${ROOM * HELD} bytes (--max-queued-start-bytes, for every model's together); the sequence is withdrawn, not started: its START and every step sent behind it are refused alike, and its next request must be its START again; retry later`;

for (const numbered of [false, true]) {
  test(`${numbered ? "numbered" : "unnumbered"} steps behind a waiting START: the one past the budget withdraws the sequence, every request of it refused, and its id starts again from scratch`, async () => {
    const step = (n: number): { parameters?: ParameterMap } =>
      numbered ? { parameters: { sequence_step: { int64_param: String(n) } } } : {};
    const [holderId, id] = numbered ? [201, 202] : [101, 102];
    const refusedBefore = await refusals();
    const endedBefore = await ended();

    // One stream, two sequences, one slot: the first takes it, the second's START waits,
    // and its client goes on sending steps behind it.
    const call = new StreamCall(client, numbered ? "n" : "u");
    assert.equal(
      int32Output(await call.send(accumulatorRequest(MODEL, 1, { id: holderId, start: true }, step(1)))),
      1,
    );
    const waiting = [
      call.send(accumulatorRequest(MODEL, 10, { id, start: true }, step(1))),
      call.send(accumulatorRequest(MODEL, 20, { id }, step(2))),
      call.send(accumulatorRequest(MODEL, 30, { id }, step(3))),
      call.send(accumulatorRequest(MODEL, 40, { id }, step(4))),
    ];
    await waitFor("the step past the budget to be refused", async () =>
      (await refusals()) === refusedBefore + 1 ? true : undefined,
    );
    // Nothing of it waits any more: what its requests held is back.
    assert.equal(await queuedBytes(), 0);
    assert.equal((await listSequences(server.url, MODEL)).sequences.length, 1);

    // The first sequence ends, freeing the slot: the withdrawn one does not take it.
    assert.equal(
      int32Output(await call.send(accumulatorRequest(MODEL, 2, { id: holderId, end: true }, step(2)))),
      3,
    );
    const answers = await Promise.all(waiting);
    assert.deepEqual(
      answers.map(errorOf),
      answers.map((answer) => withdrawn(answer.infer_response?.id ?? "", id)),
    );
    // Its later steps find no sequence (not one with a hole), and are told to START.
    for (const [value, flags, n] of [
      [50, { id }, 5],
      [60, { id, end: true }, 6],
    ] as const)
      assert.equal(
        errorOf(await call.send(accumulatorRequest(MODEL, value, flags, step(n)))),
        startFlagError(id, MODEL),
      );

    // Sent again from its START, the sequence runs from scratch.
    assert.equal(
      int32Output(await call.send(accumulatorRequest(MODEL, 10, { id, start: true }, step(1)))),
      10,
    );
    assert.equal(int32Output(await call.send(accumulatorRequest(MODEL, 20, { id }, step(2)))), 30);
    assert.equal(int32Output(await call.send(accumulatorRequest(MODEL, 60, { id, end: true }, step(3)))), 90);
    assert.equal((await call.end()).code, status.OK);

    // Two sequences ended, as their ENDs asked; the withdrawn one never began, and ended nothing.
    assert.deepEqual(await ended(), { ...endedBefore, end: (endedBefore.end ?? 0) + 2 });
    assert.equal(await refusals(), refusedBefore + 1);
    assert.equal(await queuedBytes(), 0);
  });
}
