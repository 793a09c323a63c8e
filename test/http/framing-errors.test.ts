import assert from "node:assert/strict";
import { connect } from "node:net";
import { after, before, describe, it } from "node:test";
import {
  createSageMakerFrontend,
  type SageMakerFrontend,
} from "../../src/frontends/sagemaker/sagemaker-frontend.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { type HandlerRepository, handlerRepository, SLEEPER } from "../handlers/support/handler-kit.ts";
import { startTestServer } from "../support/test-server.ts";
import { fakeServer } from "./support/fake-context.ts";
import { startServer, type TestServer } from "./support/http-server.ts";

// Bytes that break HTTP's framing after a request's head (a chunk size that is not hex, a
// body longer than its Content-Length, whose rest is read as the next request) are
// answered with 400 in the family's error form, as a head that cannot be parsed is; an
// answer to an earlier request on the connection still goes out first. The connection
// closes after the 400: nothing after the bad bytes can be read. Both HTTP families serve
// on the same base (http-app.ts), each with its own error form.

/** Writes `bytes` on a new connection and returns everything the server sent until it closed it. */
function exchange(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => socket.write(bytes));
    let received = "";
    socket.setEncoding("utf8").on("data", (chunk: string) => {
      received += chunk;
    });
    socket.once("error", reject);
    socket.once("close", () => resolve(received));
  });
}

/** Each answer's status line and body, in order. */
function answers(received: string): { status: string; body: string }[] {
  return received
    .split(/(?=HTTP\/1\.1 \d{3} )/)
    .filter((answer) => answer !== "")
    .map((answer) => ({
      status: answer.slice(0, answer.indexOf("\r\n")),
      body: answer.slice(answer.indexOf("\r\n\r\n") + 4),
    }));
}

const families: {
  name: string;
  path: string;
  refusal: string;
  start: () => Promise<{ port: number; close: () => Promise<void> }>;
}[] = [
  {
    name: "KServe",
    path: "/v2/models/echo/infer",
    refusal: '{"error":"the request is not valid HTTP"}',
    start: async () => {
      const server: TestServer = await startServer();
      return { port: server.port, close: () => server.close() };
    },
  },
  {
    name: "SageMaker",
    path: "/invocations",
    refusal: '{"error":"the request is not valid HTTP","message":"the request is not valid HTTP"}',
    start: async () => {
      const app: SageMakerFrontend = createSageMakerFrontend({
        context: fakeServer().context,
        logger: silentLogger(),
        sessionTtlSecs: 60,
      });
      await app.listen({ port: 0, host: "127.0.0.1" });
      return { port: (app.server.address() as { port: number }).port, close: () => app.close() };
    },
  },
];

for (const family of families) {
  describe(`HTTP framing errors on the ${family.name} port`, { timeout: 30_000 }, () => {
    let server: { port: number; close: () => Promise<void> };
    before(async () => {
      server = await family.start();
    });
    after(() => server.close());
    const head = (headers: string) =>
      `POST ${family.path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n${headers}\r\n`;

    it("a chunked body whose chunk size is not hex is answered 400", async () => {
      const received = await exchange(
        server.port,
        `${head("transfer-encoding: chunked\r\n")}zz\r\nhello\r\n0\r\n\r\n`,
      );
      assert.deepEqual(answers(received), [{ status: "HTTP/1.1 400 Bad Request", body: family.refusal }]);
      assert.match(received, /\r\nconnection: close\r\n/i);
    });

    it("a body longer than its Content-Length: the request's answer, then 400 for the bytes after it", async () => {
      const body = '{"id":"x"}';
      const alone = answers(
        await exchange(
          server.port,
          `${head(`content-length: ${body.length}\r\nconnection: close\r\n`)}${body}`,
        ),
      );
      assert.equal(alone.length, 1);
      const received = await exchange(
        server.port,
        `${head(`content-length: ${body.length}\r\n`)}${body} and more than it said\r\n\r\n`,
      );
      assert.deepEqual(answers(received), [
        alone[0],
        { status: "HTTP/1.1 400 Bad Request", body: family.refusal },
      ]);
    });
  });
}

// Pipelined requests answered out of the order they run in: the later ones finish in the
// model first and wait, answered, behind the first. Every answer goes out in its
// request's order, and the 400 for the bytes after them last.
describe("HTTP framing errors behind pipelined requests", { timeout: 60_000 }, () => {
  let repository: HandlerRepository;
  let server: Awaited<ReturnType<typeof startTestServer>>;
  before(async () => {
    repository = handlerRepository({
      sleeper: {
        config: `
backend: "typescript"
max_batch_size: 0
input [ { name: "MS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "MS" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 3 kind: KIND_CPU } ]
`,
        files: { "1/model.ts": SLEEPER },
      },
    });
    server = await startTestServer(repository.path);
  });
  after(async () => {
    await server.stop();
    repository.remove();
  });
  const sleep = (ms: number) => {
    const body = JSON.stringify({ inputs: [{ name: "MS", datatype: "INT32", shape: [1], data: [ms] }] });
    return `POST /v2/models/sleeper/infer HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
  };
  const port = () => Number(new URL(server.url).port);
  /** The MS each answer gives back, or its status line when it is not a 200. */
  const slept = (received: string) =>
    answers(received).map((answer) =>
      answer.status === "HTTP/1.1 200 OK"
        ? (JSON.parse(answer.body) as { outputs: { data: number[] }[] }).outputs[0]?.data[0]
        : answer.status,
    );
  const refusal = "HTTP/1.1 400 Bad Request";

  it("two answers, then the 400 for a head that cannot be parsed", async () => {
    const received = await exchange(port(), `${sleep(500)}${sleep(10)}GARBAGE\r\n\r\n`);
    assert.deepEqual(slept(received), [500, 10, refusal]);
  });

  it("two answers, then the 400 for a chunk size that is not hex", async () => {
    const chunked =
      "POST /v2/models/sleeper/infer HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n";
    const received = await exchange(port(), `${sleep(500)}${sleep(10)}${chunked}`);
    assert.deepEqual(slept(received), [500, 10, refusal]);
  });

  it("three answers, then the 400", async () => {
    const received = await exchange(port(), `${sleep(300)}${sleep(10)}${sleep(10)}GARBAGE\r\n\r\n`);
    assert.deepEqual(slept(received), [300, 10, 10, refusal]);
  });
});
