import assert from "node:assert/strict";
import { once } from "node:events";
import { type ClientHttp2Session, type ClientHttp2Stream, connect, constants } from "node:http2";
import { after, before, test } from "node:test";
import { securityOptions } from "../../src/config/security-options.ts";
import type { ModelInferResponseMessage } from "../../src/frontends/grpc/messages.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { metricValue } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { identityConfig } from "./support/identity-config.ts";

// A gRPC message sent more slowly than it is read, or never finished, is held as it comes:
// grpc-js reads each DATA frame at once (opening the HTTP/2 window again) and keeps the
// message's bytes until it is whole. A client declaring 2 GiB messages on many streams
// could make the server hold gigabytes. What messages received in part hold is bounded
// server-wide by --grpc-max-partial-message-bytes-total: the connection holding the most
// gives way (RESOURCE_EXHAUSTED naming the flag, or RST_STREAM ENHANCE_YOUR_CALM once its
// answers have begun), and other clients are served.

const MiB = 1024 * 1024;
const BOUND = 8 * MiB;
/** On a server without this limit the waits below would never end: fail instead. */
const WAIT = { timeout: 60_000 };

let server: TestServer;
let client: TestClient;
before(async () => {
  server = await startTestServer(
    { bytes: { config: identityConfig("bytes", "TYPE_UINT8"), onnx: identityModel("UINT8", [-1]) } },
    {
      security: securityOptions({
        limits: { ...securityOptions().limits, grpcMaxPartialMessageBytesTotal: BOUND },
      }),
    },
  );
  client = new TestClient(server.grpcPort);
});
after(async () => {
  client.close();
  await server.stop();
});

const refusals = async () =>
  (await metricValue(server.metricsUrl, "seqserve_limit_refusals_total", {
    limit: "grpc_partial_message_bytes",
  })) ?? 0;
const held = async () =>
  (await metricValue(server.metricsUrl, "seqserve_grpc_partial_message_bytes", {})) ?? -1;

async function until(condition: () => Promise<boolean>): Promise<void> {
  while (!(await condition())) await new Promise((resolve) => setTimeout(resolve, 20));
}

const request = (bytes: number) => ({
  model_name: "bytes",
  inputs: [{ name: "INPUT0", datatype: "UINT8", shape: [bytes] }],
  raw_input_contents: [Buffer.alloc(bytes, 7)],
});

async function served(bytes: number, on = client): Promise<void> {
  const answer = await on.unary<ModelInferResponseMessage>("ModelInfer", request(bytes));
  assert.deepEqual(answer.raw_output_contents?.[0], Buffer.alloc(bytes, 7));
}

/** How a raw call ended: its grpc-status and grpc-message, or the code of its reset. */
interface Ending {
  readonly status?: string;
  readonly message?: string;
  readonly rstCode?: number;
}

/**
 * A call on `session` whose message declares 0x7fffffff bytes, of which `mebibytes` MiB
 * are sent (1 MiB at a time, as the window lets them) and the rest never.
 */
function partialCall(session: ClientHttp2Session, path: string, mebibytes: number): Promise<Ending> {
  const stream: ClientHttp2Stream = session.request({
    ":method": "POST",
    ":path": path,
    "content-type": "application/grpc",
    te: "trailers",
  });
  let status: string | undefined;
  let message: string | undefined;
  const take = (headers: Record<string, unknown>) => {
    if (headers["grpc-status"] !== undefined) {
      status = String(headers["grpc-status"]);
      message = decodeURIComponent(String(headers["grpc-message"] ?? ""));
    }
  };
  stream.on("response", take);
  stream.on("trailers", take);
  stream.on("data", () => {});
  stream.on("error", () => {});
  const ended = once(stream, "close").then(() =>
    status === undefined ? { rstCode: stream.rstCode } : { status, message },
  );
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(0x7fffffff, 1);
  stream.write(prefix);
  void (async () => {
    for (let sent = 0; sent < mebibytes && !stream.closed; sent++) {
      if (!stream.write(Buffer.alloc(MiB, 65))) await Promise.race([once(stream, "drain"), ended]);
    }
  })();
  return ended;
}

const exhausted = (ending: Ending) => {
  if (ending.status !== undefined) {
    assert.equal(ending.status, "8", ending.message);
    assert.match(ending.message ?? "", /more than 8388608 bytes.*--grpc-max-partial-message-bytes-total/);
  } else {
    assert.equal(ending.rstCode, constants.NGHTTP2_ENHANCE_YOUR_CALM);
  }
};

test(
  "streams sending messages they never finish are ended, RESOURCE_EXHAUSTED, while another client is served; nothing stays held",
  WAIT,
  async () => {
    const before = await refusals();
    const attacker = connect(`http://127.0.0.1:${server.grpcPort}`);
    attacker.on("error", () => {});
    // The reviewer's repro: 10 streams declaring 2 GiB each, 50 MiB sent on each.
    const endings = Array.from({ length: 10 }, (_, i) =>
      partialCall(
        attacker,
        i % 2 === 0
          ? "/inference.GRPCInferenceService/ModelStreamInfer"
          : "/inference.GRPCInferenceService/ModelInfer",
        50,
      ),
    );
    await until(async () => (await refusals()) > before);
    await served(2 * MiB);
    for (const ending of await Promise.all(endings)) exhausted(ending);
    assert.equal(await refusals(), before + 10);
    attacker.close();
    await until(async () => (await held()) === 0);
  },
);

test(
  "the connection holding the most gives way: a message it would leave no room for is served",
  WAIT,
  async () => {
    const attacker = connect(`http://127.0.0.1:${server.grpcPort}`);
    attacker.on("error", () => {});
    // 6 calls holding 1 MiB each, unfinished: 6 of the 8 MiB.
    const endings = Array.from({ length: 6 }, () =>
      partialCall(attacker, "/inference.GRPCInferenceService/ModelInfer", 1),
    );
    await until(async () => (await held()) >= 6 * MiB);
    const before = await refusals();
    // 4 MiB more would pass the bound: calls of the connection holding 6 MiB end instead.
    await served(4 * MiB);
    assert.ok((await refusals()) > before);
    attacker.destroy();
    const ended = await Promise.all(endings);
    assert.ok(ended.some((ending) => ending.status === "8"));
    await until(async () => (await held()) === 0);
  },
);

test(
  "a message up to the bound is served on an idle server; one past it is refused, naming the flag",
  WAIT,
  async () => {
    await served(BOUND - 1024);
    await assert.rejects(served(BOUND + MiB), (error: Error & { code: number }) => {
      assert.equal(error.code, 8, error.message);
      assert.match(error.message, /more than 8388608 bytes.*--grpc-max-partial-message-bytes-total/);
      return true;
    });
    await until(async () => (await held()) === 0);
  },
);

test(
  "a ModelStreamInfer stream whose answers have begun is reset (ENHANCE_YOUR_CALM: RESOURCE_EXHAUSTED)",
  WAIT,
  async () => {
    const stream = client.stream();
    const answers: unknown[] = [];
    const ended = new Promise<Error & { code: number }>((resolve) => {
      stream.on("data", (answer) => answers.push(answer));
      stream.on("error", resolve);
    });
    stream.write(request(16) as never);
    await until(async () => answers.length === 1);
    stream.write(request(BOUND + MiB) as never);
    const error = await ended;
    assert.equal(error.code, 8, error.message);
    // grpc-js's words for RST_STREAM ENHANCE_YOUR_CALM: a status would wait behind the answers.
    assert.match(error.message, /Bandwidth exhausted or memory limit exceeded/);
    await until(async () => (await held()) === 0);
  },
);

test(
  "a new call of the connection holding the most is the one refused, not another connection's message",
  WAIT,
  async () => {
    const smaller = connect(`http://127.0.0.1:${server.grpcPort}`);
    const larger = connect(`http://127.0.0.1:${server.grpcPort}`);
    for (const session of [smaller, larger]) session.on("error", () => {});
    const path = "/inference.GRPCInferenceService/ModelInfer";
    // 3 MiB on one connection, 5 MiB on the other: the whole bound, held.
    const kept = Array.from({ length: 3 }, () => partialCall(smaller, path, 1));
    const held5 = Array.from({ length: 5 }, () => partialCall(larger, path, 1));
    await until(async () => (await held()) === BOUND);
    const before = await refusals();
    // Its first chunk passes the bound: its own connection holds the most.
    exhausted(await partialCall(larger, path, 1));
    assert.equal(await refusals(), before + 1);
    assert.equal(await held(), BOUND, "the other connection's messages are held still");
    smaller.destroy();
    larger.destroy();
    for (const ending of await Promise.all([...kept, ...held5])) assert.equal(ending.status, undefined);
    await until(async () => (await held()) === 0);
  },
);
