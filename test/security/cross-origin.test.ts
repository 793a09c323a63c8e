import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { after, before, describe, test } from "node:test";
import WebSocket from "ws";
import { securityOptions } from "../../src/config/security-options.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// A web page may not drive the server from another origin: browsers send such requests
// (a POST of `text/plain` needs no CORS preflight) with an Origin header, and they are
// refused before they do anything. Unless --cors-allow-origin lists the origin: then the
// server answers preflights and CORS headers for it. Clients that are not browsers send no
// Origin and are not affected.

const EVIL = "http://evil.example";
const APP = "https://app.example";
const body = JSON.stringify({
  inputs: [{ name: "INPUT0", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] }],
});

let server: TestServer;
let open: TestServer;
before(async () => {
  const models = { floats: { onnx: identityModel("FP32", [-1, 4]) } };
  server = await startTestServer(models, { modelControlMode: "explicit", loadModels: ["*"] });
  open = await startTestServer(models, {
    security: securityOptions({ corsAllowOrigins: [APP] }),
    sagemakerPort: 0,
  });
});
after(async () => {
  await server.stop();
  await open.stop();
});

/** The status of a WebSocket upgrade to the floats model's stream: 101 when it opens. */
async function upgradeStatus(port: number, options: WebSocket.ClientOptions): Promise<number> {
  const socket = new WebSocket(`ws://127.0.0.1:${port}/v2/models/floats/stream`, options);
  socket.on("error", () => {});
  const status = await new Promise<number>((resolve) => {
    socket.on("unexpected-response", (_request, response) => resolve(response.statusCode ?? 0));
    socket.on("open", () => resolve(101));
  });
  socket.terminate();
  return status;
}

/** A POST as a page of `host` sends it (its Host and Origin), to the server on `port`: its status. */
function postAs(port: number, host: string, path: string, payload: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      {
        host: "127.0.0.1",
        port,
        method: "POST",
        path,
        headers: { host, origin: `http://${host}`, "content-type": "text/plain" },
      },
      (response) => {
        response.resume();
        resolve(response.statusCode ?? 0);
      },
    );
    request.on("error", reject);
    request.end(payload);
  });
}

const post = (url: string, headers: Record<string, string>, payload = body) =>
  fetch(url, { method: "POST", headers: { "content-type": "text/plain", ...headers }, body: payload });

describe("without --cors-allow-origin", () => {
  test("a cross-site POST (text/plain, no preflight) to unload, load or infer is refused with 403 and does nothing", async () => {
    for (const path of [
      "/v2/repository/models/floats/unload",
      "/v2/repository/models/floats/load",
      "/v2/models/floats/infer",
    ]) {
      const answer = await post(`${server.url}${path}`, { origin: EVIL }, "{}");
      assert.equal(answer.status, 403, path);
      assert.match(
        ((await answer.json()) as { error: string }).error,
        /web origin 'http:\/\/evil\.example' are not allowed/,
      );
    }
    assert.equal((await fetch(`${server.url}/v2/models/floats/ready`)).status, 200);
    assert.equal(
      (await fetch(`${server.url}/v2/models/floats/ready`, { headers: { origin: EVIL } })).status,
      403,
    );
  });

  test("a cross-site WebSocket is refused before the upgrade", async () => {
    const port = Number(new URL(server.url).port);
    assert.equal(await upgradeStatus(port, { origin: EVIL }), 403);
  });

  test("clients without an Origin, and pages of the server's own origin, are served", async () => {
    assert.equal((await post(`${server.url}/v2/models/floats/infer`, {})).status, 200);
    assert.equal((await post(`${server.url}/v2/models/floats/infer`, { origin: server.url })).status, 200);
  });

  // DNS rebinding: a page of the attacker's name, made to resolve to this server, sends
  // an Origin that matches its Host header. Only an IP address, localhost or this
  // machine's name is the server's own without --cors-allow-origin.
  test("a page of a name that resolves here (DNS rebinding) is not the server's own: its POST and WebSocket are refused", async () => {
    const port = Number(new URL(server.url).port);
    const rebound = `rebind.attacker.example:${port}`;
    assert.equal(await postAs(port, rebound, "/v2/repository/models/floats/unload", "{}"), 403);
    assert.equal((await fetch(`${server.url}/v2/models/floats/ready`)).status, 200);
    assert.equal(await upgradeStatus(port, { origin: `http://${rebound}`, headers: { host: rebound } }), 403);
    // localhost is the server's own.
    assert.equal(await postAs(port, `localhost:${port}`, "/v2/models/floats/infer", body), 200);
  });
});

describe("with --cors-allow-origin", () => {
  test("a preflight from the allowed origin is answered; its requests carry the CORS headers", async () => {
    const preflight = await fetch(`${open.url}/v2/models/floats/infer`, {
      method: "OPTIONS",
      headers: {
        origin: APP,
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type,authorization",
      },
    });
    assert.equal(preflight.status, 204);
    assert.equal(preflight.headers.get("access-control-allow-origin"), APP);
    assert.match(preflight.headers.get("access-control-allow-headers") ?? "", /authorization/);
    const call = await fetch(`${open.url}/v2/models/floats/infer`, {
      method: "POST",
      headers: { origin: APP, "content-type": "application/json" },
      body,
    });
    assert.equal(call.status, 200);
    assert.equal(call.headers.get("access-control-allow-origin"), APP);
  });

  test("the event stream of /generate_stream carries the CORS headers too", async () => {
    const call = await fetch(`${open.url}/v2/models/floats/generate_stream`, {
      method: "POST",
      headers: { origin: APP, "content-type": "application/json" },
      body: JSON.stringify({ INPUT0: [1, 2, 3, 4] }),
    });
    assert.equal(call.status, 200);
    assert.match(call.headers.get("content-type") ?? "", /^text\/event-stream/);
    assert.equal(call.headers.get("access-control-allow-origin"), APP);
    assert.match(call.headers.get("access-control-expose-headers") ?? "", /retry-after/);
    assert.match(await call.text(), /^data: \{/);
  });

  test("on the SageMaker port, a page may send the AWS SDK's headers and read SageMaker's", async () => {
    const sagemaker = `http://127.0.0.1:${open.server.sagemakerPort}`;
    const preflight = await fetch(`${sagemaker}/endpoints/any/invocations-response-stream`, {
      method: "OPTIONS",
      headers: {
        origin: APP,
        "access-control-request-method": "POST",
        "access-control-request-headers":
          "content-type,x-amzn-sagemaker-session-id,x-amz-date,amz-sdk-request",
      },
    });
    assert.equal(preflight.status, 204);
    const allowed = preflight.headers.get("access-control-allow-headers") ?? "";
    for (const header of ["x-amzn-sagemaker-session-id", "x-amz-date", "amz-sdk-request"])
      assert.match(allowed, new RegExp(header));
    const call = await fetch(`${sagemaker}/invocations`, {
      method: "POST",
      headers: { origin: APP, "content-type": "application/json" },
      body,
    });
    assert.equal(call.status, 200);
    const exposed = call.headers.get("access-control-expose-headers") ?? "";
    for (const header of [
      "x-amzn-sagemaker-new-session-id",
      "x-amzn-sagemaker-content-type",
      "x-amzn-errortype",
    ])
      assert.match(exposed, new RegExp(header));
  });

  test("other origins are still refused", async () => {
    assert.equal((await post(`${open.url}/v2/models/floats/infer`, { origin: EVIL })).status, 403);
  });
});
