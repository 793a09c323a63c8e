import assert from "node:assert/strict";
import { after, afterEach, before, describe, it } from "node:test";
import type { WebSocket } from "ws";
import { postJson, startServer, type TestServer } from "./support/http-server.ts";
import { type RunningSumModel, runningSumModel } from "./support/running-sum-model.ts";
import { framed, StreamClient, until } from "./support/ws-client.ts";

// The life of a stream's connection: closing ends the sequence with the reason the close
// implies, reading stops while too much is in flight or unsent, and an oversize message
// closes with 1009. None of it touches other streams' sequences.

function message(values: number[], id?: string): Buffer {
  const bytes = new Int32Array(values);
  const inputs = [
    {
      name: "INPUT",
      datatype: "INT32",
      shape: [values.length],
      parameters: { binary_data_size: bytes.byteLength },
    },
  ];
  return framed(id === undefined ? { inputs } : { id, inputs }, [bytes]);
}

async function sum(client: StreamClient): Promise<number> {
  return (await client.nextFramed()).binary.readInt32LE(0);
}

/** The server side of the only open stream. */
function serverSocket(server: TestServer): WebSocket {
  const sockets = [...server.app.websocketServer.clients];
  assert.equal(sockets.length, 1);
  return sockets[0]!;
}

describe("WebSocket streams: closing, back-pressure and limits", { timeout: 30_000 }, () => {
  let server: TestServer;
  let model: RunningSumModel;
  before(async () => {
    server = await startServer({ bodyLimitBytes: 1 << 20 });
    model = runningSumModel();
    server.fake.registry.add(model.model);
  });
  afterEach(() => model.gate.release());
  after(() => server.close());

  it("a normal close ends the sequence with reason end", async () => {
    const client = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=normal");
    client.send(message([1]));
    assert.equal(await sum(client), 1);
    await client.close(1000);
    await until(() => model.sums.endCalls.some((e) => e.id === "normal"), "the sequence to end");
    assert.deepEqual(
      model.sums.endCalls.filter((e) => e.id === "normal"),
      [{ id: "normal", reason: "end" }],
    );
    assert.equal(model.sums.has("normal"), false);
  });

  it("an abrupt close ends the sequence with reason cancelled and aborts what is in flight", async () => {
    const client = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=abrupt");
    client.send(message([1]));
    assert.equal(await sum(client), 1);
    model.gate.hold();
    client.send(message([2]));
    await until(() => model.gate.waiting === 1, "the request in flight");
    const inFlight = model.model.requests.at(-1)!;
    client.socket.terminate(); // destroys the TCP socket: no close frame
    await until(() => model.sums.endCalls.some((e) => e.id === "abrupt"), "the sequence to end");
    assert.deepEqual(
      model.sums.endCalls.filter((e) => e.id === "abrupt"),
      [{ id: "abrupt", reason: "cancelled" }],
    );
    assert.equal(inFlight.signal?.aborted, true);
  });

  it("a client that leaves while its start runs still ends the sequence the start creates", async () => {
    model.gate.hold();
    const client = await StreamClient.open(server, "/v2/models/running_sum/stream");
    client.send(message([1]));
    await until(() => model.gate.waiting === 1, "the start in flight");
    const assigned = model.sums.lastAssigned!;
    assert.equal(model.model.requests.at(-1)?.sequence?.id, undefined);
    client.socket.terminate();
    await until(() => server.app.websocketServer.clients.size === 0, "the server to see the close");
    assert.equal(model.sums.has(assigned), true);
    model.gate.release();
    await until(() => !model.sums.has(assigned), "the assigned sequence to end");
    assert.deepEqual(model.sums.endCalls.at(-1), { id: assigned, reason: "cancelled" });
  });

  it("closing one stream leaves the other sequences alone", async () => {
    const a = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=a");
    const b = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=b");
    a.send(message([1]));
    b.send(message([10]));
    assert.equal(await sum(a), 1);
    assert.equal(await sum(b), 10);
    a.socket.terminate();
    await until(() => !model.sums.has("a"), "sequence a to end");
    b.send(message([5]));
    assert.equal(await sum(b), 15);
    assert.equal(model.sums.has("b"), true);
    assert.equal(
      model.sums.endCalls.some((e) => e.id === "b"),
      false,
    );
    await b.close();
  });

  it("a stream continuing a sequence stepped over HTTP ends it on leaving only once it has driven it", async () => {
    /** A step of sequence `id` over HTTP: its answer's status and running sum. */
    const httpStep = async (id: string, value: number, start = false) => {
      const answer = await postJson(server, "/v2/models/running_sum/infer", {
        parameters: { sequence_id: id, ...(start ? { sequence_start: true } : {}) },
        inputs: [{ name: "INPUT", datatype: "INT32", shape: [1], data: [value] }],
      });
      return [answer.status, (answer.json.outputs as { data: number[] }[] | undefined)?.[0]?.data[0]];
    };
    const continuing = (id: string) =>
      StreamClient.open(server, `/v2/models/running_sum/stream?sequence_id=${id}&sequence_start=false`);
    const endsOf = (id: string) => model.sums.endCalls.filter((e) => e.id === id);
    assert.deepEqual(await httpStep("shared", 1, true), [200, 1]);
    assert.deepEqual(await httpStep("shared", 2), [200, 3]);

    // Opened and dropped, or closed deliberately, having sent nothing: the HTTP client's
    // sequence goes on.
    for (const leave of [
      (c: StreamClient) => c.socket.terminate(),
      (c: StreamClient) => c.socket.close(1000),
    ]) {
      leave(await continuing("shared"));
      await until(() => server.app.websocketServer.clients.size === 0, "the server to see the close");
    }
    assert.deepEqual(endsOf("shared"), []);
    assert.deepEqual(await httpStep("shared", 3), [200, 6]);

    // A stream that has run a step drives the sequence: its leaving ends it.
    const driver = await continuing("shared");
    driver.send(message([4]));
    assert.equal(await sum(driver), 10);
    driver.socket.terminate();
    await until(() => !model.sums.has("shared"), "the sequence to end");
    assert.deepEqual(endsOf("shared"), [{ id: "shared", reason: "cancelled" }]);

    // So does one whose first step is in flight when it leaves.
    assert.deepEqual(await httpStep("midway", 1, true), [200, 1]);
    const midway = await continuing("midway");
    model.gate.hold();
    midway.send(message([2]));
    await until(() => model.gate.waiting === 1, "the step in flight");
    midway.socket.terminate();
    await until(() => !model.sums.has("midway"), "the sequence to end");
    assert.deepEqual(endsOf("midway"), [{ id: "midway", reason: "cancelled" }]);
  });

  it("a stream continuing a sequence that leaves without driving it gives it back to the stream it took it from", async () => {
    const continuing = () =>
      StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=handback&sequence_start=false");
    const streams = (count: number) =>
      until(() => server.app.websocketServer.clients.size === count, `${count} streams open`);
    const owner = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=handback");
    owner.send(message([1]));
    assert.equal(await sum(owner), 1);

    // Opened and dropped having sent nothing: the owner goes on, never told.
    (await continuing()).socket.terminate();
    await streams(1);
    owner.send(message([2]));
    assert.equal(await sum(owner), 3);

    // Open and idle, the owner still steps the sequence; a deliberate close gives it back.
    const idle = await continuing();
    owner.send(message([3]));
    assert.equal(await sum(owner), 6);
    await idle.close(1000);
    await streams(1);
    owner.send(message([4]));
    assert.equal(await sum(owner), 10);

    // Taken from one that took it and left without driving it: back to the one before.
    const first = await continuing();
    const second = await continuing();
    first.socket.terminate();
    await streams(2);
    second.socket.terminate();
    await streams(1);
    owner.send(message([5]));
    assert.equal(await sum(owner), 15);
    assert.deepEqual(
      model.sums.endCalls.filter((e) => e.id === "handback"),
      [],
    );

    // One that runs a step has taken it: the owner is told, and the taker's close ends it.
    const taker = await continuing();
    taker.send(message([6]));
    assert.equal(await sum(taker), 21);
    owner.send(message([7], "late"));
    assert.deepEqual(await owner.nextText(), {
      error: "sequence handback of model 'running_sum' was started again by another stream",
      id: "late",
    });
    assert.equal((await owner.closed).code, 4410);
    assert.deepEqual(
      model.sums.endCalls.filter((e) => e.id === "handback"),
      [],
    );
    await taker.close(1000);
    await until(() => !model.sums.has("handback"), "the sequence to end");
    assert.deepEqual(
      model.sums.endCalls.filter((e) => e.id === "handback"),
      [{ id: "handback", reason: "end" }],
    );

    // The owner's end message ends the sequence a stream took and has not driven.
    const ender = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=handend");
    ender.send(message([1]));
    assert.equal(await sum(ender), 1);
    const bystander = await StreamClient.open(
      server,
      "/v2/models/running_sum/stream?sequence_id=handend&sequence_start=false",
    );
    ender.send({ sequence_end: true });
    assert.deepEqual(await ender.nextText(), { sequence_end: true, sequence_id: "handend" });
    assert.deepEqual(
      model.sums.endCalls.filter((e) => e.id === "handend"),
      [{ id: "handend", reason: "end" }],
    );
    await bystander.close(1000);
  });

  it("a stream that leaves while one continuing its sequence is idle ends it once that one leaves without driving it", async () => {
    const endsOf = (id: string) => model.sums.endCalls.filter((e) => e.id === id);
    const streams = (count: number) =>
      until(() => server.app.websocketServer.clients.size === count, `${count} streams open`);
    /** A stream driving sequence `id` (its sum 3), and an idle one opened to continue it. */
    const drivenAndIdle = async (id: string) => {
      const owner = await StreamClient.open(server, `/v2/models/running_sum/stream?sequence_id=${id}`);
      owner.send(message([1]));
      assert.equal(await sum(owner), 1);
      const idle = await StreamClient.open(
        server,
        `/v2/models/running_sum/stream?sequence_id=${id}&sequence_start=false`,
      );
      owner.send(message([2]));
      assert.equal(await sum(owner), 3);
      return { owner, idle };
    };

    // The driver closes deliberately: the idle stream still holds the sequence, which ends
    // with the driver's reason once that one leaves without having driven it.
    const orphan = await drivenAndIdle("orph");
    await orphan.owner.close(1000);
    await streams(1);
    assert.deepEqual(endsOf("orph"), []);
    assert.equal(model.sums.has("orph"), true);
    await orphan.idle.close(1000);
    await until(() => !model.sums.has("orph"), "the sequence to end");
    assert.deepEqual(endsOf("orph"), [{ id: "orph", reason: "end" }]);

    // The driver dropped: its reason, not the idle stream's deliberate close, ends it.
    const dropped = await drivenAndIdle("orph-cut");
    dropped.owner.socket.terminate();
    await streams(1);
    await dropped.idle.close(1000);
    await until(() => !model.sums.has("orph-cut"), "the sequence to end");
    assert.deepEqual(endsOf("orph-cut"), [{ id: "orph-cut", reason: "cancelled" }]);

    // The idle stream drives it after the driver left: it owns it, and its own close decides.
    const resumed = await drivenAndIdle("orph-taken");
    resumed.owner.socket.terminate();
    await streams(1);
    resumed.idle.send(message([3]));
    assert.equal(await sum(resumed.idle), 6);
    assert.deepEqual(endsOf("orph-taken"), []);
    await resumed.idle.close(1000);
    await until(() => !model.sums.has("orph-taken"), "the sequence to end");
    assert.deepEqual(endsOf("orph-taken"), [{ id: "orph-taken", reason: "end" }]);
  });

  it("a stream that starts the same id again takes the sequence over from the old stream", async () => {
    const old = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=roam");
    const stale = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=roam");
    old.send(message([1]));
    assert.equal(await sum(old), 1);
    stale.send(message([7]));
    assert.equal(await sum(stale), 7);
    // A client reconnecting before its old connection was seen to drop.
    const fresh = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=roam");
    fresh.send(message([100]));
    assert.equal(await sum(fresh), 100);
    // The old streams neither continue the new sequence nor end it when they go.
    old.send(message([2], "late"));
    const error = await old.nextText();
    assert.deepEqual(error, {
      error: "sequence roam of model 'running_sum' was started again by another stream",
      id: "late",
    });
    assert.equal((await old.closed).code, 4410);
    stale.socket.terminate();
    await until(() => server.app.websocketServer.clients.size === 1, "the old streams to close");
    fresh.send(message([5]));
    assert.equal(await sum(fresh), 105);
    assert.deepEqual(
      model.sums.endCalls.filter((e) => e.id === "roam"),
      [],
    );
    await fresh.close();
    await until(() => !model.sums.has("roam"), "the sequence to end");
    assert.deepEqual(
      model.sums.endCalls.filter((e) => e.id === "roam"),
      [{ id: "roam", reason: "end" }],
    );
  });

  it("a start that fails in the model still takes the id over, and its sequence ends with it", async () => {
    const old = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=relay");
    old.send(message([1]));
    assert.equal(await sum(old), 1);
    const fresh = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=relay");
    fresh.send({
      id: "broken",
      parameters: { step_fails: true },
      inputs: [{ name: "INPUT", datatype: "INT32", shape: [1], data: [100] }],
    });
    assert.deepEqual(await fresh.nextText(), { error: "the step failed on purpose", id: "broken" });
    // The start reached the model: the old stream's sequence was restarted, and the
    // failed start's sequence is gone too.
    assert.deepEqual(
      model.sums.ends.filter((e) => e.id === "relay"),
      [
        { id: "relay", reason: "restart" },
        { id: "relay", reason: "forced" },
      ],
    );
    old.send(message([2], "late"));
    assert.deepEqual(await old.nextText(), {
      error: "sequence relay of model 'running_sum' was started again by another stream",
      id: "late",
    });
    assert.equal((await old.closed).code, 4410);
    fresh.send(message([5]));
    assert.equal(await sum(fresh), 5, "the next message starts the sequence again");
    await fresh.close();
    await until(() => !model.sums.has("relay"), "the sequence to end");
    assert.deepEqual(model.sums.ends.filter((e) => e.id === "relay").at(-1), { id: "relay", reason: "end" });
  });

  it("stops reading while 64 messages are in flight, and answers them all in order", async () => {
    const client = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=flood");
    client.send(message([0]));
    await sum(client);
    model.gate.hold();
    const total = 200;
    for (let i = 1; i <= total; i++) client.send(message([i], `f${i}`));
    await until(() => model.gate.waiting === 64, "64 requests in flight");
    assert.equal(serverSocket(server).isPaused, true, "the server stops reading the socket");
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
    assert.equal(model.gate.waiting, 64, "no request beyond the bound starts");
    model.gate.release();
    let expected = 0;
    for (let i = 1; i <= total; i++) {
      const answer = await client.nextFramed();
      expected += i;
      assert.equal(answer.json.id, `f${i}`);
      assert.equal(answer.binary.readInt32LE(0), expected);
    }
    assert.ok(model.maxActive() <= 64, `at most 64 requests in the model at once, saw ${model.maxActive()}`);
    await client.close();
  });

  it("stops reading while the messages it holds unanswered pass --max-held-request-bytes", async () => {
    const held = await startServer({ bodyLimitBytes: 1 << 20, streamMaxHeldRequestBytes: 256 * 1024 });
    const sums = runningSumModel();
    held.fake.registry.add(sums.model);
    try {
      const client = await StreamClient.open(held, "/v2/models/running_sum/stream?sequence_id=big");
      sums.gate.hold();
      // Twenty messages of 64 KiB: 256 KiB is four of them.
      const values = (i: number) => new Array<number>(16 * 1024).fill(i);
      const total = 20;
      for (let i = 1; i <= total; i++) client.send(message(values(i), `b${i}`));
      await until(() => serverSocket(held).isPaused, "the server to stop reading");
      for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
      assert.ok(sums.gate.waiting <= 5, `${sums.gate.waiting} requests read, 4 of 64 KiB fill 256 KiB`);
      sums.gate.release();
      let expected = 0;
      for (let i = 1; i <= total; i++) {
        const answer = await client.nextFramed();
        expected += i * 16 * 1024;
        assert.equal(answer.json.id, `b${i}`);
        assert.equal(answer.binary.readInt32LE(0), expected);
      }
      await client.close();
    } finally {
      sums.gate.release();
      await held.close();
    }
  });

  it("stops reading while the client does not read its answers", async () => {
    const client = await StreamClient.open(server, "/v2/models/echo/stream");
    client.socket.pause();
    const size = 512 * 1024;
    const total = 48;
    for (let i = 0; i < total; i++) {
      const header = {
        id: `m${i}`,
        inputs: [{ name: "B", datatype: "UINT8", shape: [size], parameters: { binary_data_size: size } }],
      };
      client.send(framed(header, [new Uint8Array(size).fill(i)]));
    }
    const echo = server.fake.registry.model("echo");
    const before = echo.requests.length;
    await until(() => serverSocket(server).isPaused, "the server to stop reading");
    assert.ok(echo.requests.length - before < total, "unsent answers held back the requests");
    client.socket.resume();
    for (let i = 0; i < total; i++) {
      const answer = await client.nextFramed();
      assert.equal(answer.json.id, `m${i}`);
      assert.equal(answer.binary.byteLength, size);
      assert.equal(answer.binary[0], i);
      assert.equal(answer.binary[size - 1], i);
    }
    assert.equal(echo.requests.length - before, total);
    await client.close();
  });

  it("closes with 1009 on a message over the body limit, and ends the sequence", async () => {
    const client = await StreamClient.open(server, "/v2/models/running_sum/stream?sequence_id=big");
    client.send(message([1]));
    assert.equal(await sum(client), 1);
    client.send(message(new Array((1 << 18) + 1).fill(0)));
    assert.equal((await client.closed).code, 1009);
    await until(() => !model.sums.has("big"), "the sequence to end");
    assert.deepEqual(
      model.sums.endCalls.filter((e) => e.id === "big"),
      [{ id: "big", reason: "cancelled" }],
    );
  });
});
