import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
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
