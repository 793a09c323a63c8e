import assert from "node:assert/strict";
import { createHook } from "node:async_hooks";
import { type AddressInfo, connect, createServer, type Socket } from "node:net";
import { test } from "node:test";
import { Metadata, type StatusObject } from "@grpc/grpc-js";
import WebSocket from "ws";
import { type LimitOptions, securityOptions } from "../../src/config/security-options.ts";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { metricValue, sleep, waitFor } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { identityConfig } from "./support/identity-config.ts";

// What a client that stops reading can make the server hold is bounded in bytes, per
// connection, whatever the size of its answers: a ModelStreamInfer client used to make the
// server keep up to 1024 answers per stream (4 GB with 4 MB outputs), a WebSocket 64.
// Here answers are 256 KiB and the budget 1 MiB: the server holds at most the budget and
// one answer, then ends the stream, and counts it. It is bounded in time as well: a
// ModelStreamInfer client that reads nothing has its stream reset, which frees what it
// held even though the client never reads again (a status would wait behind its answers).
// Connections together are bounded too, by the server-wide budget.

const KiB = 1024;
const ANSWER = 256 * KiB;
const BUDGET = 1024 * KiB;
const CONFIG = identityConfig("bytes", "TYPE_UINT8");

// One byte in, ANSWER bytes out: a stream's requests are small enough to be read before
// the first answer is ready, so the answers of the requests already taken (not the reading
// pause at half the budget) are what overflow it, whatever the timing.
const EXPAND_CONFIG = `
name: "expand"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_UINT8 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_UINT8 dims: [ ${ANSWER} ] } ]
`;
const expandModel = (): Uint8Array =>
  new OnnxModelBuilder({ opset: 17 })
    .input("INPUT0", "UINT8", [1])
    .output("OUTPUT0", "UINT8", [ANSWER])
    .initializer("shape", "INT64", [1], [ANSWER])
    .node("Expand", ["INPUT0", "shape"], ["OUTPUT0"])
    .toBytes();

async function start(limits: Partial<LimitOptions> = {}): Promise<TestServer> {
  return startTestServer(
    {
      bytes: { config: CONFIG, onnx: identityModel("UINT8", [-1]) },
      expand: { config: EXPAND_CONFIG, onnx: expandModel() },
    },
    {
      security: securityOptions({
        limits: { ...securityOptions().limits, maxBufferedResponseBytes: BUDGET, ...limits },
      }),
    },
  );
}

const refusals = (server: TestServer) =>
  metricValue(server.metricsUrl, "seqserve_limit_refusals_total", { limit: "buffered_response_bytes" });
const peak = (server: TestServer) =>
  metricValue(server.metricsUrl, "seqserve_buffered_response_peak_bytes", {});
/** What the server holds now for clients that are not reading. */
const heldNow = (server: TestServer) =>
  metricValue(server.metricsUrl, "seqserve_buffered_response_bytes", {});

/** One byte in, ANSWER bytes out. */
const expandRequest = (i: number) => ({
  model_name: "expand",
  id: `r${i}`,
  inputs: [{ name: "INPUT0", datatype: "UINT8", shape: [1] }],
  raw_input_contents: [Buffer.of(i)],
});

const bytesRequest = (id: string) => ({
  model_name: "bytes",
  id,
  inputs: [{ name: "INPUT0", datatype: "UINT8", shape: [4] }],
  raw_input_contents: [Buffer.from([1, 2, 3, 4])],
});

/** A ModelStreamInfer stream that reads nothing, sent 40 requests of ANSWER-byte answers; its status when it ends. */
function pausedExpandStream(client: TestClient) {
  const stream = client.stream();
  stream.on("error", () => {});
  const status = new Promise<StatusObject>((resolve) => stream.on("status", resolve));
  stream.pause();
  for (let i = 0; i < 40; i++) stream.write(expandRequest(i));
  return { stream, status };
}

/** Waits (bounded) until the server has refused the stream. */
async function untilRefused(server: TestServer): Promise<void> {
  for (let i = 0; i < 500 && ((await refusals(server)) ?? 0) === 0; i++) await sleep(20);
}

test("a ModelStreamInfer client that stops reading: the server holds at most its budget, then ends the stream", async () => {
  const server = await start();
  const client = new TestClient(server.grpcPort);
  try {
    const { stream, status } = pausedExpandStream(client);
    await untilRefused(server);
    assert.equal(await refusals(server), 1);
    const held = (await peak(server)) ?? 0;
    // Up to its budget (the refusal came when one more answer would not fit), never past it.
    assert.ok(held > BUDGET - ANSWER - KiB, `the server counted only ${held} bytes for the stream`);
    assert.ok(held <= BUDGET + ANSWER + KiB, `the server held ${held} bytes for the stream`);
    stream.resume();
    const ended = await status;
    assert.equal(ended.code, 8, ended.details);
    assert.match(
      ended.details,
      /not reading its responses: more than 1048576 bytes.*--max-buffered-response-bytes/,
    );
    assert.equal(await heldNow(server), 0);
  } finally {
    client.close();
    await server.stop();
  }
});

test("clients that stop reading hold at most the server-wide budget together, whatever each connection's", async () => {
  // Each connection may hold 4 MiB, all together 1 MiB: the total is what refuses.
  const server = await start({ maxBufferedResponseBytes: 4 * BUDGET, maxBufferedResponseBytesTotal: BUDGET });
  const client = new TestClient(server.grpcPort);
  try {
    const { stream, status } = pausedExpandStream(client);
    const totalRefusals = () =>
      metricValue(server.metricsUrl, "seqserve_limit_refusals_total", {
        limit: "buffered_response_bytes_total",
      });
    for (let i = 0; i < 500 && ((await totalRefusals()) ?? 0) === 0; i++) await sleep(20);
    assert.equal(await totalRefusals(), 1);
    const held = (await peak(server)) ?? 0;
    assert.ok(held <= BUDGET + ANSWER + KiB, `the server held ${held} bytes`);
    stream.resume();
    const ended = await status;
    assert.equal(ended.code, 8, ended.details);
    assert.match(
      ended.details,
      /more than 1048576 bytes of answers .*over all connections.*--max-buffered-response-bytes-total/,
    );
    assert.equal(await heldNow(server), 0);
    // A client that reads is served.
    const other = new TestClient(server.grpcPort);
    try {
      const answer = await other.unary<{ raw_output_contents: Uint8Array[] }>(
        "ModelInfer",
        bytesRequest("after"),
      );
      assert.deepEqual([...answer.raw_output_contents[0]!], [1, 2, 3, 4]);
    } finally {
      other.close();
    }
  } finally {
    client.close();
    await server.stop();
  }
});

test("a WebSocket client that stops reading: the server holds at most its budget, then closes with 1008", async () => {
  const server = await start();
  const socket = new WebSocket(`ws://127.0.0.1:${server.server.httpPort}/v2/models/bytes/stream`);
  try {
    await new Promise((resolve, reject) => {
      socket.once("open", resolve);
      socket.once("error", reject);
    });
    const closed = new Promise<number>((resolve) => socket.on("close", (code: number) => resolve(code)));
    socket.on("error", () => {});
    socket.pause();
    const header = Buffer.from(
      JSON.stringify({
        inputs: [
          { name: "INPUT0", datatype: "UINT8", shape: [ANSWER], parameters: { binary_data_size: ANSWER } },
        ],
      }),
    );
    const prefix = Buffer.alloc(4);
    prefix.writeUInt32LE(header.length);
    for (let i = 0; i < 64; i++) socket.send(Buffer.concat([prefix, header, Buffer.alloc(ANSWER, i)]));
    await untilRefused(server);
    assert.equal(await refusals(server), 1);
    const held = (await peak(server)) ?? 0;
    // Up to its budget (the refusal came when one more answer would not fit), never past it.
    assert.ok(held > BUDGET - ANSWER - KiB, `the server counted only ${held} bytes for the stream`);
    assert.ok(held <= BUDGET + ANSWER + KiB, `the server held ${held} bytes for the stream`);
    socket.resume();
    assert.equal(await closed, 1008);
  } finally {
    socket.terminate();
    await server.stop();
  }
});

test("a stream refused for its routing metadata holds no budget and the connection serves on", async () => {
  const server = await start();
  const client = new TestClient(server.grpcPort);
  try {
    const metadata = new Metadata();
    metadata.set("sequence-id", "18446744073709551616");
    const stream = client.stream(metadata);
    stream.on("error", () => {});
    const ended = await new Promise<StatusObject>((resolve) => stream.on("status", resolve));
    assert.equal(ended.code, 3, ended.details);
    assert.match(ended.details, /the sequence id '18446744073709551616' .* is not a uint64/);
    // The same connection still streams, and nothing is left held for it.
    const next = client.stream();
    const answered = new Promise<unknown>((resolve) => next.once("data", resolve));
    next.write(bytesRequest("ok"));
    assert.ok(await answered);
    next.end();
    assert.equal(await heldNow(server), 0);
  } finally {
    client.close();
    await server.stop();
  }
});

/**
 * A loopback TCP relay to the server that can stop passing the server's bytes on: the
 * client then reads nothing at the transport level (no HTTP/2 window updates), which is
 * what a client that stops reading its socket does. (A grpc-js client that pauses its
 * stream still takes everything into its own queue: the server holds nothing for it.)
 */
async function relayTo(port: number): Promise<{ port: number; freeze(): void; thaw(): void; close(): void }> {
  const sockets = new Set<Socket>();
  const upstreams = new Set<Socket>();
  let frozen = false;
  const relay = createServer((client) => {
    const upstream = connect(port, "127.0.0.1");
    sockets.add(client);
    upstreams.add(upstream);
    client.pipe(upstream);
    upstream.pipe(client);
    if (frozen) upstream.pause();
    for (const socket of [client, upstream]) socket.on("error", () => {});
  });
  await new Promise<void>((resolve) => relay.listen(0, "127.0.0.1", resolve));
  return {
    port: (relay.address() as AddressInfo).port,
    freeze() {
      frozen = true;
      for (const upstream of upstreams) upstream.unpipe().pause();
    },
    thaw() {
      frozen = false;
      for (const upstream of upstreams) {
        for (const client of sockets) upstream.pipe(client);
        upstream.resume();
      }
    },
    close() {
      for (const socket of [...sockets, ...upstreams]) socket.destroy();
      relay.close();
    },
  };
}

test("a ModelStreamInfer client that reads nothing: its stream is reset after the stall time, what it held is freed, the connection serves on", async () => {
  // A budget far above what the stream's answers reach: only time ends this stream.
  const server = await start({ maxBufferedResponseBytes: 64 * BUDGET, grpcStreamStallTimeoutSecs: 1 });
  const stalls = () =>
    metricValue(server.metricsUrl, "seqserve_limit_refusals_total", { limit: "grpc_stream_stall_timeout" });
  const relay = await relayTo(server.grpcPort);
  const client = new TestClient(relay.port);
  try {
    // The connection works, then its client stops reading.
    const first = client.stream();
    const answered = new Promise<unknown>((resolve) => first.once("data", resolve));
    first.write(bytesRequest("warm"));
    assert.ok(await answered);
    relay.freeze();
    first.on("error", () => {});
    const status = new Promise<StatusObject>((resolve) => first.on("status", resolve));
    for (let i = 0; i < 8; i++) {
      first.write(expandRequest(i));
    }
    await waitFor("the stream's reset", async () => (((await stalls()) ?? 0) > 0 ? true : undefined));
    assert.equal(await stalls(), 1);
    assert.ok(((await peak(server)) ?? 0) >= ANSWER, "answers had been waiting for the client");
    // Freed while the client still reads nothing.
    await waitFor("its answers freed", async () => ((await heldNow(server)) === 0 ? true : undefined));
    assert.equal(await heldNow(server), 0, "the stream's answers are no longer held");

    // Reading again, the client learns its stream was reset, and the connection serves on.
    relay.thaw();
    const ended = await status;
    assert.equal(ended.code, 1, `reset (CANCELLED), got ${ended.code}: ${ended.details}`);
    const next = client.stream();
    const again = new Promise<unknown>((resolve) => next.once("data", resolve));
    const nextStatus = new Promise<StatusObject>((resolve) => next.on("status", resolve));
    next.write(bytesRequest("after"));
    assert.ok(await again);
    next.end();
    assert.equal((await nextStatus).code, 0);
  } finally {
    client.close();
    relay.close();
    await server.stop();
  }
});

test("a ModelStreamInfer stream that has ended leaves no stall watch behind to hold it", async () => {
  // Each write arms the stall watch; a stream's end must disarm it, or its timer holds the
  // call (and what it references) for the whole stall timeout after the stream is gone.
  const stallMs = 987_000; // a delay no other timer here has
  const armed = new Set<number>();
  const hook = createHook({
    init(id, type, _trigger, resource) {
      if (type === "Timeout" && (resource as { _idleTimeout?: number })._idleTimeout === stallMs)
        armed.add(id);
    },
    destroy(id) {
      armed.delete(id);
    },
  }).enable();
  const server = await start({ grpcStreamStallTimeoutSecs: stallMs / 1000 });
  const client = new TestClient(server.grpcPort);
  try {
    for (let i = 0; i < 5; i++) {
      const stream = client.stream();
      const status = new Promise<StatusObject>((resolve) => stream.on("status", resolve));
      const answered = new Promise<unknown>((resolve) => stream.once("data", resolve));
      stream.write(bytesRequest(`s${i}`));
      assert.ok(await answered);
      assert.ok(armed.size > 0, "a write arms the stall watch");
      stream.end();
      assert.equal((await status).code, 0);
    }
    await waitFor("the ended streams' stall watches gone", async () => (armed.size === 0 ? true : undefined));
    assert.equal(armed.size, 0);
  } finally {
    hook.disable();
    client.close();
    await server.stop();
  }
});
