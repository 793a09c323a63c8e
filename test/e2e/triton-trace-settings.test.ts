import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { DEFAULT_TRACE_SETTINGS, type TraceSettings } from "../../src/config/trace-config.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { callError, TestClient } from "../grpc/support/grpc-harness.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { rowsOf, simpleConfig, simpleInputs, sum } from "./support/serving.ts";

// Triton's trace extension (`/v2[/models/{m}]/trace/setting`, gRPC TraceSetting), as
// tritonclient's get_trace_settings / update_trace_settings use it and Triton's own
// tests (qa/L0_trace) check it: the settings in Triton's names and forms, a model's
// setting following the global one where it sets nothing, null clearing a field back to
// its fallback, Triton's refusals, and the trace files written as the settings say while
// the server runs.

const MODELS = { simple: { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) } };

type Settings = Record<string, string | string[]>;

async function startTraced(tracing: Partial<TraceSettings>): Promise<TestServer> {
  return startTestServer(MODELS, {
    tracing: { ...DEFAULT_TRACE_SETTINGS, ...tracing },
    metricsPort: undefined,
  });
}

async function request(
  server: TestServer,
  model: string | undefined,
  body?: unknown,
): Promise<{ status: number; body: Settings }> {
  const path = model === undefined ? "/v2/trace/setting" : `/v2/models/${model}/trace/setting`;
  const response = await fetch(
    `${server.url}${path}`,
    body === undefined
      ? {}
      : { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) },
  );
  return { status: response.status, body: (await response.json()) as Settings };
}

async function settings(server: TestServer, model?: string, body?: unknown): Promise<Settings> {
  const answer = await request(server, model, body);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer.body;
}

async function infer(server: TestServer, times: number): Promise<void> {
  for (let i = 0; i < times; i++) {
    const a = rowsOf(i);
    const response = await fetch(`${server.url}/v2/models/simple/infer`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ inputs: simpleInputs(a, a) }),
    });
    const answer = (await response.json()) as { outputs: { name: string; data: number[] }[] };
    assert.equal(response.status, 200);
    assert.deepEqual(answer.outputs.find((o) => o.name === "OUTPUT0")?.data, sum(a, a));
  }
}

/** How many requests a Triton trace file holds. */
function tracesIn(path: string): number {
  const entries = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>[];
  return entries.filter((entry) => entry.model_name === "simple").length;
}

const folders: string[] = [];
function traceFile(): string {
  const folder = mkdtempSync(join(tmpdir(), "seqserve-traces-"));
  folders.push(folder);
  return join(folder, "trace.json");
}
after(() => {
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
});

describe("Triton's trace settings: reading, changing, clearing", () => {
  let server: TestServer;
  let grpc: TestClient;
  let file: string;
  let launch: Settings;
  before(async () => {
    file = traceFile();
    server = await startTraced({ timestamps: true, rate: 1, file });
    grpc = new TestClient(server.grpcPort);
    launch = {
      trace_file: file,
      trace_level: ["TIMESTAMPS"],
      trace_rate: "1",
      trace_count: "-1",
      log_frequency: "0",
      trace_mode: "triton",
    };
  });
  after(async () => {
    grpc.close();
    await server.stop();
  });

  // As Triton's trace_endpoint_test.py tearDown: back to the launch values.
  const clear = { trace_level: null, trace_rate: null, trace_count: null, log_frequency: null };
  const reset = async () => {
    await settings(server, "simple", clear);
    await settings(server, undefined, clear);
  };

  it("lists trace among the server's extensions", async () => {
    const metadata = (await (await fetch(`${server.url}/v2`)).json()) as { extensions: string[] };
    assert.ok(metadata.extensions.includes("trace"));
    assert.ok(metadata.extensions.includes("logging"));
  });

  it("HTTP: a model's settings are the global ones until changed; an unknown model is named", async () => {
    assert.deepEqual(await settings(server), launch);
    assert.deepEqual(await settings(server, "simple"), launch);
    const unknown = await request(server, "does-not-exist");
    assert.equal(unknown.status, 400);
    assert.deepEqual(unknown.body, { error: "Request for unknown model : does-not-exist" });
    const unknownUpdate = await request(server, "does-not-exist", { trace_rate: "5" });
    assert.deepEqual(unknownUpdate.body, { error: "Request for unknown model : does-not-exist" });
  });

  it("HTTP: the file cannot change; a global change reaches the model's unset fields", async () => {
    const fileChange = await request(server, "simple", { trace_file: "model.log" });
    assert.equal(fileChange.status, 501);
    assert.deepEqual(fileChange.body, {
      error: "trace file location can not be updated through network protocol",
    });
    assert.deepEqual(await settings(server, "simple"), launch);
    const both = { ...launch, trace_level: ["TIMESTAMPS", "TENSORS"] };
    assert.deepEqual(await settings(server, undefined, { trace_level: ["TIMESTAMPS", "TENSORS"] }), both);
    assert.deepEqual(await settings(server, "simple"), both);
    await reset();
  });

  it("HTTP: null clears a field, back to the launch value (global) or the global value (model)", async () => {
    await settings(server, "simple", { trace_rate: "12", log_frequency: "34" });
    await settings(server, undefined, { trace_rate: "56", trace_count: "78", trace_level: ["OFF"] });
    const global = { ...launch, trace_level: ["OFF"] };
    assert.deepEqual(await settings(server, undefined, { trace_rate: null, trace_count: null }), global);
    assert.deepEqual(await settings(server, "simple"), {
      ...global,
      trace_rate: "12",
      log_frequency: "34",
    });
    assert.deepEqual(await settings(server, "simple", { trace_rate: null, trace_level: null }), {
      ...global,
      log_frequency: "34",
    });
    assert.deepEqual(await settings(server), global);
    await reset();
    assert.deepEqual(await settings(server, "simple"), launch);
  });

  it("gRPC TraceSetting: the same settings as lists of strings, changed and cleared the same way", async () => {
    type Answer = { settings: Record<string, { value: string[] }> };
    const asLists = (values: Settings) =>
      Object.fromEntries(
        Object.entries(values).map(([name, value]) => [
          name,
          { value: Array.isArray(value) ? value : [value] },
        ]),
      );
    const read = await grpc.unary<Answer>("TraceSetting", { model_name: "simple" });
    assert.deepEqual(read.settings, asLists(launch));
    const changed = await grpc.unary<Answer>("TraceSetting", {
      model_name: "simple",
      settings: { trace_rate: { value: ["12"] }, log_frequency: { value: ["34"] } },
    });
    assert.deepEqual(changed.settings, asLists({ ...launch, trace_rate: "12", log_frequency: "34" }));
    // An empty list clears, as JSON null does.
    const cleared = await grpc.unary<Answer>("TraceSetting", {
      model_name: "simple",
      settings: { trace_rate: { value: [] } },
    });
    assert.deepEqual(cleared.settings, asLists({ ...launch, log_frequency: "34" }));
    assert.deepEqual((await grpc.unary<Answer>("TraceSetting", {})).settings, asLists(launch));
    const unknown = await callError(grpc.unary("TraceSetting", { model_name: "does-not-exist" }));
    assert.equal(unknown.code, status.INVALID_ARGUMENT);
    assert.equal(unknown.details, "Request for unknown model : does-not-exist");
    const twoRates = await callError(
      grpc.unary("TraceSetting", { settings: { trace_rate: { value: ["1", "2"] } } }),
    );
    assert.equal(twoRates.code, status.INVALID_ARGUMENT);
    assert.equal(twoRates.details, "expect only 1 value for 'trace_rate'");
    const fileChange = await callError(
      grpc.unary("TraceSetting", { settings: { trace_file: { value: ["x"] } } }),
    );
    assert.equal(fileChange.code, status.UNIMPLEMENTED);
    await reset();
  });

  it("refuses what Triton refuses, naming the setting, and changes nothing", async () => {
    const refusals: [unknown, string][] = [
      [{ trace_level: ["OFF", "TIMESTAMPS"] }, "Expect only one trace level 'OFF' is specified"],
      [{ trace_level: "TIMESTAMPS" }, "Unable to parse 'trace_level': expected an array of strings"],
      [{ trace_rate: 5 }, "Unable to parse 'trace_rate': expected a string"],
      [{ trace_rate: "abc" }, "Unable to parse 'trace_rate', got: abc"],
      [
        { trace_rate: "10000000000" },
        "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: 10000000000",
      ],
      [
        { trace_count: "10000000000" },
        "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], got: 10000000000",
      ],
      [
        { log_frequency: "10000000000" },
        "Unable to parse 'log_frequency', value is out of range [ 0, 4294967295 ], got: 10000000000",
      ],
      [{ trace_count: "-2" }, "Unable to parse 'trace_count'. Expecting value >= -1, got: -2"],
      [{ trace_rate: "0" }, "Attempting to set invalid trace setting :sample rate must be non-zero"],
    ];
    for (const [body, error] of refusals) {
      for (const model of [undefined, "simple"]) {
        const answer = await request(server, model, body);
        assert.equal(answer.status, 400, JSON.stringify(body));
        assert.deepEqual(answer.body, { error });
      }
    }
    assert.deepEqual(await settings(server), launch);
    assert.deepEqual(await settings(server, "simple"), launch);
    // A rate of 0 is allowed where it turns tracing off, and names Triton does not have are ignored.
    assert.deepEqual(await settings(server, undefined, { trace_rate: "0", trace_level: ["OFF"], other: 1 }), {
      ...launch,
      trace_rate: "0",
      trace_level: ["OFF"],
    });
    // std::stoi's reading: leading digits count.
    assert.equal((await settings(server, undefined, { trace_rate: " 7x" })).trace_rate, "7");
    await reset();
  });

  it("refuses a setting that would trace with no count left; an empty level list over HTTP sets nothing", async () => {
    const none = await request(server, undefined, { trace_count: "0" });
    assert.equal(none.status, 400);
    assert.deepEqual(none.body, {
      error: "Attempting to set invalid trace setting :trace_count is 0, no traces are left to take",
    });
    // Off, a count of 0 is allowed.
    assert.equal(
      (await settings(server, "simple", { trace_count: "0", trace_level: ["OFF"] })).trace_count,
      "0",
    );
    await settings(server, undefined, { trace_level: ["TIMESTAMPS", "TENSORS"] });
    assert.deepEqual((await settings(server, undefined, { trace_level: [] })).trace_level, [
      "TIMESTAMPS",
      "TENSORS",
    ]);
    await reset();
  });
});

describe("Triton's trace settings: what the trace files hold as they change", () => {
  it("tracing turned on while serving writes the trace file (launched with level OFF)", async () => {
    const file = traceFile();
    const server = await startTraced({ rate: 1, file });
    try {
      await infer(server, 2);
      const on = await settings(server, undefined, { trace_level: ["TIMESTAMPS"] });
      assert.deepEqual([on.trace_level, on.trace_rate, on.trace_file], [["TIMESTAMPS"], "1", file]);
      await infer(server, 5);
    } finally {
      await server.stop();
    }
    assert.equal(tracesIn(file), 5);
  });

  it("a model's log frequency writes indexed files; turned off, its requests are not traced", async () => {
    const file = traceFile();
    const server = await startTraced({ timestamps: true, rate: 6, file });
    try {
      const model = await settings(server, "simple", { log_frequency: "2" });
      assert.deepEqual([model.trace_rate, model.log_frequency], ["6", "2"]);
      await infer(server, 20);
    } finally {
      await server.stop();
    }
    // 20 requests, one in 6 traced: two in the first file, the third in the next at stop.
    assert.deepEqual([tracesIn(`${file}.0`), tracesIn(`${file}.1`), existsSync(file)], [2, 1, false]);

    const second = traceFile();
    const again = await startTraced({ timestamps: true, rate: 6, file: second });
    try {
      await settings(again, "simple", { trace_rate: "1" });
      const off = await settings(again, "simple", { trace_level: ["OFF"] });
      assert.deepEqual([off.trace_level, off.trace_rate], [["OFF"], "1"]);
      await infer(again, 10);
      const back = await settings(again, "simple", { trace_level: null });
      assert.deepEqual([back.trace_level, back.trace_rate], [["TIMESTAMPS"], "1"]);
      await infer(again, 5);
    } finally {
      await again.stop();
    }
    assert.equal(tracesIn(second), 5);
  });

  it("a count takes that many traces into an indexed file, then stops; the count left is shown", async () => {
    const file = traceFile();
    const server = await startTraced({ timestamps: true, rate: 1, file });
    try {
      await infer(server, 4);
      assert.equal((await settings(server, undefined, { trace_count: "5" })).trace_count, "5");
      await infer(server, 10);
      assert.equal((await settings(server, "simple")).trace_count, "0");
      assert.equal(tracesIn(`${file}.0`), 5);
    } finally {
      await server.stop();
    }
    assert.equal(tracesIn(file), 4);
  });

  it("once the global count ran out, a model change that would trace under it is refused", async () => {
    const server = await startTraced({ timestamps: true, rate: 1, file: traceFile() });
    try {
      await settings(server, undefined, { trace_count: "1" });
      await infer(server, 2);
      assert.equal((await request(server, "simple", { log_frequency: "1" })).status, 400);
      // A model setting of its own with a count it has left is fine.
      assert.equal((await settings(server, "simple", { trace_count: "3" })).trace_count, "3");
    } finally {
      await server.stop();
    }
  });

  it("a trace file that cannot be written is reported and dropped; the server goes on", async () => {
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => uncaught.push(error);
    process.on("uncaughtException", onUncaught);
    // The trace file's path is a folder: opening it fails, as a full disk or a permission would.
    const folder = traceFile().replace(/trace\.json$/, "");
    const server = await startTraced({ rate: 1, file: folder });
    try {
      assert.equal((await request(server, undefined, { trace_level: ["TIMESTAMPS"] })).status, 200);
      await infer(server, 3);
    } finally {
      await server.stop();
      process.off("uncaughtException", onUncaught);
    }
    assert.deepEqual(uncaught.map(String), []);
  });

  it("with a log frequency, a part whose file cannot be opened gives way to the next file", async () => {
    const file = traceFile();
    // `<file>.0` is a folder: the first part fails, as a full disk or a permission would.
    mkdirSync(`${file}.0`);
    const server = await startTraced({ timestamps: true, rate: 1, file });
    try {
      await settings(server, "simple", { log_frequency: "2" });
      await infer(server, 4);
    } finally {
      await server.stop();
    }
    // The first two traces are lost with the failed part; the next two are in the next file.
    assert.equal(tracesIn(`${file}.1`), 2);
  });

  it("a server launched without a trace file refuses to trace, as Triton does", async () => {
    const server = await startTraced({ rate: 1 });
    try {
      const answer = await request(server, "simple", { trace_level: ["TIMESTAMPS"] });
      assert.equal(answer.status, 400);
      assert.deepEqual(answer.body, {
        error: "Attempting to set invalid trace setting :trace file name is not given",
      });
      assert.deepEqual((await settings(server)).trace_file, "");
    } finally {
      await server.stop();
    }
  });
});
