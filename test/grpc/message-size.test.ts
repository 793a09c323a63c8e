import assert from "node:assert/strict";
import { connect } from "node:http2";
import { test } from "node:test";
import { status } from "@grpc/grpc-js";
import type { MethodDefinition } from "@grpc/proto-loader";
import type { InferRequest, InferResponse } from "../../src/core/infer.ts";
import { ResponseBudgets } from "../../src/frontends/common/response-budget.ts";
import type {
  ModelInferResponseMessage,
  ModelStreamInferResponseMessage,
} from "../../src/frontends/grpc/messages.ts";
import { INFERENCE_SERVICE_NAME, packageDefinition } from "../../src/frontends/grpc/proto-definitions.ts";
import { PREDICTION_SERVICE_NAME, tfsPackageDefinition } from "../../src/frontends/tfs/proto-definitions.ts";
import { waitFor } from "../support/sequence-kit.ts";
import { callError, startServer } from "./support/grpc-harness.ts";

// Tensors far above grpc-js's 4 MiB default: the limit is the server's to set, for
// receiving and sending alike. And what a stream's answers hold of the connection's
// budget comes back however the call ends, grpc-js ending it included.

const MiB = 1024 * 1024;

function tensor(bytes: number): Buffer {
  const data = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i += 4096) data[i] = (i / 4096) & 0xff;
  data[bytes - 1] = 0x5a;
  return data;
}

const request = (data: Buffer): object => ({
  model_name: "echo",
  inputs: [{ name: "big", datatype: "UINT8", shape: [data.length] }],
  raw_input_contents: [data],
});

test("a 100 MiB tensor round-trips under the default (INT32_MAX) limit", async () => {
  const h = await startServer();
  try {
    const data = tensor(100 * MiB);
    const response = await h.client.unary<ModelInferResponseMessage>("ModelInfer", request(data));
    const output = response.raw_output_contents?.[0];
    assert.equal(output?.length, data.length);
    assert.ok(Buffer.from(output!).equals(data));
  } finally {
    await h.stop();
  }
});

test("over a small limit the call is refused with RESOURCE_EXHAUSTED and the server keeps serving", async () => {
  const h = await startServer({ maxMessageBytes: 1 * MiB });
  try {
    const tooBig = await callError(h.client.unary("ModelInfer", request(tensor(2 * MiB))));
    assert.equal(tooBig.code, status.RESOURCE_EXHAUSTED);
    assert.match(tooBig.details, /larger than max/);
    const small = tensor(512 * 1024);
    const response = await h.client.unary<ModelInferResponseMessage>("ModelInfer", request(small));
    assert.ok(Buffer.from(response.raw_output_contents?.[0] ?? []).equals(small));
    // On a stream the oversized message ends that stream (it cannot be read, so it cannot
    // be answered in-band); other streams carry on.
    const stream = h.client.stream();
    const ended = new Promise<{ code: number }>((resolve) => stream.once("status", resolve));
    stream.on("error", () => {});
    stream.write(request(tensor(2 * MiB)));
    assert.equal((await ended).code, status.RESOURCE_EXHAUSTED);
    const next = h.client.stream();
    const answered = new Promise<ModelStreamInferResponseMessage>((resolve) => next.once("data", resolve));
    next.write(request(small));
    assert.ok(Buffer.from((await answered).infer_response?.raw_output_contents?.[0] ?? []).equals(small));
    next.end();
    assert.deepEqual(await h.client.unary("ServerLive"), { live: true });
  } finally {
    await h.stop();
  }
});

test("a stream's in-band error that would pass the send limit is cut to fit: the stream and its budget go on", async () => {
  const budgets = new ResponseBudgets(Number.POSITIVE_INFINITY);
  const h = await startServer({ budgets, maxMessageBytes: 8192 });
  try {
    const stream = h.client.stream();
    const answers: ModelStreamInferResponseMessage[] = [];
    const ended = new Promise<void>((resolve) => stream.on("status", () => resolve()));
    stream.on("data", (answer: ModelStreamInferResponseMessage) => answers.push(answer));
    // Under the limit itself, but its "unknown model" error echoes both long names.
    stream.write({ model_name: "m".repeat(4085), id: "i".repeat(4085) });
    stream.write({ ...request(Buffer.of(1)), id: "after" });
    stream.end();
    await ended;
    assert.equal(answers.length, 2);
    // Its id (4085 bytes) is left out; the text fits.
    assert.match(answers[0]!.error_message ?? "", /^Request for unknown model: 'm{4085}' is not found$/);
    assert.equal(answers[0]!.infer_response?.id ?? "", "");
    assert.equal(answers[1]!.infer_response?.id, "after");
    assert.equal(budgets.totalBytes, 0);
  } finally {
    await h.stop();
  }
});

test("a stream whose deadline passes while its answers wait for a slow reader gives its budget back", async () => {
  const budgets = new ResponseBudgets(Number.POSITIVE_INFINITY);
  const h = await startServer({ budgets, maxInflightPerStream: 100 });
  const method = (
    packageDefinition()[INFERENCE_SERVICE_NAME] as Record<string, MethodDefinition<object, object>>
  ).ModelStreamInfer!;
  // A raw HTTP/2 client: it can stop reading with a deadline set, which grpc-js's cannot.
  const session = connect(`http://127.0.0.1:${h.port}`, { maxSessionMemory: 1024 });
  session.on("error", () => {});
  try {
    const call = session.request({
      ":method": "POST",
      ":path": method.path,
      "content-type": "application/grpc",
      te: "trailers",
      "grpc-timeout": "1000m",
    });
    call.on("error", () => {});
    call.pause();
    for (let i = 0; i < 6; i++) {
      const message = method.requestSerialize({ ...request(tensor(MiB)), id: `r${i}` });
      const prefix = Buffer.alloc(5);
      prefix.writeUInt32BE(message.byteLength, 1);
      call.write(Buffer.concat([prefix, message]));
    }
    // Past the deadline, grpc-js ends the call itself; then the client reads again.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    call.resume();
    await waitFor("the stream's answers to be given back", async () =>
      budgets.totalBytes === 0 ? true : undefined,
    );
  } finally {
    session.destroy();
    await h.stop();
  }
});

/**
 * A raw HTTP/2 client sends ten unary calls whose 1 MiB answers it does not read (its
 * flow-control windows stay shut), then one more: the server holds at most its budget,
 * refuses the late call, and gives everything back once the client reads.
 */
async function unreadUnaryAnswers(method: MethodDefinition<object, object>, message: (id: string) => object) {
  const budgets = new ResponseBudgets(4 * MiB);
  const h = await startServer({ budgets });
  const session = connect(`http://127.0.0.1:${h.port}`, { maxSessionMemory: 1024 });
  session.on("error", () => {});
  const call = (id: string) => {
    const stream = session.request({
      ":method": "POST",
      ":path": method.path,
      "content-type": "application/grpc",
      te: "trailers",
    });
    stream.on("error", () => {});
    stream.pause();
    const bytes = method.requestSerialize(message(id));
    const prefix = Buffer.alloc(5);
    prefix.writeUInt32BE(bytes.byteLength, 1);
    stream.end(Buffer.concat([prefix, bytes]));
    const statusOf = new Promise<string | undefined>((resolve) => {
      stream.on("trailers", (trailers) => resolve(trailers["grpc-status"] as string | undefined));
      stream.on("response", (headers) => {
        // A refusal before any answer comes as a trailers-only response.
        if (headers["grpc-status"] !== undefined) resolve(headers["grpc-status"] as string);
      });
      stream.on("close", () => resolve(undefined));
    });
    return { stream, statusOf };
  };
  try {
    const calls = Array.from({ length: 10 }, (_, i) => call(`r${i}`));
    await waitFor("the answers to be counted", async () =>
      budgets.totalBytes >= 2 * MiB ? true : undefined,
    );
    // Held, at most the budget: the answers past it were dropped.
    const refused = await Promise.race([
      Promise.all(calls.map((c) => c.statusOf)),
      new Promise((resolve) => setTimeout(resolve, 2000, "waiting")),
    ]);
    assert.ok(budgets.totalBytes <= 4 * MiB, `${budgets.totalBytes} bytes held`);
    assert.ok(budgets.totalBytes >= 2 * MiB, `${budgets.totalBytes} bytes held`);
    assert.equal(refused, "waiting", "the answers within the budget wait for the reader");
    // A new call on the saturated connection is refused before it runs.
    const late = call("late");
    assert.equal(await late.statusOf, String(status.RESOURCE_EXHAUSTED));
    // The client reads again: what was held is sent, and given back.
    for (const c of calls) c.stream.resume();
    const statuses = await Promise.all(calls.map((c) => c.statusOf));
    const counts = { ok: 0, exhausted: 0 };
    for (const s of statuses) {
      if (s === String(status.OK)) counts.ok++;
      else if (s === String(status.RESOURCE_EXHAUSTED)) counts.exhausted++;
    }
    assert.equal(counts.ok + counts.exhausted, 10, JSON.stringify(statuses));
    assert.ok(counts.ok >= 2 && counts.exhausted >= 5, JSON.stringify(counts));
    await waitFor("the answers to be given back", async () => (budgets.totalBytes === 0 ? true : undefined));
  } finally {
    session.destroy();
    await h.stop();
  }
}

test("unary ModelInfer answers a client does not read are held within the connection's budget", async () => {
  const method = (
    packageDefinition()[INFERENCE_SERVICE_NAME] as Record<string, MethodDefinition<object, object>>
  ).ModelInfer!;
  await unreadUnaryAnswers(method, (id) => ({ ...request(tensor(MiB)), id }));
});

test("TF-Serving Predict answers a client does not read are held within the connection's budget", {
  timeout: 20_000,
}, async () => {
  const method = (
    tfsPackageDefinition()[PREDICTION_SERVICE_NAME] as Record<string, MethodDefinition<object, object>>
  ).Predict!;
  // The fake echo model's INPUT0 is FP32 [-1, 16]: 16,384 rows are 1 MiB.
  await unreadUnaryAnswers(method, () => ({
    model_spec: { name: "echo" },
    inputs: {
      INPUT0: {
        dtype: "DT_FLOAT",
        tensor_shape: { dim: [{ size: MiB / 64 }, { size: 16 }] },
        tensor_content: tensor(MiB),
      },
    },
  }));
});

test("a unary call cancelled while its model runs leaves nothing counted in the connection's budget", async () => {
  const budgets = new ResponseBudgets(8 * MiB);
  const h = await startServer({ budgets });
  // A run that finishes whatever its client does, as a dispatched request does, with 1 MiB.
  const slow = h.context.registry.slow as unknown as {
    run: (request: InferRequest) => Promise<InferResponse>;
  };
  slow.run = (request) =>
    new Promise((resolve) =>
      setTimeout(
        () =>
          resolve({
            modelName: "slow",
            modelVersion: "1",
            id: request.id,
            parameters: {},
            outputs: [{ name: "OUT", datatype: "UINT8", shape: [MiB], data: new Uint8Array(MiB) }],
          }),
        200,
      ),
    );
  try {
    for (let i = 0; i < 5; i++) {
      const { call, response } = h.client.start("ModelInfer", { model_name: "slow", inputs: [] });
      setTimeout(() => call.cancel(), 50);
      assert.equal((await callError(response)).code, status.CANCELLED);
    }
    // The answers come after their calls ended: nothing sends them, so nothing may hold them.
    await new Promise((resolve) => setTimeout(resolve, 400));
    assert.equal(budgets.totalBytes, 0);
    assert.deepEqual(await h.client.unary("ServerLive", {}), { live: true });
  } finally {
    await h.stop();
  }
});
