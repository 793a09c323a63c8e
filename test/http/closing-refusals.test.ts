import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { test } from "node:test";
import { pino } from "pino";
import { createErrorHandler, sendError } from "../../src/frontends/common/http/error-reply.ts";
import { createHttpApp } from "../../src/frontends/common/http/http-app.ts";
import { KSERVE_HTTP_STATUS } from "../../src/frontends/common/kserve/error-status.ts";

// A request that arrives on a kept-alive connection while the server closes is refused
// with a 503 in the family's error form, through its error handler (fastify's own answer
// had `{"error": "Service Unavailable", "statusCode": 503}`, and no SageMaker error type).

/** Resolves once a new connection to `port` is refused: the listener has closed. */
async function listenerClosed(port: number): Promise<void> {
  for (;;) {
    const refused = await new Promise<boolean>((resolve) => {
      const probe = connect(port, "127.0.0.1");
      probe.once("connect", () => {
        probe.destroy();
        resolve(false);
      });
      probe.once("error", () => resolve(true));
    });
    if (refused) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test("a request arriving while the server closes gets the family's 503, and the one in flight its answer", {
  timeout: 30_000,
}, async () => {
  const app = createHttpApp({
    logger: pino({ level: "silent" }),
    bodyLimitBytes: 1024,
    compressMinBytes: Number.POSITIVE_INFINITY,
    openapi: { title: "test", version: "1", description: "closing refusals" },
    answerUnrouted: (_request, reply) => sendError(reply, 404, "no such route"),
  });
  app.setErrorHandler(createErrorHandler(KSERVE_HTTP_STATUS, 1024));
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let arrived!: () => void;
  const running = new Promise<void>((resolve) => (arrived = resolve));
  app.get("/hold", async () => {
    arrived();
    await held;
    return "held";
  });
  let arrivedLater!: () => void;
  const later = new Promise<void>((resolve) => (arrivedLater = resolve));
  app.server.on("request", (request: { url?: string }) => {
    if (request.url === "/later") arrivedLater();
  });
  app.get("/later", async () => "served");
  await app.listen({ port: 0, host: "127.0.0.1" });
  const port = (app.server.address() as { port: number }).port;

  const socket: Socket = connect(port, "127.0.0.1");
  let received = "";
  socket.setEncoding("utf8").on("data", (chunk: string) => (received += chunk));
  const ended = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.write("GET /hold HTTP/1.1\r\nHost: test\r\n\r\n");
  await running;
  const closed = app.close();
  await listenerClosed(port);
  socket.write("GET /later HTTP/1.1\r\nHost: test\r\n\r\n");
  await later;
  release();
  await Promise.all([closed, ended]);

  const answers = received.split(/(?=HTTP\/1\.1 )/);
  assert.equal(answers.length, 2, received);
  assert.match(answers[0]!, /^HTTP\/1\.1 200 /);
  assert.ok(answers[0]!.endsWith("\r\n\r\nheld"), answers[0]);
  assert.match(answers[1]!, /^HTTP\/1\.1 503 /);
  assert.match(answers[1]!, /\r\nconnection: close\r\n/i);
  // A client behind a balancer retries it on another replica.
  assert.match(answers[1]!, /\r\nretry-after: 1\r\n/i);
  assert.ok(
    answers[1]!.endsWith('\r\n\r\n{"error":"the server is stopping: it takes no new requests"}'),
    answers[1],
  );
});
