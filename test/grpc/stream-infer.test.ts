import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type Server, Socket } from "node:net";
import { after, before, test } from "node:test";
import { type ClientDuplexStream, Metadata, status } from "@grpc/grpc-js";
import type { MethodDefinition } from "@grpc/proto-loader";
import type {
  ModelInferRequestMessage,
  ModelStreamInferResponseMessage,
} from "../../src/frontends/grpc/messages.ts";
import { INFERENCE_SERVICE_NAME, packageDefinition } from "../../src/frontends/grpc/proto-definitions.ts";
import { STREAM_ORDER_METADATA } from "../../src/frontends/grpc/stream-infer.ts";
import { type Harness, startServer, TestClient } from "./support/grpc-harness.ts";
import { RawGrpcStream } from "./support/raw-grpc-stream.ts";

// ModelStreamInfer over a real socket: in-band errors, many requests (and sequences) in
// flight on one stream, one sequence over several streams, cancellation, back-pressure.

type Stream = ClientDuplexStream<ModelInferRequestMessage, ModelStreamInferResponseMessage>;

let h: Harness;
before(async () => {
  h = await startServer();
});
after(() => h.stop());

/** Tests that wait for an event fail after this instead of hanging when it never comes. */
const WAIT = { timeout: 20_000 };

/** The next `count` responses of a stream. */
function collect(stream: Stream, count: number): Promise<ModelStreamInferResponseMessage[]> {
  const responses: ModelStreamInferResponseMessage[] = [];
  return new Promise((resolve, reject) => {
    if (count === 0) resolve(responses);
    const onData = (response: ModelStreamInferResponseMessage): void => {
      responses.push(response);
      if (responses.length === count) {
        stream.off("data", onData);
        resolve(responses);
      }
    };
    stream.on("data", onData);
    stream.once("error", reject);
  });
}

/** Resolves with the status the stream ended with. */
function finished(stream: Stream): Promise<{ code: number }> {
  return new Promise((resolve) => stream.once("status", resolve));
}

const int32 = (name: string, value: number): object => ({
  name,
  datatype: "INT32",
  shape: [1],
  contents: { int_contents: [value] },
});

const outputInt32 = (response: ModelStreamInferResponseMessage): number =>
  Buffer.from(response.infer_response?.raw_output_contents?.[0] ?? []).readInt32LE(0);

test("errors are sent in-band with the request id and the stream stays usable", async () => {
  const stream = h.client.stream();
  const done = finished(stream);
  const responses = collect(stream, 5);
  stream.write({ model_name: "echo", id: "ok-1", inputs: [int32("x", 1)] });
  stream.write({
    model_name: "fail",
    id: "fail",
    parameters: { code: { string_param: "UNAVAILABLE" } },
    inputs: [],
  });
  stream.write({ model_name: "nope", id: "unknown", inputs: [] });
  stream.write({ model_name: "echo", id: "bad", inputs: [{ name: "x", datatype: "INT32", shape: [2] }] });
  stream.write({ model_name: "echo", id: "ok-2", inputs: [int32("x", 2)] });
  stream.end();
  const byId = new Map((await responses).map((r) => [r.infer_response?.id, r]));
  assert.equal(byId.get("ok-1")?.error_message ?? "", "");
  assert.equal(outputInt32(byId.get("ok-1")!), 1);
  // Every answer of a model that is not decoupled is its request's last, and says so, as
  // Triton's do: clients read response.parameters["triton_final_response"].bool_param.
  assert.deepEqual(byId.get("ok-1")?.infer_response?.parameters?.triton_final_response, {
    bool_param: true,
    parameter_choice: "bool_param",
  });
  assert.equal(byId.get("fail")?.error_message, "failing as asked with UNAVAILABLE");
  assert.equal(byId.get("unknown")?.error_message, "Request for unknown model: 'nope' is not found");
  assert.match(byId.get("bad")?.error_message ?? "", /unable to find data for input tensor 'x'/);
  assert.equal(outputInt32(byId.get("ok-2")!), 2);
  assert.equal((await done).code, status.OK);
});

test("many interleaved requests on one stream each get their own response", async () => {
  const stream = h.client.stream();
  const count = 500;
  const responses = collect(stream, count);
  for (let i = 0; i < count; i++)
    stream.write({ model_name: "echo", id: `r${i}`, inputs: [int32("x", i * 3)] });
  stream.end();
  const seen = new Map<string, number>();
  for (const response of await responses) {
    assert.equal(response.error_message ?? "", "");
    seen.set(response.infer_response?.id ?? "", outputInt32(response));
  }
  assert.equal(seen.size, count);
  for (let i = 0; i < count; i++) assert.equal(seen.get(`r${i}`), i * 3);
});

const step = (
  sequence: bigint | string,
  value: number,
  start: boolean,
  end: boolean,
  id: string,
): object => ({
  model_name: "accumulate",
  id,
  parameters: {
    sequence_id:
      typeof sequence === "bigint"
        ? { int64_param: BigInt.asIntN(64, sequence).toString() }
        : { string_param: sequence },
    sequence_start: { bool_param: start },
    sequence_end: { bool_param: end },
  },
  inputs: [int32("INPUT", value)],
});

test("sequences multiplexed on one stream keep their per-sequence order", async () => {
  const stream = h.client.stream();
  const sequences: Array<bigint | string> = [1n, 2n, (1n << 64n) - 1n, 1n << 63n, "alpha", "beta", 77n, 78n];
  const steps = 25;
  const responses = collect(stream, sequences.length * steps);
  for (let s = 0; s < steps; s++) {
    sequences.forEach((sequence, k) => {
      stream.write(step(sequence, s + 1, s === 0, s === steps - 1, `${k}:${s}`));
    });
  }
  stream.end();
  const progress = new Map<number, number>();
  for (const response of await responses) {
    assert.equal(response.error_message ?? "", "");
    const [k, s] = (response.infer_response?.id ?? "").split(":").map(Number) as [number, number];
    // Responses of one sequence arrive in the order its requests were sent...
    assert.equal(progress.get(k) ?? -1, s - 1, `sequence ${k} step ${s}`);
    progress.set(k, s);
    // ...and each saw exactly the state its predecessors left.
    assert.equal(outputInt32(response), ((s + 1) * (s + 2)) / 2);
  }
  assert.equal(progress.size, sequences.length);
});

test("one sequence can be spread over several streams", async () => {
  const streams = [h.client.stream(), h.client.stream(), h.client.stream()];
  let expected = 0;
  for (let s = 0; s < 9; s++) {
    const stream = streams[s % streams.length]!;
    const reply = collect(stream, 1);
    stream.write(step("spread", 10, s === 0, s === 8, `s${s}`));
    expected += 10;
    const [response] = await reply;
    assert.equal(response?.error_message ?? "", "");
    assert.equal(outputInt32(response!), expected);
  }
  for (const stream of streams) stream.end();
  await Promise.all(streams.map(finished));
});

test(
  "answered as they complete, a request refused before it runs still waits for its sequence's earlier answers",
  WAIT,
  async () => {
    const slow = h.context.registry.slow;
    slow.held.length = 0;
    const metadata = new Metadata();
    metadata.set(STREAM_ORDER_METADATA, "sequence");
    const stream = h.client.stream(metadata);
    const done = finished(stream);
    const early = collect(stream, 3);
    const sequence7 = { sequence_id: { int64_param: "7" } };
    stream.write({ model_name: "slow", id: "7-held", parameters: sequence7, inputs: [] });
    // Refused by the decoder (no data for its input) before it reaches the model.
    stream.write({
      model_name: "slow",
      id: "7-refused",
      parameters: sequence7,
      inputs: [{ name: "x", datatype: "INT32", shape: [2] }],
    });
    // Another sequence, a request of no sequence, and one whose sequence id cannot be
    // read: none of them waits for sequence 7.
    stream.write(step(8n, 1, true, true, "8-only"));
    stream.write({ model_name: "echo", id: "stateless", inputs: [int32("x", 1)] });
    stream.write({
      model_name: "slow",
      id: "malformed",
      parameters: { sequence_id: { bool_param: true } },
      inputs: [],
    });
    const earlyIds = (await early).map((r) => r.infer_response?.id ?? "");
    assert.deepEqual(earlyIds.toSorted(), ["8-only", "malformed", "stateless"]);
    await slow.waitForHeld(1);
    const late = collect(stream, 2);
    slow.releaseAll();
    const [held, refused] = await late;
    assert.equal(held?.infer_response?.id, "7-held");
    assert.equal(held?.error_message ?? "", "");
    assert.equal(refused?.infer_response?.id, "7-refused");
    assert.match(refused?.error_message ?? "", /unable to find data for input tensor 'x'/);
    stream.end();
    assert.equal((await done).code, status.OK);
  },
);

test("a stream ends with OK only after its last request is answered", WAIT, async () => {
  const slow = h.context.registry.slow;
  const stream = h.client.stream();
  let ended = false;
  const done = finished(stream).then((s) => {
    ended = true;
    return s;
  });
  const reply = collect(stream, 1);
  const before = slow.held.length;
  stream.write({ model_name: "slow", id: "last", inputs: [] });
  stream.end();
  await slow.waitForHeld(before + 1);
  await h.client.unary("ServerLive");
  assert.equal(ended, false);
  slow.releaseAll();
  assert.equal((await reply)[0]?.infer_response?.id, "last");
  assert.equal((await done).code, status.OK);
});

/** Resolves once the signal has aborted. */
function abortedPromise(signal: AbortSignal): Promise<void> {
  return signal.aborted
    ? Promise.resolve()
    : new Promise((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
}

test("cancelling a stream aborts the requests it has in flight, not the answered ones", WAIT, async () => {
  const slow = h.context.registry.slow;
  slow.releaseAll();
  const stream = h.client.stream();
  stream.on("error", () => {});
  const answered = collect(stream, 1);
  stream.write({ model_name: "slow", id: "answered", inputs: [] });
  await slow.waitForHeld(1);
  const first = slow.held[0]!;
  slow.releaseAll();
  await answered;
  for (let i = 0; i < 3; i++) stream.write({ model_name: "slow", id: `pending-${i}`, inputs: [] });
  await slow.waitForHeld(3);
  const pending = slow.held.slice(0, 3);
  stream.cancel();
  await Promise.all(pending.map((held) => abortedPromise(held.request.signal!)));
  assert.ok(pending.every((held) => held.aborted));
  // The request answered before the cancel was not failed by it.
  assert.equal(first.aborted, false);
  slow.held.length = 0;
});

test("a broken connection aborts the requests its streams have in flight", WAIT, async () => {
  const slow = h.context.registry.slow;
  slow.held.length = 0;
  // A TCP relay whose sockets the test can cut, like a network failure.
  const sockets: Socket[] = [];
  const relay: Server = createServer((inbound) => {
    const upstream = new Socket();
    sockets.push(inbound, upstream);
    upstream.connect(h.port, "127.0.0.1", () => {
      inbound.pipe(upstream);
      upstream.pipe(inbound);
    });
    inbound.on("error", () => {});
    upstream.on("error", () => {});
  });
  relay.listen(0, "127.0.0.1");
  await once(relay, "listening");
  const address = relay.address();
  assert.ok(address !== null && typeof address === "object");
  const client = new TestClient(address.port);
  try {
    const stream = client.stream();
    stream.on("error", () => {});
    for (let i = 0; i < 2; i++) stream.write({ model_name: "slow", id: `cut-${i}`, inputs: [] });
    await slow.waitForHeld(2);
    const pending = slow.held.slice(0, 2);
    for (const socket of sockets) socket.destroy();
    await Promise.all(pending.map((held) => abortedPromise(held.request.signal!)));
    assert.ok(pending.every((held) => held.aborted));
  } finally {
    client.close();
    relay.close();
    slow.held.length = 0;
  }
});

test("reading pauses while maxInflightPerStream requests are unanswered", WAIT, async () => {
  const bounded = await startServer({ maxInflightPerStream: 4 });
  try {
    const slow = bounded.context.registry.slow;
    const stream = bounded.client.stream();
    const total = 20;
    const responses = collect(stream, total);
    for (let i = 0; i < total; i++) stream.write({ model_name: "slow", id: `b${i}`, inputs: [] });
    await slow.waitForHeld(4);
    // Give the server every chance to read more: a full round trip on the same connection.
    await bounded.client.unary("ServerLive");
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(slow.held.length, 4);
    let answered = 0;
    void responses.then(() => {
      answered = total;
    });
    while (answered < total) {
      slow.releaseAll();
      await Promise.race([slow.waitForHeld(1), responses]);
    }
    const ids = (await responses).map((r) => r.infer_response?.id);
    assert.deepEqual(new Set(ids), new Set(Array.from({ length: total }, (_, i) => `b${i}`)));
    stream.end();
  } finally {
    await bounded.stop();
  }
});

test("a client that stops reading stops the server from accepting more requests", WAIT, async () => {
  const bounded = await startServer({ maxInflightPerStream: 10_000 });
  const method = (
    packageDefinition()[INFERENCE_SERVICE_NAME] as Record<string, MethodDefinition<object, object>>
  ).ModelStreamInfer!;
  const stream = new RawGrpcStream(bounded.port, method.path);
  try {
    const echo = bounded.context.registry.models.get("echo")!;
    const accepted = (): number => echo.statistics().inference_count;
    const total = 400;
    const payload = Buffer.alloc(64 * 1024, 1);
    for (let i = 0; i < total; i++) {
      stream.send(
        method.requestSerialize({
          model_name: "echo",
          id: `p${i}`,
          inputs: [{ name: "x", datatype: "UINT8", shape: [payload.length] }],
          raw_input_contents: [payload],
        }),
      );
    }
    stream.end();
    // Wait until the server stops accepting: the count holds still over several checks.
    let last = -1;
    let still = 0;
    while (still < 5) {
      await new Promise((resolve) => setTimeout(resolve, 40));
      const now = accepted();
      still = now === last ? still + 1 : 0;
      last = now;
    }
    assert.ok(last > 0, "the server accepted some requests");
    assert.ok(
      last < total / 4,
      `the server accepted ${last} of ${total} requests while the client was not reading`,
    );
    // Once the client reads again, every request is answered.
    const responses = (await stream.read(total)).map(
      (bytes) => method.responseDeserialize(bytes) as ModelStreamInferResponseMessage,
    );
    assert.equal(responses.length, total);
    assert.ok(
      responses.every(
        (r) =>
          (r.error_message ?? "") === "" &&
          r.infer_response?.raw_output_contents?.[0]?.length === payload.length,
      ),
    );
    assert.equal(accepted(), total);
  } finally {
    stream.close();
    await bounded.stop();
  }
});

test("close(grace) cancels the streams still open when the grace period ends", WAIT, async () => {
  const closing = await startServer();
  try {
    const slow = closing.context.registry.slow;
    const stream = closing.client.stream();
    stream.on("error", () => {});
    stream.write({ model_name: "slow", id: "left-behind", inputs: [] });
    await slow.waitForHeld(1);
    const held = slow.held[0]!;
    await closing.frontend.close(50);
    await abortedPromise(held.request.signal!);
    assert.equal(held.aborted, true);
  } finally {
    await closing.stop();
  }
});

test(
  "a stream reads no more requests while those it holds unanswered pass --max-held-request-bytes",
  WAIT,
  async () => {
    const held = await startServer({ streamMaxHeldRequestBytes: 1024 * 1024 });
    try {
      const slow = held.context.registry.slow;
      const stream = held.client.stream();
      const replies = collect(stream, 8);
      // Eight requests of 512 KiB each; the slow model holds every request until released.
      for (let i = 0; i < 8; i++) {
        stream.write({
          model_name: "slow",
          id: `r${i}`,
          inputs: [{ name: "big", datatype: "UINT8", shape: [512 * 1024] }],
          raw_input_contents: [Buffer.alloc(512 * 1024)],
        });
      }
      stream.end();
      await slow.waitForHeld(2);
      // What the stream has already read stays with it; nothing more is read past 1 MiB.
      await held.client.unary("ServerLive");
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(slow.held.length, 2, "two requests of 512 KiB fill the 1 MiB the stream may hold");
      // Released, the held requests are answered, and the stream reads the next ones.
      let answered = false;
      void replies.then(() => {
        answered = true;
      });
      while (!answered) {
        slow.releaseAll();
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.deepEqual(
        (await replies).map((r) => r.infer_response?.id),
        ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"],
      );
    } finally {
      await held.stop();
    }
  },
);
