import assert from "node:assert/strict";
import { connect } from "node:net";
import { after, before, describe, it } from "node:test";
import { securityOptions } from "../../src/config/security-options.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { type OvmsServer, startOvmsServer } from "../tfs/support/ovms-server.ts";

// Requests no route serves, as each family answers them: Triton's paths under another
// method 405 with the methods they serve, unknown paths 404, whatever the CORS settings
// (CORS preflights answer every path and say nothing of what it serves); OVMS's /v1
// paths under a method OVMS does not take, 406 "Unsupported method", as OVMS decides it
// before looking at the path.

describe("unrouted requests on a server with --cors-allow-origin", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer(
      { floats: { onnx: identityModel("FP32", [-1, 4]) } },
      { security: securityOptions({ corsAllowOrigins: ["https://app.example"] }) },
    );
  });
  after(() => server.stop());

  it("an unknown path is still a 404", async () => {
    const answer = await fetch(`${server.url}/v2/nothing/here`);
    assert.equal(answer.status, 404, `allow=${answer.headers.get("allow")} ${await answer.text()}`);
  });

  it("a path the router cannot read is refused in the family's form, without echoing it", async () => {
    const bad = await fetch(`${server.url}/v2/models/%ZZ/infer`, { method: "POST", body: "{}" });
    assert.deepEqual(
      [bad.status, await bad.json()],
      [400, { error: "the request's path is not valid: a percent-encoding in it does not decode" }],
    );
    const long = await fetch(`${server.url}/v2/models/${"m".repeat(3000)}/infer`, {
      method: "POST",
      body: "{}",
    });
    assert.deepEqual(
      [long.status, await long.json()],
      [414, { error: "a segment of the request's path is longer than the 2048 characters allowed" }],
    );
  });

  it("a WebSocket upgrade on such a path is refused and its connection closed", {
    timeout: 20_000,
  }, async () => {
    const socket = connect(Number(new URL(server.url).port), "127.0.0.1");
    let answer = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      answer += chunk;
    });
    socket.write(
      "GET /v2/models/%zz/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    );
    // The server closes it: a socket handed over for an upgrade has no timeout of node's.
    await new Promise((resolve) => socket.once("close", resolve));
    assert.match(answer, /^HTTP\/1\.1 400 /);
    assert.match(
      answer,
      /"error":"the request's path is not valid: a percent-encoding in it does not decode"/,
    );
  });

  it("a known path under another method lists only its own methods", async () => {
    const answer = await fetch(`${server.url}/v2/models/floats/infer`);
    assert.equal(answer.status, 405);
    assert.equal(answer.headers.get("allow"), "POST");
    await answer.body?.cancel();
  });
});

describe("OVMS's /v1 paths under a method OVMS does not take", () => {
  let ovms: OvmsServer;
  before(async () => {
    ovms = await startOvmsServer({ ident: { onnx: identityModel("FP32", [-1, 4]) } });
  });
  after(() => ovms.stop());

  it("answer 406 Unsupported method, known path or not", async () => {
    for (const path of ["/v1/models/ident", "/v1/models/ident:predict", "/v1/nothing"]) {
      const answer = await fetch(`${ovms.url}${path}`, { method: "DELETE" });
      assert.equal(answer.status, 406, path);
      assert.deepEqual(await answer.json(), { error: "Unsupported method" });
    }
    // Methods OVMS takes still reach its routes.
    assert.equal((await fetch(`${ovms.url}/v1/models/ident`)).status, 200);
  });
});
