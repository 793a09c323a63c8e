import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { StreamClient } from "../http/support/ws-client.ts";
import { postJson } from "../support/http-client.ts";
import { touchModel } from "../support/model-repository.ts";
import { accumulate, accumulatorConfig, listSequences, waitFor } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { type LogLine, memoryLogger } from "./support/memory-logger.ts";

// Reloading an unchanged sequence model through the repository API (HTTP or gRPC) keeps
// its live sequences (its folder touched, so the load is one: as in Triton, a load of a
// model whose folder did not change changes nothing) with their state: their next requests continue where they were,
// over a WebSocket stream opened before the reload too, and the handover is logged.
// (Reported as dropping every live sequence's state.)

const CONFIG = accumulatorConfig(
  "acc",
  4,
  "max_sequence_idle_microseconds: 60000000\n  oldest { max_candidate_sequences: 8 }",
);

let server: TestServer;
let grpc: TestClient;
const lines: LogLine[] = [];
before(async () => {
  server = await startTestServer(
    { acc: { config: CONFIG, onnx: accumulatorModel() } },
    { modelControlMode: "explicit", loadModels: ["acc"] },
    memoryLogger(lines),
  );
  grpc = new TestClient(server.grpcPort);
});
after(async () => {
  grpc.close();
  await server.stop();
});

test("live sequences keep their state across a reload of the unchanged model, over HTTP and gRPC", async () => {
  assert.equal(await accumulate(server.url, "acc", 5, { id: 1, start: true }), 5);
  assert.equal(await accumulate(server.url, "acc", 7, { id: "two", start: true }), 7);
  assert.equal(await accumulate(server.url, "acc", 3, { id: 1 }), 8);

  touchModel(server.repositoryPath, "acc");
  const reload = await postJson(`${server.url}/v2/repository/models/acc/load`, {});
  assert.equal(reload.status, 200, JSON.stringify(reload.body));
  assert.equal(await accumulate(server.url, "acc", 10, { id: 1 }), 18);
  assert.equal(await accumulate(server.url, "acc", 1, { id: "two" }), 8);

  touchModel(server.repositoryPath, "acc");
  await grpc.unary("RepositoryModelLoad", { model_name: "acc" });
  assert.equal(await accumulate(server.url, "acc", 2, { id: 1, end: true }), 20);
  assert.equal(await accumulate(server.url, "acc", 2, { id: "two", end: true }), 10);

  const listing = await listSequences(server.url, "acc");
  assert.equal(listing.summary.ended.reloaded ?? 0, 0);
  assert.equal(listing.summary.ended.end, 2);
  const moved = lines.filter((l) => l.event === "sequences_moved");
  assert.equal(moved.length, 2, "each reload logged the sequences it moved");
  assert.deepEqual(
    moved.map((l) => l.count),
    [2, 2],
  );
});

test("a WebSocket stream open across a reload goes on with its sequence, and ends it on close", async () => {
  const stream = await StreamClient.open(
    { port: Number(new URL(server.url).port) },
    "/v2/models/acc/stream?sequence_id=ws1",
  );
  const step = async (value: number) => {
    stream.send({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }] });
    const answer = await stream.nextText();
    assert.ok(answer.outputs !== undefined, JSON.stringify(answer));
    return (answer.outputs as { data: number[] }[])[0]!.data[0];
  };
  assert.equal(await step(5), 5);
  touchModel(server.repositoryPath, "acc");
  const reload = await postJson(`${server.url}/v2/repository/models/acc/load`, {});
  assert.equal(reload.status, 200, JSON.stringify(reload.body));
  assert.equal(await step(3), 8);
  await stream.close(1000);
  // Closed, the stream ended its sequence where it now lives: no slot stays held.
  await waitFor("the stream's sequence to end", async () =>
    (await listSequences(server.url, "acc")).sequences.some((s) => s.id === "ws1") ? undefined : true,
  );
});
