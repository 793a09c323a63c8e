import assert from "node:assert/strict";
import { Agent, request as httpRequest } from "node:http";
import { after, before, describe, it } from "node:test";
import { startServer, type TestServer } from "./support/http-server.ts";

describe("concurrency and cancellation", () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(() => server.close());

  it("answers 1000 concurrent requests, each with its own data", async () => {
    const count = 1000;
    const responses = await Promise.all(
      Array.from({ length: count }, async (_, i) => {
        const response = await fetch(`${server.url}/v2/models/echo/infer`, {
          method: "POST",
          body: JSON.stringify({
            id: `r${i}`,
            parameters: { sequence_id: `s${i}` },
            inputs: [{ name: "X", datatype: "INT64", shape: [2], data: [i, -i - 1] }],
          }),
        });
        return { status: response.status, json: (await response.json()) as Record<string, unknown> };
      }),
    );
    responses.forEach(({ status, json }, i) => {
      assert.equal(status, 200);
      assert.equal(json.id, `r${i}`);
      assert.deepEqual(json.parameters, { sequence_id: `s${i}` });
      assert.deepEqual((json.outputs as { data: number[] }[])[0]?.data, [i, -i - 1]);
    });
  });

  it("a client that disconnects aborts its request's signal", { timeout: 10_000 }, async () => {
    const request = httpRequest({
      host: "127.0.0.1",
      port: server.port,
      method: "POST",
      path: "/v2/models/hang/infer",
      agent: false,
    });
    request.on("error", () => {});
    request.end(JSON.stringify({ id: "gone", inputs: [] }));
    await server.fake.hang.started;
    request.destroy();
    const aborted = await server.fake.hang.aborted;
    assert.equal(aborted.id, "gone");
    assert.equal(aborted.signal?.aborted, true);
    // The server goes on answering.
    const next = await fetch(`${server.url}/v2/health/live`);
    assert.equal(next.status, 200);
  });
});

describe("cancellation on a kept-alive connection", () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(() => server.close());

  // Requests on one connection share its signal (connection-signal.ts): the answered ones
  // before must not have aborted it, and its close aborts the one still waiting.
  it("a client that disconnects after earlier answers aborts the request it waits for", {
    timeout: 10_000,
  }, async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const post = (path: string, body: unknown) =>
      new Promise<{ status: number | undefined; socket: unknown; request: ReturnType<typeof httpRequest> }>(
        (resolve, reject) => {
          const request = httpRequest(
            { host: "127.0.0.1", port: server.port, method: "POST", path, agent },
            (response) => {
              response.resume();
              response.on("end", () =>
                resolve({ status: response.statusCode, socket: request.socket, request }),
              );
            },
          );
          request.on("error", reject);
          request.end(JSON.stringify(body));
        },
      );
    const echo = { inputs: [{ name: "X", datatype: "INT64", shape: [1], data: [1] }] };
    const first = await post("/v2/models/echo/infer", echo);
    const second = await post("/v2/models/echo/infer", echo);
    assert.equal(first.status, 200);
    assert.equal(second.status, 200);
    assert.equal(second.socket, first.socket, "the answers came on one connection");
    const waiting = httpRequest({
      host: "127.0.0.1",
      port: server.port,
      method: "POST",
      path: "/v2/models/hang/infer",
      agent,
    });
    waiting.on("error", () => {});
    waiting.end(JSON.stringify({ id: "gone", inputs: [] }));
    await server.fake.hang.started;
    assert.equal(waiting.socket, first.socket, "the waiting request went on the same connection");
    waiting.destroy();
    const aborted = await server.fake.hang.aborted;
    assert.equal(aborted.id, "gone");
    assert.equal(aborted.signal?.aborted, true);
    agent.destroy();
  });
});
