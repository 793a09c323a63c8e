import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { after, before, test } from "node:test";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// A client that sends `Expect: 100-continue` (curl does, for a large body) waits for the
// server's word before sending its body: a body declared past --http-max-body-bytes is
// refused then, before any of it is sent; any other goes on as usual.

const LIMIT = 100_000;
let server: TestServer;
before(async () => {
  server = await startTestServer(
    { floats: { onnx: identityModel("FP32", [-1, 4]) } },
    { httpBodyLimitBytes: LIMIT },
  );
});
after(() => server.stop());

interface Exchange {
  readonly continued: boolean;
  readonly status: number;
  readonly body: string;
}

function post(declared: number, body: string | undefined): Promise<Exchange> {
  const port = Number(new URL(server.url).port);
  return new Promise((resolve, reject) => {
    let continued = false;
    const request = httpRequest({
      host: "127.0.0.1",
      port,
      method: "POST",
      path: "/v2/models/floats/infer",
      headers: { "content-type": "application/json", "content-length": declared, expect: "100-continue" },
    });
    request.on("continue", () => {
      continued = true;
      if (body !== undefined) request.end(body);
    });
    request.on("response", (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => {
        text += chunk;
      });
      response.on("end", () => resolve({ continued, status: response.statusCode ?? 0, body: text }));
    });
    request.on("error", reject);
    request.flushHeaders();
  });
}

test("a body declared past the limit is refused before it is sent", async () => {
  const refused = await post(2_000_000_000_000, undefined);
  assert.deepEqual(refused, {
    continued: false,
    status: 413,
    body: JSON.stringify({ error: `request body is larger than the limit of ${LIMIT} bytes` }),
  });
});

test("a body within the limit is asked for, sent and served", async () => {
  const body = JSON.stringify({
    inputs: [{ name: "INPUT0", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] }],
  });
  const served = await post(Buffer.byteLength(body), body);
  assert.equal(served.continued, true);
  assert.equal(served.status, 200, served.body);
  assert.deepEqual(
    (JSON.parse(served.body) as { outputs: { data: number[] }[] }).outputs[0]!.data,
    [1, 2, 3, 4],
  );
});
