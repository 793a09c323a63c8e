import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { pino } from "pino";
import { postJson } from "../support/http-client.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import {
  eventOf,
  eventually,
  type HandlerRepository,
  handlerRepository,
  RECORDER,
  sequencesOf,
} from "./support/handler-kit.ts";

// A handler's failures stay its own: an Error it returns fails only that request, an
// exception from execute() only that batch, with the message (never the stack) to the
// client and the stack in the log; a request it does not answer in handler_timeout_ms
// fails (and the handler's signal tells it); a handler stuck in a loop is ended and
// replaced; a worker that dies is replaced, and the sequences it held end with the reason
// "instance_failed" instead of hanging. The server goes on serving throughout.

const FAULTY = `${RECORDER}
export default {
  initialize(context: any) {
    eventsFile = context.model.parameters.events_file;
    log = context.log;
  },
  async execute(requests: any[]) {
    if (requests.some((r) => text(r) === "throw-all")) throw new Error("execute blew up");
    return Promise.all(requests.map(async (r) => {
      const mode = text(r);
      if (mode === "throw") return new Error("the handler refused this one");
      if (mode === "hang") {
        r.signal.addEventListener("abort", () => record({ hook: "aborted", message: r.signal.reason.message }));
        return new Promise(() => {});
      }
      if (mode === "loop") for (;;) {}
      if (mode === "log")
        log.info("the handler logs", { model: "its own", instance: "its own", level: "custom", time: 5, msg: "its own", detail: 7 });
      if (mode === "log-uncopyable")
        log.info("a line with a client", { client: { name: "backend", call: function callBackend() { return "SOURCE_TEXT"; } } });
      if (mode === "state-function") r.sequence.state.set("client", { call: function callBackend() { return "SOURCE_TEXT"; } });
      if (mode === "log-odd") {
        log.info({ call: function secret() { return "SOURCE_TEXT"; } });
        log.info("a line with a field that throws", { get boom() { throw new Error("getter boom"); } });
      }
      // A change of the state once the request is complete (from a timer): not kept.
      if (mode === "late-state") setTimeout(() => r.sequence.state.set("late", 1), 20);
      if (mode === "exit") process.exit(3);
      if (mode === "exit-soon") {
        record({ hook: "exiting" });
        await new Promise((resolve) => setTimeout(resolve, 300));
        process.exit(3);
      }
      // Errors nobody catches: a promise left rejected, a timer that throws.
      if (mode === "floating-rejection") Promise.reject(new Error("floating rejection"));
      if (mode === "timer-throw") setTimeout(() => { throw new Error("thrown from a timer"); }, 10);
      if (mode === "timer-throw-object") setTimeout(() => { throw { thrown: "an object from a timer" }; }, 10);
      if (mode === "keep") r.sequence.state.set("kept", { n: 7 });
      // Reads its state after a while, when a batchmate's client may have left meanwhile.
      if (mode === "sleep-read") {
        await new Promise((resolve) => setTimeout(resolve, 300));
        const kept = r.sequence.state.get("kept");
        return { outputs: { ECHO: { datatype: "BYTES", shape: [1, 1], data: [String(kept?.n) + "/" + requests.length] } } };
      }
      if (mode.startsWith("count")) return count(r, mode);
      const outputs = { ECHO: { datatype: "BYTES", shape: [1, 1], data: [mode] } };
      if (mode === "function-parameter") return { outputs, parameters: { f: () => 1 } };
      if (mode === "null") return null;
      if (mode === "outputs-array") return { outputs: [{ name: "ECHO", ...outputs.ECHO }] };
      if (mode === "throw-object") throw { code: "INVALID_ARG", message: "a plain object thrown" };
      return { outputs };
    }));
  },
};
// Tensors of the sequence's state changed in place, without set(): a count and a letter.
function count(r: any, mode: string) {
  const state = r.sequence.state;
  if (!state.has("count")) {
    state.set("count", { datatype: "INT32", shape: [1], data: Int32Array.of(0) });
    state.set("letter", { datatype: "BYTES", shape: [1], data: [new TextEncoder().encode("a")] });
  }
  const count = state.get("count");
  const letter = state.get("letter");
  count.data[0] += 1;
  letter.data[0][0] += 1;
  if (mode === "count-then-throw") return new Error("refused after counting");
  const seen = String(count.data[0]) + new TextDecoder().decode(letter.data[0]);
  return { outputs: { ECHO: { datatype: "BYTES", shape: [1, 1], data: [seen] } } };
}
let log: any;
function text(r: any): string {
  return new TextDecoder().decode(r.inputs.MODE.data[0]);
}
`;

function config(sequences: boolean | "direct", eventsFile: string, decoupled = false): string {
  const batching =
    sequences === "direct"
      ? "sequence_batching { direct { } }"
      : sequences
        ? "sequence_batching { oldest { max_candidate_sequences: 8 } }"
        : "dynamic_batching { }";
  return `
backend: "typescript"
max_batch_size: ${sequences === "direct" ? 2 : 8}
input [ { name: "MODE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "ECHO" data_type: TYPE_STRING dims: [ 1 ] } ]
${batching}
${decoupled ? "model_transaction_policy { decoupled: true }" : ""}
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "handler_timeout_ms" value { string_value: "400" } }
parameters { key: "events_file" value { string_value: "${eventsFile}" } }
`;
}

let repository: HandlerRepository;
let server: TestServer;
const logLines: string[] = [];

before(async () => {
  repository = handlerRepository((eventsFile) => ({
    faulty: { config: config(false, eventsFile), files: { "1/model.ts": FAULTY } },
    faulty_seq: { config: config(true, eventsFile), files: { "1/model.ts": FAULTY } },
    // Direct: one batch in flight, so a sequence's first request can wait while another runs.
    faulty_direct: { config: config("direct", eventsFile), files: { "1/model.ts": FAULTY } },
    // Decoupled: execute()'s responses are sent as each request's final response.
    faulty_stream: { config: config(true, eventsFile, true), files: { "1/model.ts": FAULTY } },
  }));
  const logger = pino({ level: "info" }, { write: (line: string) => logLines.push(line) });
  server = await startTestServer(repository.path, {}, logger);
});

after(async () => {
  await server.stop();
  repository.remove();
});

function call(model: string, mode: string, sequence?: { id: number; start?: boolean; end?: boolean }) {
  return postJson(`${server.url}/v2/models/${model}/infer`, {
    ...(sequence === undefined
      ? {}
      : {
          parameters: {
            sequence_id: sequence.id,
            sequence_start: sequence.start ?? false,
            sequence_end: sequence.end ?? false,
          },
        }),
    inputs: [{ name: "MODE", datatype: "BYTES", shape: [1, 1], data: [mode] }],
  });
}

const echoed = (answer: Awaited<ReturnType<typeof call>>): unknown =>
  (answer.body.outputs as { data: unknown[] }[] | undefined)?.[0]?.data[0];

/** A decoupled request over Server-Sent Events: its status and its events. */
async function callStream(
  model: string,
  mode: string,
  sequence: { id: number; start?: boolean },
): Promise<{ status: number; events: Record<string, unknown>[] }> {
  const response = await fetch(`${server.url}/v2/models/${model}/generate_stream`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ MODE: mode, sequence_id: sequence.id, sequence_start: sequence.start ?? false }),
  });
  const text = await response.text();
  const events = response.headers.get("content-type")?.startsWith("text/event-stream")
    ? text
        .split("\n\n")
        .filter((chunk) => chunk.startsWith("data: "))
        .map((chunk) => JSON.parse(chunk.slice(6)) as Record<string, unknown>)
    : [JSON.parse(text) as Record<string, unknown>];
  return { status: response.status, events };
}

test("an Error returned for one request fails only it, with its message and not its stack", async () => {
  const [bad, good] = await Promise.all([call("faulty", "throw"), call("faulty", "fine")]);
  assert.equal(bad.status, 500);
  assert.deepEqual(bad.body, { error: "the handler refused this one" });
  assert.equal(good.status, 200);
  assert.equal(echoed(good), "fine");
  assert.ok(logLines.some((line) => line.includes("the handler refused this one") && line.includes("stack")));
  // Over /generate_stream, a model of one answer that failed in its run is that failure's
  // event, with its status, as Triton answers any failure after the model took the request.
  const streamed = await fetch(`${server.url}/v2/models/faulty/generate_stream`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ MODE: "throw" }),
  });
  assert.deepEqual(
    [streamed.status, streamed.headers.get("content-type"), await streamed.text()],
    [500, "text/event-stream; charset=utf-8", 'data: {"error":"the handler refused this one"}\n\n'],
  );
});

test("a handler's log lines have each key once, the handler's fields of the line's own names renamed", async () => {
  assert.equal(echoed(await call("faulty", "log")), "log");
  const line = logLines.find((l) => l.includes("the handler logs"));
  assert.ok(line !== undefined);
  // Log stores refuse a line with a key twice: the line's own keys are the server's, and
  // the handler's fields of those names are kept as handler_<key>.
  for (const key of ["model", "instance", "level", "time", "msg"])
    assert.equal(line.match(new RegExp(`"${key}":`, "g"))?.length, 1, `${key} in ${line}`);
  const fields = JSON.parse(line);
  assert.deepEqual(
    [fields.model, fields.level, fields.msg, fields.handler_model, fields.handler_level, fields.handler_time],
    ["faulty", 30, "the handler logs", "its own", "custom", 5],
  );
  assert.deepEqual([fields.detail, fields.handler], [7, true]);
  for (const handlerLine of logLines.filter((l) => l.includes('"handler":true')))
    assert.equal(handlerLine.match(/"model":/g)?.length, 1, handlerLine);
});

test("an exception from execute() fails its batch only; the stack is in the log", async () => {
  const failed = await call("faulty", "throw-all");
  assert.equal(failed.status, 500);
  assert.deepEqual(failed.body, { error: "execute blew up" });
  assert.ok(
    logLines.some(
      (line) => line.includes("execute blew up") && /"stack":"Error: execute blew up\\n\s+at /.test(line),
    ),
  );
  assert.equal(echoed(await call("faulty", "after")), "after");
});

test("a response parameter that cannot be sent fails only its request, naming the parameter", async () => {
  const refused =
    /^response parameter 'f' of a request is a function: parameters are strings, numbers, bigints or booleans$/;
  assert.equal(echoed(await call("faulty_seq", "a1", { id: 11, start: true })), "a1");
  assert.equal(echoed(await call("faulty_seq", "b1", { id: 12, start: true })), "b1");
  const bad = await call("faulty_seq", "function-parameter", { id: 11 });
  assert.equal(bad.status, 500);
  assert.match(bad.body.error as string, refused);
  // The worker lives on, and with it both sequences.
  assert.equal(echoed(await call("faulty_seq", "b2", { id: 12 })), "b2");
  assert.equal(echoed(await call("faulty_seq", "a2", { id: 11, end: true })), "a2");

  // A decoupled handler's response returned from execute() is sent as the final one.
  const started = await callStream("faulty_stream", "c1", { id: 21, start: true });
  assert.deepEqual(
    started.events.map((e) => e.ECHO),
    ["c1"],
  );
  const streamed = await callStream("faulty_stream", "function-parameter", { id: 21 });
  assert.equal(streamed.status, 500);
  assert.deepEqual(streamed.events.length, 1);
  assert.match(streamed.events[0]!.error as string, refused);
  const next = await callStream("faulty_stream", "c2", { id: 21 });
  assert.deepEqual(
    next.events.map((e) => e.ECHO),
    ["c2"],
  );
  assert.ok(!logLines.some((line) => line.includes("stopped unexpectedly")));
});

test("what cannot be copied to another thread is named, never quoted: a log line keeps it described, a state entry fails its request", async () => {
  assert.equal(echoed(await call("faulty", "log-uncopyable")), "log-uncopyable");
  const line = logLines.find((l) => l.includes("a line with a client"));
  assert.ok(line !== undefined);
  assert.deepEqual(JSON.parse(line).client, { name: "backend", call: "[a function (callBackend)]" });
  assert.equal(echoed(await call("faulty_seq", "s1", { id: 31, start: true })), "s1");
  const bad = await call("faulty_seq", "state-function", { id: 31 });
  assert.equal(bad.status, 500);
  assert.deepEqual(bad.body, {
    error:
      "state 'client' cannot be kept: it holds a function (callBackend) at call, which cannot be copied to another thread (functions, promises, symbols and weak references cannot)",
  });
  assert.equal(echoed(await call("faulty_seq", "s2", { id: 31, end: true })), "s2");
  // V8's own words quote the function's source: nowhere.
  assert.ok(!logLines.some((l) => l.includes("SOURCE_TEXT")));
});

test("a log call with a message that is not text, or fields that cannot be read, fails nothing", async () => {
  assert.equal(echoed(await call("faulty", "log-odd")), "log-odd");
  assert.ok(logLines.some((l) => JSON.parse(l).msg === '{"call":"[a function (secret)]"}'));
  const line = logLines.find((l) => l.includes("a line with a field that throws"));
  assert.ok(line !== undefined);
  assert.equal(JSON.parse(line).fields, "[could not be read]");
  assert.ok(!logLines.some((l) => l.includes("SOURCE_TEXT")));
});

test("a state change after its request is complete is not kept, and ends neither the worker nor any sequence", async () => {
  assert.equal(echoed(await call("faulty_seq", "l1", { id: 41, start: true })), "l1");
  assert.equal(echoed(await call("faulty_seq", "o1", { id: 42, start: true })), "o1");
  assert.equal(echoed(await call("faulty_seq", "late-state", { id: 41 })), "late-state");
  await eventually("the warning of the late change", () =>
    logLines.find((l) =>
      l.includes("a change of its sequence's state after that (state 'late') is not kept"),
    ),
  );
  assert.equal(echoed(await call("faulty_seq", "l2", { id: 41, end: true })), "l2");
  assert.equal(echoed(await call("faulty_seq", "o2", { id: 42, end: true })), "o2");
  assert.ok(!logLines.some((line) => line.includes("stopped unexpectedly")));
});

test("a request whose client leaves mid-run gives its state back as a copy: its batchmates, reading theirs after, are served", async () => {
  for (const id of [51, 52, 53])
    assert.equal(echoed(await call("faulty_seq", "keep", { id, start: true })), "keep");
  // 53 holds the one instance while 51 and 52 queue: they then run as one batch.
  const holder = call("faulty_seq", "sleep-read", { id: 53 });
  await new Promise((resolve) => setTimeout(resolve, 50));
  const leaving = new AbortController();
  const left = fetch(`${server.url}/v2/models/faulty_seq/infer`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      parameters: { sequence_id: 51 },
      inputs: [{ name: "MODE", datatype: "BYTES", shape: [1, 1], data: ["sleep-read"] }],
    }),
    signal: leaving.signal,
  }).catch((error: Error) => error);
  const batchmate = call("faulty_seq", "sleep-read", { id: 52 });
  assert.equal(echoed(await holder), "7/1");
  // 51 and 52 run now: 51's client leaves while the handler sleeps, before it reads.
  await new Promise((resolve) => setTimeout(resolve, 100));
  leaving.abort();
  assert.ok((await left) instanceof Error);
  const served = await batchmate;
  assert.equal(served.status, 200, JSON.stringify(served.body));
  assert.equal(echoed(served), "7/2");
  // 51 itself ended with its cancelled request, as Triton ends such a sequence.
  const after = await call("faulty_seq", "sleep-read", { id: 51 });
  assert.match(after.body.error as string, /must specify the START flag/);
  assert.equal(echoed(await call("faulty_seq", "sleep-read", { id: 52 })), "7/1");
  for (const id of [52, 53]) await call("faulty_seq", "x", { id, end: true });
  assert.ok(!logLines.some((line) => line.includes("stopped unexpectedly")));
});

test("a handler that returns null for a request is said to have given no response", async () => {
  const none = await call("faulty", "null");
  assert.equal(none.status, 500);
  assert.deepEqual(none.body, { error: "the handler gave no response to a request" });
  const streamed = await callStream("faulty_stream", "null", { id: 41, start: true });
  assert.equal(streamed.status, 500);
  assert.deepEqual(streamed.events, [{ error: "the handler gave no response to a request" }]);
});

test("outputs given as an array, and a plain object thrown, are answered for what they are", async () => {
  const array = await call("faulty", "outputs-array");
  assert.equal(array.status, 500);
  assert.deepEqual(array.body, {
    error: "the 'outputs' of the response is an array: expected an object of output name: tensor",
  });
  const thrown = await call("faulty", "throw-object");
  assert.equal(thrown.status, 400);
  assert.deepEqual(thrown.body, { error: "a plain object thrown" });
});

test("a request that fails leaves the state as it was, tensors changed in place included", async () => {
  assert.equal(echoed(await call("faulty_seq", "count", { id: 31, start: true })), "1b");
  for (let i = 0; i < 2; i++) {
    const refused = await call("faulty_seq", "count-then-throw", { id: 31 });
    assert.deepEqual(refused.body, { error: "refused after counting" });
  }
  assert.equal(echoed(await call("faulty_seq", "count", { id: 31 })), "2c");
  assert.equal(echoed(await call("faulty_seq", "count", { id: 31, end: true })), "3d");
});

test("a request not answered within handler_timeout_ms fails, and the handler's signal says so", async () => {
  const hung = await call("faulty", "hang");
  assert.equal(hung.status, 503);
  assert.match(
    hung.body.error as string,
    /did not answer a request within 400 ms \(its handler_timeout_ms\)/,
  );
  const aborted = await eventOf(repository.eventsFile, "the handler told", (e) => e.hook === "aborted");
  assert.match(aborted.message as string, /did not finish within handler_timeout_ms/);
  // The instance is free again: execute() never returned, but its request is done.
  assert.equal(echoed(await call("faulty", "next")), "next");
});

test("a handler stuck in a loop is ended and replaced; later requests are served", async () => {
  const stuck = await call("faulty", "loop");
  assert.equal(stuck.status, 503);
  assert.match(stuck.body.error as string, /did not answer a request/);
  const next = await eventually("the replaced instance to answer", async () => {
    const answer = await call("faulty", "again");
    return answer.status === 200 ? answer : undefined;
  });
  assert.equal(echoed(next), "again");
  assert.ok(logLines.some((line) => line.includes("handler worker stopped; restarting it")));
});

test("an unhandled rejection or an exception from a timer in handler code is logged with its stack; the instance and its sequences go on", async () => {
  assert.equal(echoed(await call("faulty_seq", "f1", { id: 61, start: true })), "f1");
  assert.equal(echoed(await call("faulty_seq", "g1", { id: 62, start: true })), "g1");
  for (const [mode, message, kind] of [
    ["floating-rejection", "floating rejection", "unhandled rejection"],
    ["timer-throw", "thrown from a timer", "uncaught exception"],
  ] as const) {
    assert.equal(echoed(await call("faulty_seq", mode, { id: 61 })), mode);
    const line = await eventually(`the log of the ${kind}`, () =>
      logLines.find((l) => l.includes(message) && l.includes(kind)),
    );
    const fields = JSON.parse(line);
    assert.equal(fields.level, 50);
    assert.equal(fields.model, "faulty_seq");
    assert.equal(
      fields.msg,
      `an ${kind} in the handler code of model 'faulty_seq': ${message}; the instance goes on`,
    );
    // The stack, on the lines of model.ts (source-mapped, as for a failed execute()).
    assert.match(fields.stack, new RegExp(`^Error: ${message}\\n\\s+at .*model\\.ts:\\d+:\\d+`));
    // Another client's sequence on the same instance goes on, and so does this one.
    assert.equal(echoed(await call("faulty_seq", "g", { id: 62 })), "g");
  }
  // Something else than an Error, thrown so, is shown as JSON.
  assert.equal(echoed(await call("faulty_seq", "timer-throw-object", { id: 61 })), "timer-throw-object");
  await eventually("the log of the object thrown", () =>
    logLines.find((l) =>
      JSON.parse(l).msg?.endsWith(': {"thrown":"an object from a timer"}; the instance goes on'),
    ),
  );
  assert.equal(echoed(await call("faulty_seq", "f2", { id: 61, end: true })), "f2");
  assert.equal(echoed(await call("faulty_seq", "g2", { id: 62, end: true })), "g2");
  const restarts = logLines.filter(
    (l) => l.includes("handler worker stopped") && JSON.parse(l).model === "faulty_seq",
  );
  assert.deepEqual(restarts, []);
});

test("a worker that dies is restarted; the sequences it held end ('instance_failed') and say why", async () => {
  assert.equal(echoed(await call("faulty_seq", "a1", { id: 1, start: true })), "a1");
  assert.equal(echoed(await call("faulty_seq", "b1", { id: 2, start: true })), "b1");
  assert.ok((await sequencesOf(server.url, "faulty_seq")).summary.state_bytes >= 0);

  const died = await call("faulty_seq", "exit", { id: 1 });
  assert.equal(died.status, 500);
  assert.match(
    died.body.error as string,
    /model instance 'faulty_seq_0' stopped unexpectedly \(exit code 3\)/,
  );

  const listing = await eventually("both sequences ended", async () => {
    const seen = await sequencesOf(server.url, "faulty_seq");
    return seen.summary.ended.instance_failed === 2 ? seen : undefined;
  });
  assert.deepEqual(listing.sequences, []);
  assert.equal(listing.summary.state_bytes, 0);
  // The other sequence's next request is told its sequence is gone and why, rather than
  // hang or read as its client's mistake.
  const gone = await call("faulty_seq", "b2", { id: 2 });
  assert.equal(gone.status, 400);
  assert.equal(
    gone.body.error,
    "inference request for sequence 2 to model 'faulty_seq' must specify the START flag on the first request of the sequence: it has ended (reason 'instance_failed')",
  );
  // The instance was replaced: new sequences are served.
  const fresh = await eventually("the restarted instance", async () => {
    const answer = await call("faulty_seq", "c1", { id: 3, start: true, end: true });
    return answer.status === 200 ? answer : undefined;
  });
  assert.equal(echoed(fresh), "c1");
});

test("a worker that dies ends only the sequences its model code had seen: one whose START still waited is served by the new worker", async () => {
  assert.equal(echoed(await call("faulty_direct", "a1", { id: 70, start: true })), "a1");
  const dying = call("faulty_direct", "exit-soon", { id: 70 });
  await eventOf(repository.eventsFile, "the step that ends its worker", (e) => e.hook === "exiting");
  // The instance's one batch in flight is that step's: this START waits for it.
  const waiting = call("faulty_direct", "b1", { id: 71, start: true });
  // Failed with its worker (500), or timed out first on a loaded machine (503).
  assert.notEqual((await dying).status, 200);
  const started = await waiting;
  assert.equal(started.status, 200, JSON.stringify(started.body));
  assert.equal(echoed(started), "b1");
  assert.equal(echoed(await call("faulty_direct", "b2", { id: 71, end: true })), "b2");
  const gone = await call("faulty_direct", "a2", { id: 70 });
  assert.match(gone.body.error as string, /it has ended \(reason 'instance_failed'\)/);
});
