import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { pino } from "pino";
import WebSocket from "ws";
import { onnxBackend } from "../../src/app/onnx-backend.ts";
import { type RunningServer, startServer } from "../../src/app/server.ts";
import { DEFAULT_BACKEND_SETTINGS } from "../../src/config/backend-config.ts";
import { DEFAULT_SERVER_OPTIONS } from "../../src/config/server-options.ts";
import type { ModelBackend } from "../../src/core/backend.ts";
import { unavailable } from "../../src/core/errors.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { accumulatorConfig, accumulatorModel } from "../../tools/onnx/sequence-models.ts";
import { addSubModel, identityModel } from "../../tools/onnx/test-models.ts";
import { getJson, type HttpAnswer, infer, outputData, postJson } from "../support/http-client.ts";
import { tempRepository } from "../support/model-repository.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import {
  errorOf,
  plusVersionModel,
  rowsOf,
  simpleConfig,
  simpleInputs,
  sum,
  waitUntil,
} from "./support/serving.ts";

// The model repository's lifecycle through the real server: version policies, models that
// fail to load, explicit model control (index, load with a config override, unload) and
// poll mode following the repository folder.

interface IndexEntry {
  readonly name: string;
  readonly version?: string;
  readonly state?: string;
  readonly reason?: string;
}

const index = async (url: string, body: unknown = {}): Promise<IndexEntry[]> => {
  const answer = await postJson(`${url}/v2/repository/index`, body);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer.body as unknown as IndexEntry[];
};

const THREE_VERSIONS = { 1: plusVersionModel(1), 2: plusVersionModel(2), 3: plusVersionModel(3) };
const input = (v: number) => [{ name: "INPUT0", datatype: "INT32", shape: [1, 1], data: [v] }];
const status = async (url: string): Promise<number> => (await fetch(url)).status;

describe("version policies", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer({
      latest: { onnx: THREE_VERSIONS },
      latest_two: { config: "version_policy: { latest: { num_versions: 2 } }", onnx: THREE_VERSIONS },
      all: { config: "version_policy: { all: { } }", onnx: THREE_VERSIONS },
      specific: { config: "version_policy: { specific: { versions: [ 1, 3 ] } }", onnx: THREE_VERSIONS },
    });
  });
  after(() => server.stop());

  const SERVED: Readonly<Record<string, readonly string[]>> = {
    latest: ["3"],
    latest_two: ["2", "3"],
    all: ["1", "2", "3"],
    specific: ["1", "3"],
  };

  for (const [model, versions] of Object.entries(SERVED)) {
    it(`${model}: serves versions ${versions.join(", ")} and answers for the others as Triton does`, async () => {
      const metadata = await getJson(`${server.url}/v2/models/${model}`);
      assert.deepEqual(metadata.body.versions, versions);
      for (const version of ["1", "2", "3"]) {
        const served = versions.includes(version);
        const base = `${server.url}/v2/models/${model}/versions/${version}`;
        assert.equal(await status(`${base}/ready`), served ? 200 : 400, `${model} v${version} ready`);
        const answer = await infer(server.url, `${model}/versions/${version}`, input(100));
        if (served) {
          assert.deepEqual(outputData(answer, "OUTPUT0"), [100 + Number(version)], `${model} v${version}`);
          assert.equal(answer.body.model_version, version);
          const versionMetadata = await getJson(base);
          assert.equal(versionMetadata.status, 200);
          // As Triton: one version's metadata lists that version.
          assert.deepEqual(versionMetadata.body.versions, [version]);
        } else {
          assert.equal(answer.status, 404);
          assert.equal(
            errorOf(answer),
            `Request for unknown model: '${model}' version ${version} is not found`,
          );
          assert.equal((await getJson(base)).status, 404);
          assert.equal((await getJson(`${base}/config`)).status, 404);
        }
      }
      // Without a version: the highest served one.
      const latest = await infer(server.url, model, input(100));
      assert.deepEqual(outputData(latest, "OUTPUT0"), [103]);
      assert.equal(latest.body.model_version, "3");
    });
  }

  it("the index lists every served version as READY", async () => {
    const entries = await index(server.url);
    assert.deepEqual(
      entries.map((e) => `${e.name}/${e.version}/${e.state}`),
      Object.entries(SERVED)
        .sort(([a], [b]) => a.localeCompare(b))
        .flatMap(([model, versions]) => versions.map((v) => `${model}/${v}/READY`)),
    );
  });

  it("statistics are kept per version", async () => {
    await infer(server.url, "all/versions/2", input(1));
    const stats = (await getJson(`${server.url}/v2/models/all/stats`)).body.model_stats as {
      version: string;
      inference_stats: { success: { count: number } };
    }[];
    const counts = Object.fromEntries(stats.map((s) => [s.version, s.inference_stats.success.count]));
    // The policy test above ran one request per served version, and this one another on v2;
    // v3 also answered the request without a version.
    assert.deepEqual(counts, { "1": 1, "2": 2, "3": 2 });
  });

  it("load and unload are refused when the model control mode is none", async () => {
    const load = await postJson(`${server.url}/v2/repository/models/all/load`, {});
    assert.equal(load.status, 503);
    assert.equal(errorOf(load), "explicit model load / unload is not allowed if polling is enabled");
    const unload = await postJson(`${server.url}/v2/repository/models/all/unload`, {});
    assert.equal(unload.status, 503);
    assert.equal(await status(`${server.url}/v2/models/all/ready`), 200);
  });
});

const CORRUPT_AND_FINE = {
  corrupt: { onnx: new TextEncoder().encode("this is not an ONNX model") },
  fine: { config: simpleConfig("fine", { instances: 2 }), onnx: addSubModel("INT32", [-1, 16]) },
};

describe("what a model's versions write in the log", () => {
  it("a specific policy naming a version without a folder: the versions it has serve, the missing one is logged in Triton's words; a refusal of a version not ready is no error", async () => {
    const lines: { level?: number; event?: string; msg?: string }[] = [];
    const logs = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split("\n")) if (line !== "") lines.push(JSON.parse(line));
        done();
      },
    });
    const server = await startTestServer(
      { spec: { config: "version_policy: { specific: { versions: [ 1, 9 ] } }", onnx: THREE_VERSIONS } },
      { modelControlMode: "explicit", loadModels: ["spec"] },
      pino({ level: "info" }, logs),
    );
    try {
      assert.equal(await status(`${server.url}/v2/models/spec/versions/1/ready`), 200);
      const missing = lines.filter((l) => l.event === "version_missing");
      assert.deepEqual(
        missing.map((l) => [l.level, l.msg]),
        [[50, "version 9 is specified for model 'spec', but the version directory is not present"]],
      );
      assert.equal((await postJson(`${server.url}/v2/repository/models/spec/unload`, {})).status, 200);
      const errorsBefore = lines.filter((l) => (l.level ?? 0) >= 50).length;
      for (let i = 0; i < 3; i++) {
        const refused = await infer(server.url, "spec/versions/1", input(1));
        assert.equal(refused.status, 503, JSON.stringify(refused.body));
      }
      assert.equal(lines.filter((l) => (l.level ?? 0) >= 50).length, errorsBefore);
    } finally {
      await server.stop();
    }
  });
});

describe("a model that fails to load, with --exit-on-error (Triton's default)", () => {
  it("stops the start with a message naming the model and ONNX Runtime's error", async () => {
    await assert.rejects(
      startTestServer(CORRUPT_AND_FINE),
      /^Error: model 'corrupt' failed to load: .*Protobuf parsing failed.*--exit-on-error=false serves the other models\)$/,
    );
  });
});

describe("a model that fails to load, with --exit-on-error=false", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer(CORRUPT_AND_FINE, { exitOnError: false });
  });
  after(() => server.stop());

  it("is reported UNAVAILABLE with ONNX Runtime's error in the index", async () => {
    const entry = (await index(server.url)).find((e) => e.name === "corrupt");
    assert.equal(entry?.state, "UNAVAILABLE");
    // The version that failed, as Triton's index keeps each version's state.
    assert.equal(entry?.version, "1");
    assert.match(
      entry?.reason ?? "",
      /failed to load model instance 'corrupt_0' from '.*corrupt[/\\]1[/\\]model\.onnx'/,
    );
    // ONNX Runtime's own words.
    assert.match(entry?.reason ?? "", /Protobuf parsing failed/);
  });

  it("does not take the server down: the others serve, the server reports not-ready", async () => {
    assert.equal(await status(`${server.url}/v2/health/live`), 200);
    assert.equal(await status(`${server.url}/v2/health/ready`), 400);
    assert.equal(await status(`${server.url}/v2/models/corrupt/ready`), 400);
    const corrupt = await infer(server.url, "corrupt", input(1));
    assert.equal(corrupt.status, 404);
    assert.equal(errorOf(corrupt), "Request for unknown model: 'corrupt' has no available versions");
    const answers = await Promise.all(
      Array.from({ length: 16 }, (_, i) => infer(server.url, "fine", simpleInputs(rowsOf(i), rowsOf(i + 1)))),
    );
    for (const [i, answer] of answers.entries()) {
      assert.deepEqual(outputData(answer, "OUTPUT0"), sum(rowsOf(i), rowsOf(i + 1)));
    }
  });
});

describe("unloading a sequence model", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer(
      {
        acc: {
          config: accumulatorConfig("acc", 4, "max_sequence_idle_microseconds: 60000000 direct { }"),
          onnx: accumulatorModel(),
        },
      },
      { modelControlMode: "explicit", loadModels: ["acc"] },
    );
  });
  after(() => server.stop());

  // Its sequences can no longer be reached once it unloads: waiting for them to end, as
  // the unload did for 30 s, held the model in UNLOADING and every load behind it.
  it("ends its idle sequences at once (they can no longer be reached) and is loaded again", {
    timeout: 15_000,
  }, async () => {
    const step = (value: number, sequence: { id: number; start?: boolean }) =>
      infer(
        server.url,
        "acc",
        [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }],
        sequence,
      );
    assert.deepEqual(outputData(await step(5, { id: 5, start: true }), "OUTPUT"), [5]);
    const unloaded = await postJson(`${server.url}/v2/repository/models/acc/unload`, {});
    assert.equal(unloaded.status, 200, JSON.stringify(unloaded.body));
    assert.equal((await postJson(`${server.url}/v2/repository/models/acc/load`, {})).status, 200);
    const after = await step(1, { id: 5 });
    assert.equal(after.status, 400, JSON.stringify(after.body));
    assert.match(after.body.error as string, /must specify the START flag/);
  });
});

describe("a reload of a sequence model with several versions", () => {
  const repository = tempRepository({
    acc: {
      config: accumulatorConfig(
        "acc",
        4,
        "max_sequence_idle_microseconds: 1500000 direct { }",
        "version_policy: { all { } }",
      ),
      onnx: { 1: accumulatorModel(), 3: accumulatorModel() },
    },
    single: {
      config: accumulatorConfig("single", 4, "max_sequence_idle_microseconds: 60000000 direct { }"),
      onnx: { 1: accumulatorModel() },
    },
  });
  let server: TestServer;
  before(async () => {
    server = await startTestServer(repository.path, {
      modelControlMode: "explicit",
      loadModels: ["acc", "single"],
    });
  });
  after(async () => {
    await server.stop();
    repository.remove();
  });
  const step = (version: number, value: number, sequence: { id: number; start?: boolean }) =>
    infer(
      server.url,
      `acc/versions/${version}`,
      [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }],
      sequence,
    );
  const reload = async () => {
    const answer = await postJson(`${server.url}/v2/repository/models/acc/load`, {});
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
  };

  it("a retired version's sequence does not take the place of the one with its id on a version that stays", async () => {
    assert.deepEqual(outputData(await step(1, 1000, { id: 55, start: true }), "OUTPUT"), [1000]);
    assert.deepEqual(outputData(await step(3, 1, { id: 55, start: true }), "OUTPUT"), [1]);
    assert.deepEqual(outputData(await step(3, 1, { id: 55 }), "OUTPUT"), [2]);
    rmSync(join(repository.path, "acc", "1"), { recursive: true });
    await reload();
    assert.deepEqual(outputData(await step(3, 1, { id: 55 }), "OUTPUT"), [3]);
  });

  it("a WebSocket stream opened on a version that a new one replaces follows its sequence there", async () => {
    const socket = new WebSocket(`${server.url.replace("http", "ws")}/v2/models/single/versions/1/stream`);
    const answers: { model_version?: string; outputs?: { data: number[] }[]; error?: string }[] = [];
    let received: () => void = () => {};
    socket.on("message", (data) => {
      answers.push(JSON.parse(String(data)));
      received();
    });
    await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
    const send = async (value: number) => {
      const next = new Promise<void>((resolve) => {
        received = resolve;
      });
      socket.send(
        JSON.stringify({ inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }] }),
      );
      await next;
      return answers.at(-1)!;
    };
    try {
      assert.deepEqual((await send(5)).outputs?.[0]?.data, [5]);
      mkdirSync(join(repository.path, "single", "2"));
      writeFileSync(join(repository.path, "single", "2", "model.onnx"), accumulatorModel());
      const answer = await postJson(`${server.url}/v2/repository/models/single/load`, {});
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      const moved = await send(1);
      assert.deepEqual([moved.model_version, moved.outputs?.[0]?.data], ["2", [6]], JSON.stringify(moved));
    } finally {
      socket.close();
    }
  });

  it("the index lists the versions replaced or retired beside those served, as Triton", async () => {
    // acc's version 1 was removed above, and single's version 1 replaced by its version 2.
    assert.deepEqual(await index(server.url), [
      { name: "acc", version: "1", state: "UNAVAILABLE", reason: "unloaded" },
      { name: "acc", version: "3", state: "READY" },
      { name: "single", version: "1", state: "UNAVAILABLE", reason: "unloaded" },
      { name: "single", version: "2", state: "READY" },
    ]);
    assert.deepEqual(
      (await index(server.url, { ready: true })).map((e) => `${e.name}/${e.version}`),
      ["acc/3", "single/2"],
    );
  });

  it("a sequence moved by a reload keeps its idle clock: it times out from its last request", {
    timeout: 15_000,
  }, async () => {
    assert.deepEqual(outputData(await step(3, 7, { id: 77, start: true }), "OUTPUT"), [7]);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    await reload();
    // 2 s after its last request, past its 1.5 s idle time, however long the reload took.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const late = await step(3, 1, { id: 77 });
    assert.equal(late.status, 400, JSON.stringify(late.body));
    assert.match(late.body.error as string, /must specify the START flag/);
  });
});

describe("--strict-readiness=false", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer(CORRUPT_AND_FINE, { exitOnError: false, strictReadiness: false });
  });
  after(() => server.stop());

  it("reports the server ready while it runs, a model that failed to load notwithstanding", async () => {
    assert.equal(await status(`${server.url}/v2/health/ready`), 200);
    assert.equal(await status(`${server.url}/v2/models/corrupt/ready`), 400);
    assert.equal(await status(`${server.url}/v2/models/fine/ready`), 200);
  });
});

describe("explicit model control", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer(
      {
        simple: { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) },
        auto: { onnx: identityModel("FP32", [-1, 4]) },
        spare: { onnx: identityModel("INT8", [-1, 4]) },
        Zeta: { onnx: identityModel("INT8", [-1, 4]) },
      },
      { modelControlMode: "explicit", loadModels: ["simple"] },
    );
  });
  after(() => server.stop());

  const auto = (rows: number): Promise<HttpAnswer> =>
    infer(server.url, "auto", [
      { name: "INPUT0", datatype: "FP32", shape: [rows, 4], data: Array(rows * 4).fill(0.5) },
    ]);
  const load = (model: string, body: unknown = {}) =>
    postJson(`${server.url}/v2/repository/models/${model}/load`, body);
  const unload = (model: string) => postJson(`${server.url}/v2/repository/models/${model}/unload`, {});

  it("loads only the models asked for; the index lists the others by name alone, as Triton", async () => {
    // Triton (RepositoryIndex): a model it never loaded is only a name; a reason is written
    // only when there is one. Names come in a std::map's order, byte by byte.
    const entries = await index(server.url);
    assert.deepEqual(entries, [
      { name: "Zeta" },
      { name: "auto" },
      { name: "simple", version: "1", state: "READY" },
      { name: "spare" },
    ]);
    assert.deepEqual(await index(server.url, { ready: true }), [
      { name: "simple", version: "1", state: "READY" },
    ]);
    // Models nobody asked for do not make the server unready.
    assert.equal(await status(`${server.url}/v2/health/ready`), 200);
    assert.equal(await status(`${server.url}/v2/models/auto/ready`), 400);
    // Not loaded: Triton's NOT_FOUND.
    assert.equal((await auto(1)).status, 404);
  });

  it("loads a model with a config override from the request", async () => {
    const config = JSON.stringify({ name: "auto", backend: "onnxruntime", max_batch_size: 2 });
    const answer = await load("auto", { parameters: { config } });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(await status(`${server.url}/v2/models/auto/ready`), 200);
    const completed = (await getJson(`${server.url}/v2/models/auto/config`)).body;
    assert.equal(completed.max_batch_size, 2);
    assert.deepEqual(
      (completed.input as { name: string; dims: number[] }[]).map((i) => [i.name, i.dims]),
      [["INPUT0", [4]]],
    );
    const refused = await auto(3);
    assert.equal(refused.status, 400);
    assert.equal(
      errorOf(refused),
      "[request id: <id_unknown>] inference request batch-size must be <= 2 for 'auto'",
    );
    assert.deepEqual(outputData(await auto(2), "OUTPUT0"), Array(8).fill(0.5));
  });

  it("a version policy that leaves no version fails the load in Triton's words", async () => {
    const config = JSON.stringify({
      backend: "onnxruntime",
      version_policy: { specific: { versions: [9] } },
    });
    const answer = await load("auto", { parameters: { config } });
    assert.notEqual(answer.status, 200);
    assert.equal(
      errorOf(answer),
      "failed to load 'auto': at least one version must be available under the version policy of model 'auto'",
    );
  });

  it("a config override that does not read is Triton's failed poll, naming it, and the model and its index entry stay as they were", async () => {
    const before = (await index(server.url)).find((e) => e.name === "auto");
    const answer = await load("auto", { parameters: { config: '{"max_batch_size": "many"' } });
    // Triton: INTERNAL, "failed to poll", and "Invalid config override: …" in its log.
    assert.equal(answer.status, 500);
    assert.match(
      errorOf(answer),
      /^failed to load 'auto', failed to poll from model repository: Invalid config override: the load request's config for 'auto':1:/,
    );
    assert.deepEqual(
      (await index(server.url)).find((e) => e.name === "auto"),
      before,
    );
    assert.equal((await getJson(`${server.url}/v2/models/auto/config`)).body.max_batch_size, 2);
    assert.deepEqual(outputData(await auto(2), "OUTPUT0"), Array(8).fill(0.5));
  });

  it("a config override keeps a parameter named __proto__, and refuses it given twice", async () => {
    const config = (parameters: string) =>
      `{"name": "auto", "backend": "onnxruntime", "max_batch_size": 2, "parameters": {${parameters}}}`;
    const kept = await load("auto", {
      parameters: { config: config('"__proto__": {"string_value": "x"}, "b": {"string_value": "y"}') },
    });
    assert.equal(kept.status, 200, JSON.stringify(kept.body));
    // A computed key: a plain `__proto__:` in a literal would set the prototype instead.
    assert.deepEqual((await getJson(`${server.url}/v2/models/auto/config`)).body.parameters, {
      ["__proto__"]: { string_value: "x" },
      b: { string_value: "y" },
    });
    const twiceText = config('"__proto__": {"string_value": "x"}, "__proto__": {"string_value": "z"}');
    const twice = await load("auto", { parameters: { config: twiceText } });
    assert.equal(twice.status, 500);
    const column = twiceText.lastIndexOf('"__proto__"') + 1;
    assert.equal(
      errorOf(twice),
      `failed to load 'auto', failed to poll from model repository: Invalid config override: the load request's config for 'auto':1:${column}: key '__proto__' given twice in map field 'parameters'`,
    );
  });

  it("a config override nested 20000 deep is refused where it goes past 100 levels; the model serves on", async () => {
    const config = `{"input": ${"[".repeat(20000)}${"]".repeat(20000)}}`;
    const answer = await load("auto", { parameters: { config } });
    assert.equal(answer.status, 500);
    // The object is the first level, so the 100th '[' opens the 101st.
    const column = config.indexOf("[") + 100;
    assert.equal(
      errorOf(answer),
      `failed to load 'auto', failed to poll from model repository: Invalid config override: the load request's config for 'auto':1:${column}: nesting deeper than 100 levels`,
    );
    assert.equal((await getJson(`${server.url}/v2/models/auto/config`)).body.max_batch_size, 2);
    assert.deepEqual(outputData(await auto(2), "OUTPUT0"), Array(8).fill(0.5));
  });

  it("a load without an override reloads the model from the repository", async () => {
    assert.equal((await load("auto")).status, 200);
    // Completed from the ONNX file again: Triton's default max_batch_size 4.
    assert.equal((await getJson(`${server.url}/v2/models/auto/config`)).body.max_batch_size, 4);
    assert.deepEqual(outputData(await auto(3), "OUTPUT0"), Array(12).fill(0.5));
  });

  it("unload: requests then get Triton's unavailable / not-found messages", async () => {
    assert.equal((await unload("simple")).status, 200);
    const entries = await index(server.url);
    assert.deepEqual(
      entries.find((e) => e.name === "simple"),
      // As Triton, the index keeps the version the model served.
      { name: "simple", version: "1", state: "UNAVAILABLE", reason: "unloaded" },
    );
    const a = rowsOf(1);
    // As Triton: no version left is NOT_FOUND (404), not a 503 a client would retry.
    const latest = await infer(server.url, "simple", simpleInputs(a, a));
    assert.equal(latest.status, 404);
    assert.equal(errorOf(latest), "Request for unknown model: 'simple' has no available versions");
    const versioned = await infer(server.url, "simple/versions/1", simpleInputs(a, a));
    assert.equal(versioned.status, 503);
    assert.equal(errorOf(versioned), "Request for unknown model: 'simple' version 1 is not at ready state");
    const never = await infer(server.url, "simple/versions/2", simpleInputs(a, a));
    assert.equal(never.status, 404);
    assert.equal(errorOf(never), "Request for unknown model: 'simple' version 2 is not found");
    assert.equal(await status(`${server.url}/v2/models/simple/ready`), 400);
    assert.equal((await getJson(`${server.url}/v2/models/simple`)).status, 404);
    // The server stays ready: an unloaded model is not one it was asked to serve.
    assert.equal(await status(`${server.url}/v2/health/ready`), 200);
  });

  it("a model loaded again serves again", async () => {
    assert.equal((await load("simple")).status, 200);
    const a = rowsOf(4);
    const b = rowsOf(5);
    assert.deepEqual(outputData(await infer(server.url, "simple", simpleInputs(a, b)), "OUTPUT0"), sum(a, b));
  });

  it("a new version that fails to load is listed UNAVAILABLE with its error beside the one that goes on serving", async () => {
    // The sent files hold a version 2 that is a model and a version 3 that is not.
    const broken = await load("simple", {
      parameters: {
        config: JSON.stringify({ backend: "onnxruntime", version_policy: { all: {} } }),
        "file:2/model.onnx": Buffer.from(addSubModel("INT32", [-1, 16])).toString("base64"),
        "file:3/model.onnx": Buffer.from("not a model").toString("base64"),
      },
    });
    assert.equal(broken.status, 400, JSON.stringify(broken.body));
    const listed = (await index(server.url)).filter((e) => e.name === "simple");
    // As Triton: the version that failed with its error, the one let go with it "unloaded".
    assert.deepEqual(listed, [
      { name: "simple", version: "1", state: "READY" },
      { name: "simple", version: "2", state: "UNAVAILABLE", reason: "unloaded" },
      { name: "simple", version: "3", state: "UNAVAILABLE", reason: errorOf(broken) },
    ]);
    const a = rowsOf(2);
    assert.deepEqual(outputData(await infer(server.url, "simple", simpleInputs(a, a)), "OUTPUT0"), sum(a, a));
    // A version Triton knows and does not serve: not at ready state, not "not found".
    const failed = await infer(server.url, "simple/versions/3", simpleInputs(a, a));
    assert.equal(failed.status, 503);
    assert.equal(errorOf(failed), "Request for unknown model: 'simple' version 3 is not at ready state");
    // A load that succeeds lists what it serves, and the failure no more.
    assert.equal((await load("simple")).status, 200);
    assert.deepEqual(
      (await index(server.url)).filter((e) => e.name === "simple"),
      [{ name: "simple", version: "1", state: "READY" }],
    );
  });

  // Each instance is a worker thread: the process's threads show whether any was left behind.
  const threads = () => readdirSync("/proc/self/task").length;
  it("concurrent loads of one model leave no instance behind: unloading it frees every worker", {
    skip: existsSync("/proc/self/task") ? false : "needs /proc to count threads",
  }, async () => {
    const before = threads();
    const loads = await Promise.all([1, 2, 3].map(() => load("spare")));
    assert.deepEqual(
      loads.map((answer) => answer.status),
      [200, 200, 200],
    );
    const answer = await infer(server.url, "spare", [
      { name: "INPUT0", datatype: "INT8", shape: [1, 4], data: [1, -2, 3, -4] },
    ]);
    assert.deepEqual(outputData(answer, "OUTPUT0"), [1, -2, 3, -4]);
    assert.equal((await unload("spare")).status, 200);
    await waitUntil("every thread the loads started to end", async () => threads() <= before, 10_000).catch(
      () => assert.fail(`${threads() - before} threads outlived the model's unload`),
    );
  });

  it("loading a model the repository does not have is a 500, unloading it changes nothing (as Triton)", async () => {
    const answer = await load("nope");
    assert.equal(answer.status, 500);
    assert.equal(errorOf(answer), "failed to load 'nope', failed to poll from model repository");
    const gone = await unload("nope");
    assert.equal(gone.status, 200);
  });

  it("load parameters other than config and files are refused, naming them", async () => {
    const answer = await load("auto", { parameters: { colour: "blue" } });
    assert.equal(answer.status, 400);
    assert.equal(
      errorOf(answer),
      "unexpected load parameter 'colour' for model 'auto': only 'config' and 'file:<path>' are supported",
    );
  });
});

describe("poll mode", () => {
  const repository = tempRepository({
    first: { onnx: identityModel("INT32", [-1, 4]) },
    broken: { onnx: new TextEncoder().encode("not a model yet") },
  });
  /** The model names of the server's model_load_failed log events, in order. */
  const loadFailures: string[] = [];
  let server: RunningServer;
  let url: string;
  before(async () => {
    const logs = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split("\n")) {
          if (line === "") continue;
          const entry = JSON.parse(line) as { event?: string; model?: string };
          if (entry.event === "model_load_failed") loadFailures.push(entry.model ?? "");
        }
        done();
      },
    });
    server = await startServer(
      {
        ...DEFAULT_SERVER_OPTIONS,
        modelRepositories: [repository.path],
        host: "127.0.0.1",
        httpPort: 0,
        grpcPort: undefined,
        metricsPort: undefined,
        modelControlMode: "poll",
        repositoryPollSecs: 1,
        exitOnError: false,
      },
      { logger: pino({ level: "info" }, logs) },
    );
    url = `http://127.0.0.1:${server.httpPort}`;
  });
  after(async () => {
    await server.stop();
    repository.remove();
  });

  const ready = (model: string) => async () => (await status(`${url}/v2/models/${model}/ready`)) === 200;

  it("refuses loads and unloads through the repository API, as Triton does in poll mode", async () => {
    for (const action of ["load", "unload"]) {
      const answer = await postJson(`${url}/v2/repository/models/anything/${action}`, {});
      assert.equal(answer.status, 503);
      assert.equal(errorOf(answer), "explicit model load / unload is not allowed if polling is enabled");
    }
  });

  /** Adds a model the way a deployment should: built beside the repository, then moved in at once. */
  const addModel = (name: string, onnx: Uint8Array) => {
    const staging = tempRepository({ [name]: { onnx } });
    renameSync(join(staging.path, name), join(repository.path, name));
    staging.remove();
  };

  it("a model added to the repository folder while running becomes ready and serves", async () => {
    assert.equal(await status(`${url}/v2/models/added/ready`), 400);
    addModel("added", plusVersionModel(7));
    await waitUntil("the added model to become ready", ready("added"));
    assert.deepEqual(outputData(await infer(url, "added", input(10)), "OUTPUT0"), [17]);
    assert.equal((await index(url)).find((e) => e.name === "added")?.state, "READY");
    // Triton walks its models in a std::map: a model found last comes first if its name does.
    const { body } = await getJson(`${url}/v2/models/stats`);
    assert.deepEqual(
      (body.model_stats as { name: string }[]).map((s) => s.name),
      ["added", "first"],
    );
  });

  it("a model that failed to load is not retried at every poll, only when its files change", async () => {
    // Another model added and found proves at least one more poll since the last test.
    addModel("second", plusVersionModel(2));
    await waitUntil("the second model to become ready", ready("second"));
    assert.deepEqual(loadFailures, ["broken"], "one failed load, at start");
    assert.equal((await index(url)).find((e) => e.name === "broken")?.state, "UNAVAILABLE");

    // Fixed on disk (the file replaced at once): the next poll loads it.
    const fixed = join(repository.path, "broken", "1", "model.onnx.new");
    writeFileSync(fixed, plusVersionModel(5));
    renameSync(fixed, join(repository.path, "broken", "1", "model.onnx"));
    await waitUntil("the fixed model to become ready", ready("broken"));
    assert.deepEqual(outputData(await infer(url, "broken", input(10)), "OUTPUT0"), [15]);
    assert.deepEqual(loadFailures, ["broken"]);
  });

  it("a model removed from the folder is unloaded", async () => {
    // Moved out at once, then deleted.
    const trash = mkdtempSync(join(tmpdir(), "seqserve-test-"));
    renameSync(join(repository.path, "first"), join(trash, "first"));
    rmSync(trash, { recursive: true, force: true });
    await waitUntil("the removed model to become unavailable", async () => !(await ready("first")()));
    const answer = await infer(url, "first", [
      { name: "INPUT0", datatype: "INT32", shape: [1, 4], data: [1, 2, 3, 4] },
    ]);
    assert.equal(answer.status, 404);
    assert.equal(errorOf(answer), "Request for unknown model: 'first' has no available versions");
    assert.equal(await status(`${url}/v2/models/added/ready`), 200);
  });
});

describe("--model-config-name", () => {
  it("reads <model>/configs/<name>.pbtxt where it exists, config.pbtxt elsewhere", async () => {
    const repository = tempRepository({
      custom: { config: simpleConfig("custom"), onnx: addSubModel("INT32", [-1, 16]) },
      plain: { config: simpleConfig("plain"), onnx: addSubModel("INT32", [-1, 16]) },
    });
    mkdirSync(join(repository.path, "custom", "configs"));
    writeFileSync(
      join(repository.path, "custom", "configs", "h100.pbtxt"),
      simpleConfig("custom").replace(/max_batch_size: \d+/, "max_batch_size: 3"),
    );
    const server = await startTestServer(repository.path, { modelConfigName: "h100" });
    try {
      const maxBatch = async (model: string) =>
        (await getJson(`${server.url}/v2/models/${model}/config`)).body.max_batch_size;
      assert.equal(await maxBatch("custom"), 3);
      assert.equal(await maxBatch("plain"), Number(/max_batch_size: (\d+)/.exec(simpleConfig("plain"))![1]));
    } finally {
      await server.stop();
      repository.remove();
    }
  });
});

describe("--model-load-retry-count", () => {
  /** ONNX Runtime in workers, failing the first `failures` opens of each model. */
  const flaky = (failures: number): ModelBackend => {
    const real = onnxBackend(silentLogger(), DEFAULT_BACKEND_SETTINGS, 0);
    const opens = new Map<string, number>();
    return {
      open: (request) => {
        const n = (opens.get(request.modelName) ?? 0) + 1;
        opens.set(request.modelName, n);
        return n <= failures ? Promise.reject(unavailable("the disk was not ready")) : real.open(request);
      },
    };
  };
  const start = (retries: number, failures: number) =>
    startServer(
      {
        ...DEFAULT_SERVER_OPTIONS,
        modelRepositories: [repository.path],
        host: "127.0.0.1",
        httpPort: 0,
        grpcPort: undefined,
        metricsPort: undefined,
        modelLoadRetryCount: retries,
      },
      { logger: silentLogger(), backend: flaky(failures) },
    );
  let repository: ReturnType<typeof tempRepository>;
  before(() => {
    repository = tempRepository({
      simple: { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) },
    });
  });
  after(() => repository.remove());

  it("tries a failed load again, up to the count", async () => {
    const server = await start(2, 2);
    try {
      const a = rowsOf(1);
      const url = `http://127.0.0.1:${server.httpPort}`;
      assert.deepEqual(outputData(await infer(url, "simple", simpleInputs(a, a)), "OUTPUT0"), sum(a, a));
    } finally {
      await server.stop();
    }
  });

  it("fails the load when every try failed", async () => {
    await assert.rejects(start(1, 2), /model 'simple' failed to load: the disk was not ready/);
  });
});
