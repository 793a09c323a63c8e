import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { status } from "@grpc/grpc-js";
import { accumulatorConfig, accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { accumulatorRequest, errorOf, int32Output, StreamCall } from "../support/grpc-stream-call.ts";
import { getJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// One ModelStreamInfer stream carrying many more sequences than the model has slots, sent
// round-robin as Triton's clients send them: every START, then every second step, then
// every END. Reported: with 600 sequences on a model of 4 slots, the STARTs waiting in the
// backlog filled the stream's limit of requests in flight (--grpc-max-inflight-per-stream),
// reading stopped, and the ENDs that free the slots were never read: 81 of 1800 answers in
// 60 s, one slot's worth per idle timeout, the rest timed out. Triton reads on and serves
// them all. Here the limit is 8, the model has 2 slots and 20 sequences run 3 steps each:
// every answer arrives with its running sum, and no sequence times out.

const MODEL = "acc_two_slots";
const SEQUENCES = 20;
const STEPS = 3;

let server: TestServer;
let client: TestClient;
before(async () => {
  server = await startTestServer(
    {
      // 2 slots; a sequence left without its next step ends after 5 s (the stall's symptom).
      [MODEL]: {
        config: accumulatorConfig(MODEL, 2, "max_sequence_idle_microseconds: 5000000\n  direct { }"),
        onnx: accumulatorModel(),
      },
    },
    { grpcMaxInflightPerStream: 8 },
  );
  client = new TestClient(server.grpcPort);
});
after(async () => {
  client.close();
  await server.stop();
});

interface SequencesAnswer {
  readonly summary: { live: number; backlog: number; ended: Record<string, number> };
}

test("one stream with more sequences than slots × its in-flight limit, sent round-robin, gets every answer", {
  timeout: 120_000,
}, async () => {
  const call = new StreamCall(client);
  const value = (s: number, k: number): number => s * 10 + k + 1;
  const answers: Array<Promise<{ s: number; k: number; error: string; sum: number | undefined }>> = [];
  for (let k = 0; k < STEPS; k++) {
    for (let s = 0; s < SEQUENCES; s++) {
      const request = accumulatorRequest(MODEL, value(s, k), {
        id: 500 + s,
        start: k === 0,
        end: k === STEPS - 1,
      });
      answers.push(
        call.send({ ...request, id: `${s}:${k}` }).then((response) => {
          const error = errorOf(response);
          return { s, k, error, sum: error === "" ? int32Output(response) : undefined };
        }),
      );
    }
  }
  for (const { s, k, error, sum } of await Promise.all(answers)) {
    assert.equal(error, "", `sequence ${500 + s} step ${k + 1}`);
    let expected = 0;
    for (let j = 0; j <= k; j++) expected += value(s, j);
    assert.equal(sum, expected, `sequence ${500 + s} step ${k + 1}`);
  }
  assert.equal((await call.end()).code, status.OK);
  const answer = await getJson(`${server.url}/v2/models/${MODEL}/sequences`);
  const summary = (answer.body as unknown as SequencesAnswer).summary;
  assert.deepEqual(
    {
      live: summary.live,
      backlog: summary.backlog,
      ended: summary.ended.end,
      timeout: summary.ended.timeout,
    },
    { live: 0, backlog: 0, ended: SEQUENCES, timeout: 0 },
  );
});
