import assert from "node:assert/strict";
import { once } from "node:events";
import { Agent, get as httpGet } from "node:http";
import { connect, type Socket } from "node:net";
import { after, before, test } from "node:test";
import WebSocket from "ws";
import { DEFAULT_LIMITS, securityOptions } from "../../src/config/security-options.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { metricValue } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";

// Connections and time are bounded too: an HTTP body trickled a byte at a time, a TCP
// connection to the gRPC port that never sends the HTTP/2 preface, a WebSocket that says
// nothing, a request head too large, more connections than allowed. Each is refused (or
// closed), counted, and the server serves on.

/** On a server without these limits the waits below would never end: fail instead. */
const WAIT = { timeout: 30_000 };

let server: TestServer;
before(async () => {
  server = await startTestServer(
    { floats: { onnx: identityModel("FP32", [-1, 4]) } },
    {
      security: securityOptions({
        limits: {
          ...DEFAULT_LIMITS,
          httpHeaderTimeoutSecs: 1,
          httpRequestTimeoutSecs: 1,
          httpStreamIdleTimeoutSecs: 1,
          httpMaxHeaderBytes: 4096,
          grpcHandshakeTimeoutSecs: 1,
          httpMaxConnections: 6,
          grpcMaxConnections: 2,
        },
      }),
    },
  );
});
after(() => server.stop());

const refused = (limit: string) => metricValue(server.metricsUrl, "seqserve_limit_refusals_total", { limit });

function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => resolve(socket));
    socket.once("error", reject);
  });
}

/** Everything the server sent until it closed the connection. */
function untilClosed(socket: Socket): Promise<string> {
  let received = "";
  socket.on("data", (chunk) => {
    received += chunk.toString();
  });
  socket.on("error", () => {});
  return new Promise((resolve) => socket.once("close", () => resolve(received)));
}

test(
  "an HTTP body trickled a byte at a time is cut off with 408 once the request time is up",
  WAIT,
  async () => {
    const socket = await open(server.server.httpPort!);
    const answer = untilClosed(socket);
    socket.write(
      "POST /v2/models/floats/infer HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{",
    );
    const trickle = setInterval(() => socket.writable && socket.write(" "), 200);
    try {
      assert.match(await answer, /^HTTP\/1\.1 408/);
    } finally {
      clearInterval(trickle);
    }
    assert.ok(((await refused("http_request_timeout")) ?? 0) >= 1);
  },
);

test("a request head larger than --http-max-header-bytes gets 431", WAIT, async () => {
  const response = await fetch(`${server.url}/v2/health/ready`, {
    headers: { "x-padding": "p".repeat(8192) },
  });
  assert.equal(response.status, 431);
  assert.ok(((await refused("http_header_bytes")) ?? 0) >= 1);
});

test(
  "a head too large behind a request still being answered is refused after that request's answer",
  WAIT,
  async () => {
    // Answers go out in the order of their requests: a 431 written now would be read as the
    // first request's answer. It follows that answer, and the connection closes.
    const socket = await open(server.server.httpPort!);
    const answer = untilClosed(socket);
    const body = JSON.stringify({
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] }],
    });
    socket.write(
      `POST /v2/models/floats/infer HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}` +
        `GET /v2/health/ready HTTP/1.1\r\nhost: x\r\nx-padding: ${"p".repeat(8192)}\r\n\r\n`,
    );
    const received = await answer;
    assert.deepEqual(received.match(/HTTP\/1\.1 \d{3}/g), ["HTTP/1.1 200", "HTTP/1.1 431"], received);
    assert.match(received, /"outputs":[\s\S]*HTTP\/1\.1 431/);
    // Alone on a kept-alive connection whose answers have gone out, the same head gets its 431.
    const kept = await open(server.server.httpPort!);
    let keptText = "";
    kept.on("data", (chunk: Buffer) => {
      keptText += chunk.toString();
    });
    const keptClosed = new Promise((resolve) => kept.once("close", resolve));
    kept.write("GET /v2/health/live HTTP/1.1\r\nhost: x\r\n\r\n");
    while (!keptText.includes("\r\n\r\n")) await once(kept, "data");
    kept.write(`GET /v2/health/ready HTTP/1.1\r\nhost: x\r\nx-padding: ${"p".repeat(8192)}\r\n\r\n`);
    await keptClosed;
    assert.match(keptText, /^HTTP\/1\.1 200[\s\S]*HTTP\/1\.1 431/);
  },
);

test(
  "a gRPC connection that never sends the HTTP/2 preface is closed after the handshake time",
  WAIT,
  async () => {
    const socket = await open(server.grpcPort);
    socket.write("PRI * HTTP");
    await untilClosed(socket);
    assert.ok(((await refused("grpc_handshake_timeout")) ?? 0) >= 1);
    // Real clients are not affected.
    const client = new TestClient(server.grpcPort);
    try {
      assert.deepEqual(await client.unary("ServerLive"), { live: true });
    } finally {
      client.close();
    }
  },
);

test(
  "an HTTP connection that sends nothing is closed after the header time, on every HTTP port; the others are served",
  WAIT,
  async () => {
    const before = (await refused("http_request_timeout")) ?? 0;
    const ports = [server.server.httpPort!, server.server.metricsPort!];
    // Without the bound these stay open for good, each holding a place among --http-max-connections.
    const silent = await Promise.all(ports.map((port) => open(port)));
    assert.deepEqual(await Promise.all(silent.map(untilClosed)), ["", ""]);
    assert.ok(((await refused("http_request_timeout")) ?? 0) >= before + 2);
    // A connection whose requests begin in time is not cut off: it serves one after another.
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      for (let i = 0; i < 2; i++) {
        const answer = await new Promise<number>((resolve, reject) =>
          httpGet(`${server.url}/v2/health/live`, { agent }, (response) => {
            response.resume();
            response.on("end", () => resolve(response.statusCode ?? 0));
          }).on("error", reject),
        );
        assert.equal(answer, 200);
        await new Promise((resolve) => setTimeout(resolve, 700));
      }
    } finally {
      agent.destroy();
    }
  },
);

test("a WebSocket that sends nothing is closed with 1001 after the idle time", WAIT, async () => {
  const socket = new WebSocket(`ws://127.0.0.1:${server.server.httpPort}/v2/models/floats/stream`);
  const closed = new Promise<number>((resolve) => socket.on("close", (code: number) => resolve(code)));
  socket.on("error", () => {});
  assert.equal(await closed, 1001);
  assert.ok(((await refused("http_stream_idle_timeout")) ?? 0) >= 1);
});

test("connections past --grpc-max-connections are closed at once; the others are served", WAIT, async () => {
  const held = [await open(server.grpcPort), await open(server.grpcPort)];
  for (const socket of held) socket.write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
  const extra = await open(server.grpcPort);
  await untilClosed(extra);
  assert.ok(((await refused("grpc_connections")) ?? 0) >= 1);
  for (const socket of held) socket.destroy();
});

test("connections past --http-max-connections are closed at once", WAIT, async () => {
  const held = await Promise.all(Array.from({ length: 6 }, () => open(server.server.httpPort!)));
  const extra = await open(server.server.httpPort!);
  assert.equal(await untilClosed(extra), "");
  assert.ok(((await refused("http_connections")) ?? 0) >= 1);
  for (const socket of held) socket.destroy();
});

test(
  "a head whose first bytes come before the header time and the rest after is still read (Node's header time counts from its first byte)",
  WAIT,
  async () => {
    const slow = await startTestServer(
      { floats: { onnx: identityModel("FP32", [-1, 4]) } },
      { security: securityOptions({ limits: { ...DEFAULT_LIMITS, httpHeaderTimeoutSecs: 3 } }) },
    );
    try {
      const socket = await open(slow.server.httpPort!);
      const answer = untilClosed(socket);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      socket.write("GET /v2/health/live HTTP/1.1\r\nhost: x\r\n");
      // Past the header time from the accept, within it from the head's first byte.
      await new Promise((resolve) => setTimeout(resolve, 2500));
      socket.write("connection: close\r\n\r\n");
      assert.match(await answer, /^HTTP\/1\.1 200/);
    } finally {
      await slow.stop();
    }
  },
);
