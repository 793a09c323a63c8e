import assert from "node:assert/strict";
import { test } from "node:test";
import { status } from "@grpc/grpc-js";
import type {
  ModelInferResponseMessage,
  ModelStreamInferResponseMessage,
} from "../../src/frontends/grpc/messages.ts";
import { callError, startServer } from "./support/grpc-harness.ts";

// Tensors far above grpc-js's 4 MiB default: the limit is the server's to set, for
// receiving and sending alike.

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
