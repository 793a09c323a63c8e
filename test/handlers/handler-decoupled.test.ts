import assert from "node:assert/strict";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { after, before, test } from "node:test";
import { status as grpcStatus, type StatusObject } from "@grpc/grpc-js";
import WebSocket from "ws";
import { securityOptions } from "../../src/config/security-options.ts";
import { TestClient } from "../grpc/support/grpc-harness.ts";
import { postJson } from "../support/http-client.ts";
import { metricValue } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import {
  decoupledCountConfig,
  eventOf,
  eventually,
  type HandlerRepository,
  handlerRepository,
  RECORDER,
  readEvents,
  streamAll,
} from "./support/handler-kit.ts";

// A decoupled handler sends any number of responses per request, then completes it. They
// reach the client in order over gRPC ModelStreamInfer, a WebSocket stream and Server-Sent
// Events; a client that reads slowly makes the handler's send() wait (back-pressure all the
// way to the model code), and a client that leaves cancels the request: the handler's
// signal aborts and its pending send() rejects.

const TICKER = `${RECORDER}
export default {
  initialize(context: any) {
    eventsFile = context.model.parameters.events_file;
  },
  execute(requests: any[]) {
    for (const request of requests) void run(request);
  },
};
async function run(r: any) {
  const count = Number(r.inputs.COUNT.data[0]);
  const size = Number(r.parameters.payload ?? 1);
  r.signal.addEventListener("abort", () => record({ hook: "aborted", id: r.id, message: r.signal.reason?.message }));
  try {
    for (let i = 0; i < count; i++) {
      const sent = r.send({
        outputs: {
          INDEX: { datatype: "INT32", shape: [1], data: Int32Array.of(i) },
          PAYLOAD: { datatype: "UINT8", shape: [size], data: new Uint8Array(size).fill(i % 256) },
        },
      });
      let done = false;
      sent.then(() => { done = true; }, () => {});
      await null;
      if (!done) record({ hook: "waiting", id: r.id, index: i });
      await sent;
    }
    r.complete();
  } catch (error: any) {
    record({ hook: "stopped", id: r.id, message: error.message });
    // A send after that is told why as well.
    await r.send({ outputs: { INDEX: { datatype: "INT32", shape: [1], data: Int32Array.of(-1) } } }).catch((late: any) =>
      record({ hook: "late-send", id: r.id, message: late.message }),
    );
  }
}
`;

// Each request keeps a tensor of COUNT bytes in its sequence's state, counts its steps
// there and sends the count as its only, final, response.
// Its responses tell what the previous request's change after its final response met.
const BOUNDED = `
let late = "";
export default {
  execute(requests: any[]) {
    for (const r of requests) {
      const state = r.sequence.state;
      const steps = (state.get("steps") ?? 0) + 1;
      const size = r.inputs.COUNT.data[0];
      state.set("steps", steps);
      state.set("history", { datatype: "UINT8", shape: [size], data: new Uint8Array(size) });
      const outputs = { INDEX: { datatype: "INT32", shape: [1], data: Int32Array.of(steps) } };
      void r.send({ outputs, parameters: { late } }, { final: true });
      try {
        state.set("steps", 100);
        late = "no exception";
      } catch (error) {
        late = (error as Error).message;
      }
    }
  },
};
`;

// Sends COUNT responses, a moment apart, then completes its request; for a COUNT below 0,
// sends -COUNT - 1 of them, then fails it.
const COUNTED = `
export default {
  execute(requests: any[]) {
    for (const r of requests) void run(r);
  },
};
async function run(r: any) {
  const count = Number(r.inputs.COUNT.data[0]);
  for (let i = 0; i < (count < 0 ? -count - 1 : count); i++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    await r.send({ outputs: { INDEX: { datatype: "INT32", shape: [1], data: Int32Array.of(i) } } });
  }
  r.complete(count < 0 ? new Error("asked to fail") : undefined);
}
`;

// A request with COUNT 1 gets one response at once, and completes when a request with
// COUNT 0 comes (which completes with no response).
const HELD = `
let release: () => void = () => {};
export default {
  execute(requests: any[]) {
    for (const r of requests) {
      if (Number(r.inputs.COUNT.data[0]) === 0) {
        release();
        r.complete();
        continue;
      }
      void r.send({ outputs: { INDEX: { datatype: "INT32", shape: [1], data: Int32Array.of(0) } } });
      new Promise<void>((resolve) => { release = resolve; }).then(() => r.complete());
    }
  },
};
`;

let repository: HandlerRepository;
let server: TestServer;

before(async () => {
  repository = handlerRepository((eventsFile) => ({
    ticker: {
      config: `
backend: "typescript"
max_batch_size: 0
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "PAYLOAD" data_type: TYPE_UINT8 dims: [ -1 ] } ]
model_transaction_policy { decoupled: true }
parameters { key: "handler_max_unacked_responses" value { string_value: "2" } }
parameters { key: "events_file" value { string_value: "${eventsFile}" } }
`,
      files: { "1/model.ts": TICKER },
    },
    bounded: {
      config: decoupledCountConfig(`
sequence_batching { oldest { max_candidate_sequences: 8 } }
parameters { key: "sequence_state_max_bytes" value { string_value: "1000" } }
`),
      files: { "1/model.ts": BOUNDED },
    },
    counted: {
      config: decoupledCountConfig(),
      files: { "1/model.ts": COUNTED },
    },
    counted_seq: {
      config: decoupledCountConfig("sequence_batching { oldest { max_candidate_sequences: 4 } }"),
      files: { "1/model.ts": COUNTED },
    },
    held: { config: decoupledCountConfig(), files: { "1/model.ts": HELD } },
  }));
  server = await startTestServer(repository.path);
});

after(async () => {
  await server.stop();
  repository.remove();
});

const countInput = (count: number) => ({ name: "COUNT", datatype: "INT32", shape: [1], data: [count] });

test("gRPC ModelStreamInfer: each request's responses in order, flagged, with the empty final response", async () => {
  const counts = [
    ["a", 4],
    ["b", 3],
  ] as const;
  const received = await streamAll(
    server.grpcPort,
    counts.map(([id, count]) => ({
      model_name: "ticker",
      id,
      parameters: { triton_enable_empty_final_response: { bool_param: true } },
      inputs: [{ name: "COUNT", datatype: "INT32", shape: [1] }],
      raw_input_contents: [Buffer.from(Int32Array.of(count).buffer)],
    })),
  );
  for (const [id, count] of counts) {
    const mine = received.filter((m) => m.infer_response?.id === id).map((m) => m.infer_response!);
    assert.equal(mine.length, count + 1);
    const indexes = mine.slice(0, count).map((r) => Buffer.from(r.raw_output_contents![0]!).readInt32LE(0));
    assert.deepEqual(indexes, [...Array(count).keys()]);
    assert.deepEqual(
      mine.map((r) => r.parameters?.triton_final_response?.bool_param),
      [...Array(count).fill(false), true],
    );
    assert.deepEqual(mine.at(-1)!.outputs, []);
    // The responses name the version that ran; the empty final one, as Triton's stream, the
    // model as the request named it (no version).
    assert.deepEqual(
      mine.map((r) => [r.model_name, r.model_version ?? ""]),
      [...Array(count).fill(["ticker", "1"]), ["ticker", ""]],
    );
  }
  assert.ok(received.every((m) => (m.error_message ?? "") === ""));
});

test("a decoupled model's requests are counted as any other's: executions, failures by reason, first responses", async () => {
  // Two requests answered (3 and 2 responses), one failed by the model; none batched.
  const received = await streamAll(
    server.grpcPort,
    [3, 2, -1].map((count, i) => ({
      model_name: "counted",
      id: `c${i}`,
      inputs: [{ name: "COUNT", datatype: "INT32", shape: [1] }],
      raw_input_contents: [Buffer.from(Int32Array.of(count).buffer)],
    })),
  );
  assert.equal(received.filter((m) => (m.error_message ?? "") !== "").length, 1);
  const stats = (await (await fetch(`${server.url}/v2/models/counted/stats`)).json()) as {
    model_stats: {
      inference_count: number;
      execution_count: number;
      inference_stats: { success: { count: number }; fail: { count: number } };
    }[];
  };
  const [model] = stats.model_stats;
  assert.deepEqual(
    [
      model!.inference_count,
      model!.execution_count,
      model!.inference_stats.success.count,
      model!.inference_stats.fail.count,
    ],
    [2, 2, 2, 1],
    "inferences, executions, successes, failures",
  );
  const labels = { model: "counted", version: "1" };
  const metric = (name: string, more: Record<string, string> = {}) =>
    metricValue(server.metricsUrl, name, { ...labels, ...more });
  assert.equal(await metric("nv_inference_exec_count"), 2);
  assert.equal(await metric("nv_inference_request_success"), 2);
  assert.equal(await metric("nv_inference_request_failure", { reason: "BACKEND" }), 1);
  // The failed request's first response is its error: Triton times the first of any kind.
  assert.equal(await metric("nv_inference_first_response_histogram_ms_count"), 3);
  assert.equal(await metric("seqserve_inference_request_duration_seconds_count"), 2);
});

test("the first-response histogram counts no request that completed without a response, as Triton's", async () => {
  const labels = { model: "counted_seq", version: "1" };
  const metric = (name: string) => metricValue(server.metricsUrl, name, labels);
  const [firstBefore, successBefore] = [
    await metric("nv_inference_first_response_histogram_ms_count"),
    await metric("nv_inference_request_success"),
  ];
  const received = await streamAll(server.grpcPort, [
    {
      model_name: "counted_seq",
      id: "none",
      parameters: { sequence_id: { int64_param: "91" }, sequence_start: { bool_param: true } },
      inputs: [{ name: "COUNT", datatype: "INT32", shape: [1] }],
      raw_input_contents: [Buffer.from(Int32Array.of(0).buffer)],
    },
  ]);
  assert.deepEqual(received, [], "no response (nor an empty final one, not asked for)");
  assert.equal(await metric("nv_inference_request_success"), successBefore! + 1);
  assert.equal(await metric("nv_inference_first_response_histogram_ms_count"), firstBefore);
});

test("the first-response histogram times a decoupled request's first response, not its end", async () => {
  const client = new TestClient(server.grpcPort);
  const gapMs = 300;
  try {
    const stream = client.stream();
    const step = (count: number) => ({
      model_name: "held",
      inputs: [{ name: "COUNT", datatype: "INT32", shape: [1] }],
      raw_input_contents: [Buffer.from(Int32Array.of(count).buffer)],
    });
    const first = new Promise<void>((resolve) => stream.once("data", () => resolve()));
    stream.write(step(1));
    await first;
    // The request goes on at least this long after its first response has reached us.
    await new Promise((resolve) => setTimeout(resolve, gapMs));
    const ended = new Promise<void>((resolve) => stream.on("end", resolve));
    stream.write(step(0));
    stream.end();
    await ended;
  } finally {
    client.close();
  }
  const labels = { model: "held", version: "1" };
  const firstMs = (await metricValue(
    server.metricsUrl,
    "nv_inference_first_response_histogram_ms_sum",
    labels,
  ))!;
  const wholeMs =
    (await metricValue(server.metricsUrl, "seqserve_inference_request_duration_seconds_sum", labels))! * 1000;
  // Two requests: the held one and the one that released it (first = whole, no response).
  const releaseMs = wholeMs - firstMs;
  assert.ok(releaseMs >= gapMs, `first responses ${firstMs} ms in all, whole requests ${wholeMs} ms`);
});

test("a final response whose state the model cannot keep is not sent: the request fails alone, its state as before; an END is not bounded; a change after the final response is not kept", async () => {
  const requests = (
    [
      ["fits", 10],
      ["too-big", 2000],
      ["fits-again", 10],
      // Its state is freed with it: sequence_state_max_bytes does not refuse it.
      ["big-end", 2000],
    ] as const
  ).map(([id, bytes]) => ({
    model_name: "bounded",
    id,
    parameters: {
      sequence_id: { int64_param: "5" },
      ...(id === "fits" ? { sequence_start: { bool_param: true } } : {}),
      ...(id === "big-end" ? { sequence_end: { bool_param: true } } : {}),
    },
    inputs: [{ name: "COUNT", datatype: "INT32", shape: [1] }],
    raw_input_contents: [Buffer.from(Int32Array.of(bytes).buffer)],
  }));
  const received = await streamAll(server.grpcPort, requests);
  const seen = received.map((m) => ({
    id: m.infer_response?.id,
    error: m.error_message || undefined,
    final: m.infer_response?.parameters?.triton_final_response?.bool_param,
    steps: m.infer_response?.raw_output_contents?.[0]?.length
      ? Buffer.from(m.infer_response.raw_output_contents[0]).readInt32LE(0)
      : undefined,
    late: m.infer_response?.parameters?.late?.string_param,
  }));
  assert.deepEqual(seen, [
    { id: "fits", error: undefined, final: true, steps: 1, late: "" },
    {
      // 2000 bytes of history, 4 of the step count, and each entry's key and overhead.
      id: "too-big",
      error:
        "the state of sequence 5 would hold 2528 bytes, more than the model's sequence_state_max_bytes (1000): the step is not applied, and the state stays as it was",
      // A request that failed once its model took it is its last answer, flagged so, as Triton's stream flags it.
      final: true,
      steps: undefined,
      late: undefined,
    },
    // The failed request left the state as it was: one step.
    // The change after each final response was left undone (steps go on from 2, not
    // 100), without an exception that would end the worker (the log says so).
    { id: "fits-again", error: undefined, final: true, steps: 2, late: "no exception" },
    { id: "big-end", error: undefined, final: true, steps: 3, late: "no exception" },
  ]);
});

test("a START whose state the model cannot keep leaves no sequence: the step after it is told to start one", async () => {
  const request = (id: string, bytes: number, start: boolean) => ({
    model_name: "bounded",
    id,
    parameters: {
      sequence_id: { int64_param: "6" },
      ...(start ? { sequence_start: { bool_param: true } } : {}),
    },
    inputs: [{ name: "COUNT", datatype: "INT32", shape: [1] }],
    raw_input_contents: [Buffer.from(Int32Array.of(bytes).buffer)],
  });
  const [started] = await streamAll(server.grpcPort, [request("start", 2000, true)]);
  assert.equal(
    started?.error_message,
    "the state of sequence 6 would hold 2528 bytes, more than the model's sequence_state_max_bytes (1000): the sequence is not started",
  );
  const [next] = await streamAll(server.grpcPort, [request("next", 10, false)]);
  assert.match(next?.error_message ?? "", /must specify the START flag/);
});

/** Triton's words for /generate's answer to a request of other than one response. */
const NOT_ONE_RESPONSE =
  "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses";

test("/generate refuses a step of many responses once it has run to its end, as Triton does: the sequence goes on", async () => {
  const step = (count: number, parameters: Record<string, unknown>) =>
    postJson(`${server.url}/v2/models/counted_seq/generate`, {
      COUNT: count,
      sequence_id: 88,
      ...parameters,
    });
  assert.equal((await step(1, { sequence_start: true })).status, 200);
  const many = await step(40, {});
  // Triton's status is the first response's: 200; its refusal is in the body.
  assert.equal(many.status, 200);
  assert.equal(many.body.error, NOT_ONE_RESPONSE);
  // Not cancelled halfway (which ended the sequence): the next step is the sequence's.
  const next = await step(1, {});
  assert.equal(next.status, 200, JSON.stringify(next.body));
  assert.equal((await step(1, { sequence_end: true })).status, 200);
});

test("a WebSocket stream: every response of a message before the next message's, in order", async () => {
  const socket = new WebSocket(`${server.url.replace("http", "ws")}/v2/models/ticker/stream`);
  await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
  const messages: Record<string, unknown>[] = [];
  const all = new Promise<void>((resolve) =>
    socket.on("message", (data: Buffer) => {
      messages.push(JSON.parse(data.toString()) as Record<string, unknown>);
      if (messages.length === 7) resolve();
    }),
  );
  socket.send(JSON.stringify({ id: "first", inputs: [countInput(3)] }));
  socket.send(JSON.stringify({ id: "second", inputs: [countInput(4)] }));
  await all;
  socket.close(1000);
  const seen = messages.map((m) => {
    const outputs = m.outputs as { name: string; data: number[] }[];
    return `${m.id}:${outputs.find((o) => o.name === "INDEX")!.data[0]}`;
  });
  assert.deepEqual(seen, ["first:0", "first:1", "first:2", "second:0", "second:1", "second:2", "second:3"]);
});

/** A generate_stream call whose response the test reads when it wants. */
function openEventStream(body: unknown): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const call = httpRequest(
      `${server.url}/v2/models/ticker/generate_stream`,
      { method: "POST", headers: { "content-type": "application/json" } },
      resolve,
    );
    call.on("error", reject);
    call.end(JSON.stringify(body));
  });
}

function dataEvents(text: string): Record<string, unknown>[] {
  return text
    .split("\n\n")
    .filter((chunk) => chunk.startsWith("data: "))
    .map((chunk) => JSON.parse(chunk.slice(6)) as Record<string, unknown>);
}

test("Server-Sent Events on /generate_stream, in order; /generate refuses several responses", async () => {
  const response = await openEventStream({ id: "sse", COUNT: 5 });
  assert.equal(response.statusCode, 200);
  assert.equal(response.headers["content-type"], "text/event-stream; charset=utf-8");
  let text = "";
  for await (const chunk of response) text += chunk;
  const events = dataEvents(text);
  assert.deepEqual(
    events.map((e) => e.INDEX),
    [0, 1, 2, 3, 4],
  );
  assert.deepEqual(events[0], { id: "sse", model_name: "ticker", model_version: "1", INDEX: 0, PAYLOAD: 0 });

  const single = await postJson(`${server.url}/v2/models/ticker/generate`, { COUNT: 1 });
  assert.equal(single.status, 200);
  assert.deepEqual(single.body, { model_name: "ticker", model_version: "1", INDEX: 0, PAYLOAD: 0 });
  const several = await postJson(`${server.url}/v2/models/ticker/generate`, { COUNT: 2 });
  assert.equal(several.status, 200);
  assert.deepEqual(several.body, { error: NOT_ONE_RESPONSE });
  const unary = await postJson(`${server.url}/v2/models/ticker/infer`, { inputs: [countInput(1)] });
  assert.equal(unary.status, 501);
  // Triton's words, as its HTTP endpoint and unary RPC refuse such a model.
  assert.equal(unary.body.error, "HTTP end point doesn't support models with decoupled transaction policy");
  const client = new TestClient(server.grpcPort);
  try {
    const refused = (await client
      .unary("ModelInfer", {
        model_name: "ticker",
        inputs: [{ name: "COUNT", datatype: "INT32", shape: [1] }],
        raw_input_contents: [Buffer.from(Int32Array.of(1).buffer)],
      })
      .catch((error: StatusObject) => error)) as StatusObject;
    assert.deepEqual(
      [refused.code, refused.details],
      [grpcStatus.UNIMPLEMENTED, "ModelInfer RPC doesn't support models with decoupled transaction policy"],
    );
  } finally {
    client.close();
  }
});

/** A POST's status, Content-Type and text, as a client of /generate_stream reads them. */
async function postForText(
  path: string,
  body: unknown,
): Promise<{ status: number; type: string | null; text: string }> {
  const response = await fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: response.status, type: response.headers.get("content-type"), text: await response.text() };
}

test("/generate answers a request without a response, or with one and then a failure, as Triton does: 200 and its refusal", async () => {
  // Completed with no response (a flag-only final).
  const none = await postJson(`${server.url}/v2/models/counted/generate`, { COUNT: 0 });
  assert.deepEqual([none.status, none.body], [200, { error: NOT_ONE_RESPONSE }]);
  // One response, then a failure: two of Triton's responses.
  const oneThenFailed = await postJson(`${server.url}/v2/models/counted/generate`, { COUNT: -2 });
  assert.deepEqual([oneThenFailed.status, oneThenFailed.body], [200, { error: NOT_ONE_RESPONSE }]);
  // A request the model failed before any response is that failure, with its status.
  const failed = await postJson(`${server.url}/v2/models/counted/generate`, { COUNT: -1 });
  assert.deepEqual([failed.status, failed.body], [500, { error: "asked to fail" }]);
});

test("/generate_stream: a request the model failed before its first response is its failure's event, with its status, as Triton's", async () => {
  const failed = await postForText("/v2/models/counted/generate_stream", { COUNT: -1 });
  assert.deepEqual(failed, {
    status: 500,
    type: "text/event-stream; charset=utf-8",
    text: 'data: {"error":"asked to fail"}\n\n',
  });
  // A START the model ran, refused after it for want of state room.
  const refused = await postForText("/v2/models/bounded/generate_stream", {
    COUNT: 2000,
    sequence_id: 71,
    sequence_start: true,
  });
  assert.deepEqual(refused, {
    status: 429,
    type: "text/event-stream; charset=utf-8",
    text: `data: ${JSON.stringify({ error: "the state of sequence 71 would hold 2528 bytes, more than the model's sequence_state_max_bytes (1000): the sequence is not started" })}\n\n`,
  });
  // Refused before the model had it (a check, a sequence's admission): a JSON error, as
  // extension_generate.md says.
  const invalid = await postForText("/v2/models/counted/generate_stream", {});
  assert.equal(invalid.status, 400);
  assert.equal(invalid.type, "application/json; charset=utf-8");
  assert.match(JSON.parse(invalid.text).error, /COUNT/);
  const unknown = await postForText("/v2/models/counted_seq/generate_stream", { COUNT: 1, sequence_id: 72 });
  assert.equal(unknown.status, 400);
  assert.equal(unknown.type, "application/json; charset=utf-8");
  assert.match(JSON.parse(unknown.text).error, /START/);
});

test("a slow SSE reader makes the handler wait; every event still arrives, in order", async () => {
  const count = 40;
  const response = await openEventStream({ id: "slow", COUNT: count, parameters: { payload: 65536 } });
  response.pause();
  // The client reads nothing: the handler's send() is left waiting.
  await eventOf(repository.eventsFile, "the handler waiting", (e) => e.hook === "waiting" && e.id === "slow");
  const waitedAt = readEvents(repository.eventsFile).find((e) => e.hook === "waiting" && e.id === "slow")!;
  assert.ok((waitedAt.index as number) < count - 1, "the handler waited before it had sent everything");
  let text = "";
  response.setEncoding("utf8");
  for await (const chunk of response) text += chunk;
  assert.deepEqual(
    dataEvents(text).map((e) => e.INDEX),
    [...Array(count).keys()],
  );
});

test("clients that leave cancel the request: the handler is told (SSE, gRPC, WebSocket)", async () => {
  const response = await openEventStream({
    id: "leaver-sse",
    COUNT: 1_000_000,
    parameters: { payload: 65536 },
  });
  response.pause();
  await eventOf(
    repository.eventsFile,
    "the SSE request waiting",
    (e) => e.hook === "waiting" && e.id === "leaver-sse",
  );
  response.destroy();
  const aborted = await eventOf(
    repository.eventsFile,
    "SSE abort",
    (e) => e.hook === "aborted" && e.id === "leaver-sse",
  );
  assert.match(aborted.message as string, /the client went away/);
  await eventOf(
    repository.eventsFile,
    "SSE send rejected",
    (e) => e.hook === "stopped" && e.id === "leaver-sse",
  );
  const late = await eventOf(
    repository.eventsFile,
    "a send after the cancel",
    (e) => e.hook === "late-send" && e.id === "leaver-sse",
  );
  assert.equal(late.message, "request 'leaver-sse' cancelled: the client went away");

  const client = new TestClient(server.grpcPort);
  const stream = client.stream();
  stream.on("error", () => {});
  stream.pause();
  stream.write({
    model_name: "ticker",
    id: "leaver-grpc",
    parameters: { payload: { int64_param: "65536" } },
    inputs: [{ name: "COUNT", datatype: "INT32", shape: [1] }],
    raw_input_contents: [Buffer.from(Int32Array.of(1_000_000).buffer)],
  });
  await eventOf(
    repository.eventsFile,
    "the gRPC request waiting",
    (e) => e.hook === "waiting" && e.id === "leaver-grpc",
  );
  stream.cancel();
  client.close();
  await eventOf(repository.eventsFile, "gRPC abort", (e) => e.hook === "aborted" && e.id === "leaver-grpc");

  const socket = new WebSocket(`${server.url.replace("http", "ws")}/v2/models/ticker/stream`);
  await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
  const first = new Promise((resolve) => socket.once("message", resolve));
  socket.send(
    JSON.stringify({ id: "leaver-ws", parameters: { payload: 16 }, inputs: [countInput(1_000_000)] }),
  );
  await first;
  socket.terminate();
  await eventOf(
    repository.eventsFile,
    "WebSocket abort",
    (e) => e.hook === "aborted" && e.id === "leaver-ws",
  );
});

test("a client that takes nothing for the stream idle time is let go (SSE, WebSocket); the handler is told", async () => {
  const idle = await startTestServer(repository.path, {
    security: securityOptions({ limits: { ...securityOptions().limits, httpStreamIdleTimeoutSecs: 1 } }),
  });
  try {
    const call = httpRequest(`${idle.url}/v2/models/ticker/generate_stream`, {
      method: "POST",
      headers: { "content-type": "application/json" },
    });
    const response = new Promise<IncomingMessage>((resolve, reject) => {
      call.once("response", resolve);
      call.once("error", reject);
    });
    call.end(JSON.stringify({ id: "idle-sse", COUNT: 1_000_000, parameters: { payload: 65536 } }));
    const events = await response;
    events.pause();
    const closed = new Promise<void>((resolve) => events.socket.once("close", () => resolve()));
    await eventOf(
      repository.eventsFile,
      "the SSE request waiting",
      (e) => e.hook === "waiting" && e.id === "idle-sse",
    );
    // Nothing read: after the idle time the server closes the connection and the handler's request aborts.
    await eventOf(repository.eventsFile, "SSE let go", (e) => e.hook === "aborted" && e.id === "idle-sse");
    // What was sent before then can still be read; then the connection is closed.
    events.resume();
    await closed;

    const socket = new WebSocket(`${idle.url.replace("http", "ws")}/v2/models/ticker/stream`);
    await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
    const code = new Promise<number>((resolve) => socket.once("close", (c: number) => resolve(c)));
    socket.send(
      JSON.stringify({ id: "idle-ws", parameters: { payload: 65536 }, inputs: [countInput(1_000_000)] }),
    );
    socket.pause();
    // Nothing read: the server's writes block, and after the idle time it closes the stream
    // (counted as an idle close), whose close frame the client reads once it reads again.
    const idleCloses = async () =>
      (await metricValue(idle.metricsUrl, "seqserve_limit_refusals_total", {
        limit: "http_stream_idle_timeout",
      })) ?? 0;
    await eventually("the idle close", async () => (await idleCloses()) > 0 || undefined);
    socket.resume();
    assert.equal(await code, 1001);
    await eventOf(
      repository.eventsFile,
      "WebSocket let go",
      (e) => e.hook === "aborted" && e.id === "idle-ws",
    );
  } finally {
    await idle.stop();
  }
});

test("decoupled responses a ModelStreamInfer client leaves unread count in its connection's budget: past it, the stream ends", {
  timeout: 30_000,
}, async () => {
  // The connection's budget is 4 MiB. Answers waiting to be written take at most 3.5 MiB
  // of it: reading stops at half, and then each of the 12 requests adds at most one
  // response of 128 KiB. But each request's handler also sends 2 responses ahead of the
  // client, which wait to be taken: 3 MiB more.
  const MiB = 1024 * 1024;
  const small = await startTestServer(repository.path, {
    security: securityOptions({ limits: { ...securityOptions().limits, maxBufferedResponseBytes: 4 * MiB } }),
  });
  const client = new TestClient(small.grpcPort);
  const metric = async (name: string, labels: Record<string, string> = {}) =>
    (await metricValue(small.metricsUrl, name, labels)) ?? 0;
  try {
    const stream = client.stream();
    stream.on("error", () => {});
    const ended = new Promise<StatusObject>((resolve) => stream.on("status", resolve));
    stream.pause();
    for (let i = 0; i < 12; i++) {
      stream.write({
        model_name: "ticker",
        id: `unread-${i}`,
        parameters: { payload: { int64_param: "131072" } },
        inputs: [{ name: "COUNT", datatype: "INT32", shape: [1] }],
        raw_input_contents: [Buffer.from(Int32Array.of(1000).buffer)],
      });
    }
    await eventually(
      "the stream's refusal",
      async () =>
        (await metric("seqserve_limit_refusals_total", { limit: "buffered_response_bytes" })) > 0 ||
        undefined,
    );
    const peak = await metric("seqserve_buffered_response_peak_bytes");
    assert.ok(peak <= 4 * MiB, `${peak} bytes held for the stream`);
    stream.resume();
    const status = await ended;
    assert.equal(status.code, grpcStatus.RESOURCE_EXHAUSTED, status.details);
    assert.match(status.details, /not reading its responses.*--max-buffered-response-bytes/);
    // The handler's requests are stopped, and what they held is given back.
    await eventOf(
      repository.eventsFile,
      "a request stopped",
      (e) => e.hook === "aborted" && e.id === "unread-0",
    );
    await eventually(
      "nothing held",
      async () => (await metric("seqserve_buffered_response_bytes")) === 0 || undefined,
    );
  } finally {
    client.close();
    await small.stop();
  }
});

test("decoupled responses a WebSocket client leaves unread count in its connection's budget: past it, the stream closes", {
  timeout: 30_000,
}, async () => {
  // As above: 12 requests in flight, each with 2 responses of 128 KiB waiting to be taken.
  const MiB = 1024 * 1024;
  const small = await startTestServer(repository.path, {
    security: securityOptions({ limits: { ...securityOptions().limits, maxBufferedResponseBytes: 4 * MiB } }),
  });
  try {
    const socket = new WebSocket(`${small.url.replace("http", "ws")}/v2/models/ticker/stream`);
    await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
    const closed = new Promise<[number, string]>((resolve) =>
      socket.once("close", (code: number, reason: Buffer) => resolve([code, reason.toString()])),
    );
    socket.pause();
    for (let i = 0; i < 12; i++) {
      socket.send(
        JSON.stringify({ id: `unread-ws-${i}`, parameters: { payload: 131072 }, inputs: [countInput(1000)] }),
      );
    }
    await eventually(
      "the stream's refusal",
      async () =>
        ((await metricValue(small.metricsUrl, "seqserve_limit_refusals_total", {
          limit: "buffered_response_bytes",
        })) ?? 0) > 0 || undefined,
    );
    // The server is closing the connection, and the client has not read its close yet:
    // the model's requests are stopped now, not left to run on with every response dropped.
    await eventOf(
      repository.eventsFile,
      "a request stopped",
      (e) => e.hook === "aborted" && String(e.id).startsWith("unread-ws-"),
    );
    socket.resume();
    const [code, reason] = await closed;
    assert.equal(code, 1008, reason);
    assert.match(reason, /not reading its answers/);
  } finally {
    await small.stop();
  }
});
