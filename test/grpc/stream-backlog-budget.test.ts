import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { status } from "@grpc/grpc-js";
import { securityOptions } from "../../src/config/security-options.ts";
import { QUEUED_REQUEST_OVERHEAD } from "../../src/core/scheduler/queue-budget.ts";
import { accumulatorConfig, accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { accumulatorRequest, errorOf, int32Output, StreamCall } from "../support/grpc-stream-call.ts";
import { metricValue, waitFor } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { TestClient } from "./support/grpc-harness.ts";

// The steps a ModelStreamInfer client sends behind a START waiting in the backlog are not
// counted by the stream's limits (they wait for a slot another stream frees), but by
// --max-queued-start-bytes, at what each holds in memory: its inputs and the request
// itself. Reported: counted by their tensor bytes alone, 10,000 steps of an INT32 [1]
// queued behind a START counted 40 KB and held 50 MB. Here the budget has room for ten
// requests of an INT32 [1]: the START and nine steps wait, the steps after them are
// refused in-band, and once the slot frees the ten run and the refused ones did not.

const MODEL = "one_slot";
/** What a waiting request of an INT32 [1] holds. */
const HELD = 4 + QUEUED_REQUEST_OVERHEAD;
const ROOM = 10;
const SENT = 20;

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

test("steps queued behind a waiting START count what they hold: past the budget they are refused, in-band", async () => {
  // Another stream's sequence takes the only slot.
  const holder = new StreamCall(client, "holder-");
  assert.equal(int32Output(await holder.send(accumulatorRequest(MODEL, 1, { id: 1, start: true }))), 1);

  // A START waits for it; its client sends 19 steps of 1 behind it.
  const call = new StreamCall(client);
  const answers = [call.send(accumulatorRequest(MODEL, 1, { id: 2, start: true }))];
  for (let i = 1; i < SENT; i++) answers.push(call.send(accumulatorRequest(MODEL, 1, { id: 2 })));
  await waitFor("the waiting requests to fill the budget", async () =>
    (await metricValue(server.metricsUrl, "seqserve_limit_refusals_total", {
      limit: "queued_start_bytes",
    })) ===
    SENT - ROOM
      ? true
      : undefined,
  );
  assert.equal(await queuedBytes(), ROOM * HELD);

  // The slot frees: the START and the nine steps that fit run (sums 1..10), the rest were
  // refused as a START past the budget is, and did not add to the sum.
  assert.equal(int32Output(await holder.send(accumulatorRequest(MODEL, 0, { id: 1, end: true }))), 1);
  const settled = await Promise.all(answers);
  assert.deepEqual(
    settled.slice(0, ROOM).map((answer) => int32Output(answer)),
    Array.from({ length: ROOM }, (_, i) => i + 1),
  );
  for (const refused of settled.slice(ROOM)) {
    assert.match(
      errorOf(refused),
      new RegExp(
        `cannot queue a step of sequence 2, whose START waits in the backlog for a slot: its ${HELD} bytes \\(inputs, and ${QUEUED_REQUEST_OVERHEAD} for the request itself\\) would take the requests waiting for a sequence slot past the server's limit of ${ROOM * HELD} bytes \\(--max-queued-start-bytes`,
      ),
    );
  }
  assert.equal(int32Output(await call.send(accumulatorRequest(MODEL, 5, { id: 2, end: true }))), ROOM + 5);
  assert.equal(await queuedBytes(), 0);
  assert.equal((await call.end()).code, status.OK);
  assert.equal((await holder.end()).code, status.OK);
});
