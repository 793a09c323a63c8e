import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { startServer, type TestServer } from "./support/http-server.ts";
import {
  type Gate,
  gatedEchoModel,
  type RunningSumModel,
  runningSumModel,
} from "./support/running-sum-model.ts";
import { framed, refusedUpgrade, StreamClient, until } from "./support/ws-client.ts";

// One WebSocket stream carries one sequence: the connection starts it, keeps its id, and
// answers every message in order, in the framing the message came in.

const ASSIGNED = 1n << 62n;

/** A framed message with INPUT as binary data. */
function framedInt32(values: number[], id?: string, parameters?: Record<string, unknown>): Buffer {
  const bytes = new Int32Array(values);
  const input = {
    name: "INPUT",
    datatype: "INT32",
    shape: [values.length],
    parameters: { binary_data_size: bytes.byteLength },
  };
  const header = {
    ...(id === undefined ? {} : { id }),
    ...(parameters === undefined ? {} : { parameters }),
    inputs: [input],
  };
  return framed(header, [bytes]);
}

function sumOf(binary: Buffer): number {
  return binary.readInt32LE(0);
}

describe("WebSocket streams: one connection, one sequence", { timeout: 30_000 }, () => {
  let server: TestServer;
  let model: RunningSumModel;
  let echo: { gate: Gate };
  before(async () => {
    server = await startServer();
    model = runningSumModel();
    server.fake.registry.add(model.model);
    const gated = gatedEchoModel();
    server.fake.registry.add(gated.model);
    echo = gated;
  });
  after(() => server.close());

  it("runs a framed sequence with a server-assigned id, ended by its last request", async () => {
    const client = await StreamClient.open(server, "/v2/models/running_sum/stream");
    client.send(framedInt32([1, 2], "first"));
    const first = await client.nextFramed();
    assert.equal(first.json.id, "first");
    assert.match(first.text, new RegExp(`"parameters":\\{"sequence_id":${ASSIGNED}\\}`));
    assert.deepEqual(first.json.outputs, [
      { name: "SUM", datatype: "INT32", shape: [1], parameters: { binary_data_size: 4 } },
    ]);
    assert.equal(sumOf(first.binary), 3);

    client.send(framedInt32([10], "second"));
    const second = await client.nextFramed();
    assert.equal(second.json.parameters, undefined, "only the first answer names the sequence");
    assert.equal(sumOf(second.binary), 13);

    client.send(framedInt32([100], "last", { sequence_end: true }));
    const last = await client.nextFramed();
    assert.equal(sumOf(last.binary), 113);
    assert.deepEqual(await client.closed, { code: 1000, reason: "sequence ended" });

    const requests = model.model.requests.slice(-3);
    assert.deepEqual(
      requests.map((r) => r.sequence),
      [
        { id: undefined, start: true, end: false, timeoutUs: undefined },
        { id: ASSIGNED, start: false, end: false, timeoutUs: undefined },
        { id: ASSIGNED, start: false, end: true, timeoutUs: undefined },
      ],
    );
    assert.deepEqual(model.sums.ends.at(-1), { id: ASSIGNED, reason: "end" });
    assert.equal(model.sums.has(ASSIGNED), false);
  });

  it("runs a text sequence with a string id, ended by the end message", async () => {
    const client = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=session-a");
    client.send({ id: "t1", inputs: [{ name: "INPUT", datatype: "INT32", shape: [3], data: [1, 2, 3] }] });
    const first = await client.nextText();
    assert.deepEqual(first, {
      model_name: "running_sum",
      model_version: "1",
      id: "t1",
      parameters: { sequence_id: "session-a" },
      outputs: [{ name: "SUM", datatype: "INT32", shape: [1], data: [6] }],
    });
    client.send({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1], data: [4] }] });
    const second = await client.nextText();
    assert.deepEqual((second.outputs as { data: number[] }[])[0]?.data, [10]);
    assert.equal(model.sums.has("session-a"), true);

    client.send({ sequence_end: true });
    assert.deepEqual(await client.nextText(), { sequence_end: true, sequence_id: "session-a" });
    assert.equal((await client.closed).code, 1000);
    assert.deepEqual(model.sums.endCalls.at(-1), { id: "session-a", reason: "end" });
    assert.equal(model.sums.has("session-a"), false);
  });

  it("sequence_start=false continues a sequence begun elsewhere; the stream it leaves no longer ends it", async () => {
    const step = (value: number) => ({
      inputs: [{ name: "INPUT", datatype: "INT32", shape: [1], data: [value] }],
    });
    const sumOfText = async (client: StreamClient) =>
      ((await client.nextText()).outputs as { data: number[] }[])[0]?.data[0];
    /** A stream of sequence `id`, continuing it (sequence_start=false) or not. */
    const streamOf = (id: string, continuing = false) =>
      StreamClient.open(
        server,
        `/v2/models/running_sum/stream?sequence_id=${id}${continuing ? "&sequence_start=false" : ""}`,
      );
    const first = await streamOf("cont-a");
    first.send(step(3));
    assert.equal(await sumOfText(first), 3);
    // The client reconnects (its first socket not yet closed, as after a network cut).
    const again = await streamOf("cont-a", true);
    again.send(step(4));
    assert.equal(await sumOfText(again), 7);
    assert.deepEqual(model.model.requests.at(-1)?.sequence, {
      id: "cont-a",
      start: false,
      end: false,
      timeoutUs: undefined,
    });
    const endsBefore = model.sums.endCalls.length;
    await first.close(4000);
    again.send(step(5));
    assert.equal(await sumOfText(again), 12, "the first stream's close did not end the sequence");
    assert.equal(model.sums.endCalls.length, endsBefore);
    again.send({ sequence_end: true });
    assert.deepEqual(await again.nextText(), { sequence_end: true, sequence_id: "cont-a" });
    assert.deepEqual(model.sums.endCalls.at(-1), { id: "cont-a", reason: "end" });

    // The owner's stream cut (the server has not seen it yet), its client continues on a
    // new one: the old stream's close no longer ends the sequence, taken over at once.
    const cut = await streamOf("cont-b");
    cut.send(step(1));
    assert.equal(await sumOfText(cut), 1);
    const resumed = await streamOf("cont-b", true);
    await cut.close(4000);
    resumed.send(step(2));
    assert.equal(await sumOfText(resumed), 3, "the cut stream's close did not end the sequence");
    resumed.send({ sequence_end: true });
    assert.deepEqual(await resumed.nextText(), { sequence_end: true, sequence_id: "cont-b" });
    assert.deepEqual(model.sums.endCalls.at(-1), { id: "cont-b", reason: "end" });

    // Continuing needs the id; the value is a boolean.
    for (const [query, error] of [
      [
        "sequence_start=false",
        "query parameter 'sequence_start=false' continues a sequence: name it with 'sequence_id'",
      ],
      [
        "sequence_id=5&sequence_start=no",
        "Unable to parse 'sequence_start': expected 'true' or 'false', got 'no'",
      ],
    ]) {
      assert.deepEqual(await refusedUpgrade(server, `/v2/models/running_sum/stream?${query}`), {
        status: 400,
        json: { error },
      });
    }
  });

  it("runs a raw sequence with a uint64 id above 2^53, exactly", async () => {
    const id = 18446744073709551615n;
    const client = await StreamClient.open(
      server,
      `/v2/models/running_sum/stream?sequence_id=${id}&format=raw`,
    );
    const seen = model.model.requests.length;
    client.send(Buffer.from(new Int32Array([5, 6]).buffer));
    const first = await client.nextFramed();
    assert.match(first.text, new RegExp(`"parameters":\\{"sequence_id":${id}\\}`));
    assert.equal(sumOf(first.binary), 11);
    client.send(Buffer.from(new Int32Array([-1]).buffer));
    assert.equal(sumOf((await client.nextFramed()).binary), 10);

    client.send(JSON.stringify({ sequence_end: true }));
    const end = await client.next();
    assert.equal(end.data.toString(), `{"sequence_end":true,"sequence_id":${id}}`);
    await client.closed;
    const requests = model.model.requests.slice(seen);
    assert.deepEqual(
      requests.map((r) => [r.sequence?.id, r.sequence?.start, r.inputs.get("INPUT")?.shape]),
      [
        [id, true, [2]],
        [id, false, [1]],
      ],
    );
    assert.deepEqual(model.sums.endCalls.at(-1), { id, reason: "end" });
  });

  it("answers binary messages with JSON outputs when binary_data_output=false", async () => {
    const client = await StreamClient.open(
      server,
      "/v2/models/running_sum/stream?sequence_id=7&binary_data_output=false",
    );
    client.send(framedInt32([2, 2]));
    const first = await client.nextText();
    assert.deepEqual(first.parameters, { sequence_id: 7 });
    assert.deepEqual(first.outputs, [{ name: "SUM", datatype: "INT32", shape: [1], data: [4] }]);
    // A request may still ask for its outputs in binary.
    client.send(framedInt32([1], undefined, { binary_data_output: true }));
    assert.equal(sumOf((await client.nextFramed()).binary), 5);
    await client.close();
  });

  it("holds later messages until the start has answered", async () => {
    const client = await StreamClient.open(server, "/v2/models/running_sum/stream");
    const seen = model.model.requests.length;
    model.gate.hold();
    for (let i = 1; i <= 3; i++) client.send(framedInt32([i], `w${i}`));
    await until(() => model.gate.waiting === 1, "the start in flight");
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
    assert.equal(model.model.requests.length - seen, 1, "nothing but the start has reached the model");
    model.gate.release();
    const answers = [await client.nextFramed(), await client.nextFramed(), await client.nextFramed()];
    assert.deepEqual(
      answers.map((a) => [a.json.id, sumOf(a.binary)]),
      [
        ["w1", 1],
        ["w2", 3],
        ["w3", 6],
      ],
    );
    const id = model.sums.lastAssigned;
    assert.deepEqual(
      model.model.requests.slice(seen).map((r) => [r.sequence?.id, r.sequence?.start]),
      [
        [undefined, true],
        [id, false],
        [id, false],
      ],
    );
    await client.close();
  });

  it("keeps many messages of a sequence in flight and answers them in order", async () => {
    const client = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=pipelined");
    client.send(framedInt32([0], "r0"));
    await client.nextFramed();
    model.gate.hold();
    const count = 20;
    for (let i = 1; i <= count; i++) client.send(framedInt32([i], `r${i}`));
    // Every one of them is inside the model before any is answered.
    await until(() => model.gate.waiting === count, "every message in flight");
    model.gate.release();
    let sum = 0;
    for (let i = 1; i <= count; i++) {
      const answer = await client.nextFramed();
      sum += i;
      assert.equal(answer.json.id, `r${i}`);
      assert.equal(sumOf(answer.binary), sum);
    }
    await client.close();
  });

  it("carries independent requests to a stateless model, answered in arrival order", async () => {
    const client = await StreamClient.open(server, "/v2/models/gated_echo/stream");
    echo.gate.hold();
    for (let i = 0; i < 5; i++) {
      client.send({ id: `e${i}`, inputs: [{ name: "X", datatype: "INT32", shape: [1], data: [i] }] });
    }
    await until(() => echo.gate.waiting === 5, "every message in flight");
    echo.gate.release("reversed");
    for (let i = 0; i < 5; i++) {
      const answer = await client.nextText();
      assert.equal(answer.id, `e${i}`);
      assert.deepEqual((answer.outputs as { data: number[] }[])[0]?.data, [i]);
      assert.equal(answer.parameters, undefined);
    }
    const echoModel = server.fake.registry.model("gated_echo");
    assert.ok(echoModel.requests.every((r) => r.sequence === undefined));
    client.send({ sequence_end: true });
    assert.deepEqual(await client.nextText(), { sequence_end: true });
    assert.equal((await client.closed).code, 1000);
  });

  it("X-Sequence-Id names the stream's sequence when the query does not, must agree when it does, and is ignored by a stateless model", async () => {
    const routed = { "x-sequence-id": "4242" };
    const client = await StreamClient.open(server, "/v2/models/running_sum/stream", routed);
    client.send({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1], data: [7] }] });
    const first = await client.nextText();
    assert.deepEqual(first.parameters, { sequence_id: 4242 });
    assert.equal(model.model.requests.at(-1)?.sequence?.id, 4242n);
    client.send({ sequence_end: true });
    await client.nextText();
    await client.closed;

    const same = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=4243", {
      "x-sequence-id": "4243",
    });
    await same.close();
    const refused = await refusedUpgrade(server, "/v2/models/running_sum/stream?sequence_id=13", {
      "x-sequence-id": "12",
    });
    assert.equal(refused.status, 400);
    assert.match(String(refused.json.error), /names sequence 13, but its X-Sequence-Id header .* names 12/);

    const stateless = await StreamClient.open(server, "/v2/models/gated_echo/stream", routed);
    stateless.send({ id: "s", inputs: [{ name: "X", datatype: "INT32", shape: [1], data: [1] }] });
    assert.equal((await stateless.nextText()).id, "s");
    assert.equal(server.fake.registry.model("gated_echo").requests.at(-1)?.sequence, undefined);
    await stateless.close();
  });

  it("serves a stream of a given model version", async () => {
    const client = await StreamClient.open(server, "/v2/models/versioned/versions/3/stream");
    client.send(
      framed(
        { inputs: [{ name: "B", datatype: "UINT8", shape: [2], parameters: { binary_data_size: 2 } }] },
        [new Uint8Array([7, 9])],
      ),
    );
    const answer = await client.nextFramed();
    assert.equal(answer.json.model_version, "3");
    assert.deepEqual([...answer.binary], [7, 9]);
    await client.close();
  });
});
