import assert from "node:assert/strict";
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { onnxBackend } from "../../src/app/onnx-backend.ts";
import { startServer } from "../../src/app/server.ts";
import { DEFAULT_BACKEND_SETTINGS } from "../../src/config/backend-config.ts";
import { DEFAULT_SERVER_OPTIONS } from "../../src/config/server-options.ts";
import type { ModelBackend } from "../../src/core/backend.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { SIGNATURE_MAX_ENTRIES } from "../../src/repository/source-signature.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { handlerRepository } from "../handlers/support/handler-kit.ts";
import { type LogLine, memoryLogger } from "../security/support/memory-logger.ts";
import { getJson, outputData, postJson } from "../support/http-client.ts";
import { type TempRepository, tempRepository } from "../support/model-repository.ts";
import { waitFor } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { plusVersionModel, simpleConfig } from "./support/serving.ts";

// A Triton user's repository and launch line, where they reach past the common case: a
// model name in two repositories (also as copies come and go, and between an OVMS config
// and a Triton repository), a --load-model name the repositories lack, readiness after a
// failed load and during a reload, version folders with a leading zero (and OVMS's
// zero-padded ones), an ONNX model stored as a folder with its external data, poll
// mode without polls, and a change deep in a model's folder. Each as Triton's model
// repository manager and ONNX Runtime backend treat it, or OVMS where it is OVMS's.

const status = async (url: string): Promise<number> => (await fetch(url)).status;
const SIMPLE = { config: simpleConfig("simple"), onnx: addSubModel("INT32", [-1, 16]) };
const CORRUPT = { onnx: new TextEncoder().encode("this is not an ONNX model") };

const cleanups: (() => unknown)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});
async function started(...args: Parameters<typeof startTestServer>): Promise<TestServer> {
  const server = await startTestServer(...args);
  cleanups.push(() => server.stop());
  return server;
}
function repo(models: Parameters<typeof tempRepository>[0]): TempRepository {
  const r = tempRepository(models);
  cleanups.push(() => r.remove());
  return r;
}

// Triton Poll() (model_repository_manager.cc:1339-1374): a name in two repositories is
// erased, logged "not unique across all model repositories", all_models_polled=false, so
// Create() returns "failed to load all models" (:628) and --exit-on-error stops the start.
describe("a model name in two --model-repository folders", () => {
  it("with --exit-on-error (default) the start fails, as Triton's", async () => {
    const a = repo({ m: { onnx: plusVersionModel(1) } });
    const b = repo({ m: { onnx: plusVersionModel(2) } });
    await assert.rejects(
      startTestServer(a.path, { modelRepositories: [a.path, b.path] }).then((s) => {
        cleanups.push(() => s.stop());
      }),
    );
  });

  it("with --exit-on-error=false neither copy is served, as Triton's", async () => {
    const a = repo({ m: { onnx: plusVersionModel(1) }, other: { ...SIMPLE, config: simpleConfig("other") } });
    const b = repo({ m: { onnx: plusVersionModel(2) } });
    const server = await started(a.path, { modelRepositories: [a.path, b.path], exitOnError: false });
    assert.equal(await status(`${server.url}/v2/models/other/ready`), 200);
    assert.notEqual(await status(`${server.url}/v2/models/m/ready`), 200);
    // Triton's RepositoryIndex: MODEL_READY_REASON_DUPLICATE (qa/L0_lifecycle checks it).
    const index = (await (await fetch(`${server.url}/v2/repository/index`, { method: "POST" })).json()) as {
      name: string;
    }[];
    assert.deepEqual(
      index.find((entry) => entry.name === "m"),
      { name: "m", state: "UNAVAILABLE", reason: "model appears in two or more repositories" },
    );
  });
});

describe("a repository problem", () => {
  it("is logged once while it lasts, however often the repositories are looked at", async () => {
    const a = repo({ m: { onnx: plusVersionModel(1) } });
    const b = repo({ m: { onnx: plusVersionModel(2) } });
    const config = join(a.path, "config.json");
    writeFileSync(config, JSON.stringify({ model_config_list: [] }));
    const lines: LogLine[] = [];
    // An OVMS config watched every 20 ms: each look finds the name in both repositories.
    const server = await started(
      a.path,
      {
        modelRepositories: [a.path, b.path],
        ovmsConfigs: [config],
        exitOnError: false,
        configPollSecs: 0.02,
      },
      memoryLogger(lines),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(await status(`${server.url}/v2/models/m/ready`), 400);
    const logged = lines.filter((line) =>
      String(line.msg).includes("is not unique across all model repositories"),
    );
    assert.equal(logged.length, 1);
  });
});

// Triton Create() (model_repository_manager.cc:615-630): a --load-model name that is in no
// repository only makes all_models_polled false; the start fails only with --exit-on-error.
describe("--load-model naming a model the repositories do not have, --exit-on-error=false", () => {
  it("starts and serves the other startup models, as Triton's", async () => {
    const server = await started(
      { simple: SIMPLE },
      { modelControlMode: "explicit", loadModels: ["simple", "missing"], exitOnError: false },
    );
    assert.equal(await status(`${server.url}/v2/models/simple/ready`), 200);
  });
});

// Triton IsReady() (server.cc:416-470) walks ModelStates(): a version whose load failed is
// UNAVAILABLE with a reason other than "unloaded", so the server is not ready — in every
// control mode, explicit included.
describe("strict readiness in explicit mode after a failed load", () => {
  it("a --load-model model that failed to load makes /v2/health/ready 400", async () => {
    const server = await started(
      { simple: SIMPLE, corrupt: CORRUPT },
      { modelControlMode: "explicit", loadModels: ["simple", "corrupt"], exitOnError: false },
    );
    assert.equal(await status(`${server.url}/v2/models/corrupt/ready`), 400);
    assert.equal(await status(`${server.url}/v2/health/ready`), 400);
  });

  it("a failed load through the repository API makes /v2/health/ready 400", async () => {
    const server = await started(
      { simple: SIMPLE, corrupt: CORRUPT },
      { modelControlMode: "explicit", loadModels: ["simple"] },
    );
    assert.equal(await status(`${server.url}/v2/health/ready`), 200);
    const load = await postJson(`${server.url}/v2/repository/models/corrupt/load`, {});
    assert.equal(load.status, 400);
    assert.equal(await status(`${server.url}/v2/health/ready`), 400);
  });
});

// Triton VersionsToLoad() (model_lifecycle.cc:102-113) ignores a version folder with
// leading zeros ("02" would be read as version 2, whose folder is "2") and one that is not
// a number, with a warning for each.
describe("a version folder with a leading zero, or not a number", () => {
  it("is ignored with Triton's warning, once per load, and the latest real version is served", async () => {
    const r = repo({ m: { onnx: plusVersionModel(1) } });
    for (const folder of ["02", "v3"]) {
      mkdirSync(join(r.path, "m", folder));
      writeFileSync(join(r.path, "m", folder, "model.onnx"), plusVersionModel(2));
    }
    // The model's own folders are not versions, and not warned about.
    mkdirSync(join(r.path, "m", "warmup"));
    const lines: LogLine[] = [];
    const server = await started(r.path, {}, memoryLogger(lines));
    const metadata = await getJson(`${server.url}/v2/models/m`);
    assert.deepEqual(metadata.body.versions, ["1"]);
    assert.deepEqual(
      lines
        .filter((line) => line.event === "version_ignored")
        .map((line) => line.msg)
        .sort(),
      [
        "ignore version directory '02' which contains leading zeros in its directory name",
        "ignore version directory 'v3' which fails to convert to integral number",
      ],
    );
  });
});

// Triton's ONNX Runtime backend (onnxruntime_backend src/onnxruntime.cc:411-419): when
// <version>/<default_model_filename> is a directory, the model is <that dir>/model.onnx —
// the documented layout for models with external data (server docs/user_guide/
// model_repository.md "ONNX Models": 1/model.onnx/model.onnx + <other model files>).
describe("an ONNX model stored as a directory (1/model.onnx/model.onnx)", () => {
  it("loads and serves, as Triton's", async () => {
    const r = repo({});
    mkdirSync(join(r.path, "m", "1", "model.onnx"), { recursive: true });
    writeFileSync(join(r.path, "m", "1", "model.onnx", "model.onnx"), plusVersionModel(7));
    const server = await started(r.path);
    assert.equal(await status(`${server.url}/v2/models/m/ready`), 200);
  });
});

// Triton loads a new copy of a serving model beside it and swaps it in when done: the
// serving version stays READY, and so does the server, throughout.
describe("strict readiness while a serving model is reloaded", () => {
  it("/v2/health/ready stays 200 during the reload, as Triton's", async () => {
    const r = repo({ simple: SIMPLE });
    const real = onnxBackend(silentLogger(), DEFAULT_BACKEND_SETTINGS, 0);
    let opens = 0;
    const slow: ModelBackend = {
      open: async (request) => {
        if (++opens > 1) await new Promise((resolve) => setTimeout(resolve, 1500));
        return real.open(request);
      },
    };
    const server = await startServer(
      {
        ...DEFAULT_SERVER_OPTIONS,
        modelRepositories: [r.path],
        host: "127.0.0.1",
        httpPort: 0,
        grpcPort: undefined,
        metricsPort: undefined,
        modelControlMode: "explicit",
        loadModels: ["simple"],
      },
      { logger: silentLogger(), backend: slow },
    );
    cleanups.push(() => server.stop());
    const url = `http://127.0.0.1:${server.httpPort}`;
    assert.equal(await status(`${url}/v2/health/ready`), 200);
    // A config override always reloads, in Triton as in seqserve.
    const config = JSON.stringify({
      max_batch_size: 8,
      input: [
        { name: "INPUT0", data_type: "TYPE_INT32", dims: [16] },
        { name: "INPUT1", data_type: "TYPE_INT32", dims: [16] },
      ],
      output: [
        { name: "OUTPUT0", data_type: "TYPE_INT32", dims: [16] },
        { name: "OUTPUT1", data_type: "TYPE_INT32", dims: [16] },
      ],
    });
    const load = postJson(`${url}/v2/repository/models/simple/load`, { parameters: { config } });
    await new Promise((resolve) => setTimeout(resolve, 500));
    const during = await status(`${url}/v2/health/ready`);
    const loaded = await load;
    assert.equal(loaded.status, 200, JSON.stringify(loaded.body));
    assert.equal(during, 200, "server ready while the serving version is reloaded");
  });
});

describe("names found twice, as they come and go", () => {
  it("poll mode: a model whose copy appears elsewhere stops serving, and serves again once the copy is gone", async () => {
    const a = repo({ m: { onnx: plusVersionModel(1) } });
    const b = repo({});
    const server = await started(a.path, {
      modelRepositories: [a.path, b.path],
      modelControlMode: "poll",
      repositoryPollSecs: 1,
    });
    assert.equal(await status(`${server.url}/v2/models/m/ready`), 200);
    b.add("m", { onnx: plusVersionModel(2) });
    await waitFor("the duplicate to stop serving", async () =>
      (await status(`${server.url}/v2/models/m/ready`)) === 400 ? true : undefined,
    );
    rmSync(join(b.path, "m"), { recursive: true });
    await waitFor("the model to serve again", async () =>
      (await status(`${server.url}/v2/models/m/ready`)) === 200 ? true : undefined,
    );
  });

  it("a name in an OVMS config.json and in a Triton repository is served from neither, config watch or not", async () => {
    const triton = repo({ m: { onnx: plusVersionModel(1) } });
    const ovms = repo({ m: { onnx: plusVersionModel(2) } });
    const config = join(ovms.path, "config.json");
    writeFileSync(config, JSON.stringify({ model_config_list: [{ config: { name: "m", base_path: "m" } }] }));
    const server = await started(triton.path, {
      ovmsConfigs: [config],
      configPollSecs: 1,
      exitOnError: false,
    });
    assert.equal(await status(`${server.url}/v2/models/m/ready`), 400);
    // The config watch runs every second: two of its rounds change nothing.
    await new Promise((resolve) => setTimeout(resolve, 2500));
    assert.equal(await status(`${server.url}/v2/models/m/ready`), 400);
  });

  it("explicit mode: a name found twice that nobody asked to load neither stops the start nor, once resolved, readiness", async () => {
    const a = repo({ simple: SIMPLE, m: { onnx: plusVersionModel(1) } });
    const b = repo({ m: { onnx: plusVersionModel(2) } });
    const server = await started(a.path, {
      modelRepositories: [a.path, b.path],
      modelControlMode: "explicit",
      loadModels: ["simple"],
    });
    assert.equal(await status(`${server.url}/v2/health/ready`), 200);
    rmSync(join(b.path, "m"), { recursive: true });
    // A repository call looks at the repositories again.
    assert.equal((await postJson(`${server.url}/v2/repository/models/simple/load`, {})).status, 200);
    assert.equal(await status(`${server.url}/v2/health/ready`), 200);
    assert.equal((await postJson(`${server.url}/v2/repository/models/m/load`, {})).status, 200);
    assert.equal(await status(`${server.url}/v2/models/m/ready`), 200);
  });
});

describe("poll mode with --repository-poll-secs=0", () => {
  it("loads the repository once and serves it", async () => {
    const r = repo({ m: { onnx: plusVersionModel(1) } });
    const server = await started(r.path, { modelControlMode: "poll", repositoryPollSecs: 0 });
    assert.equal(await status(`${server.url}/v2/models/m/ready`), 200);
  });
});

describe("an OVMS model's zero-padded version folder", () => {
  it("is the version it spells, as OVMS reads it (00000123 is version 123)", async () => {
    const r = repo({});
    mkdirSync(join(r.path, "m", "00000123"), { recursive: true });
    writeFileSync(join(r.path, "m", "00000123", "model.onnx"), plusVersionModel(2));
    const config = join(r.path, "config.json");
    writeFileSync(config, JSON.stringify({ model_config_list: [{ config: { name: "m", base_path: "m" } }] }));
    const server = await started(r.path, { modelRepositories: [], ovmsConfigs: [config] });
    assert.equal(await status(`${server.url}/v1/models/m/versions/123`), 200);
  });
});

// Triton's LoadModel (model_repository_manager.cc:1029-1031): a load of a model whose
// folder has not changed since it loaded is "not necessary", and changes nothing
// (qa/L0_lifecycle: an unmodified version "should not be reloaded"); a changed folder is
// loaded again.
describe("a load request for a model serving what its folder holds", () => {
  it("changes nothing: its statistics go on; a change in its folder is loaded", async () => {
    const r = repo({ m: { onnx: plusVersionModel(1) } });
    const server = await started(r.path, { modelControlMode: "explicit", loadModels: ["m"] });
    const input = [{ name: "INPUT0", datatype: "INT32", shape: [1, 1], data: [1] }];
    assert.equal((await postJson(`${server.url}/v2/models/m/infer`, { inputs: input })).status, 200);
    type Stats = { model_stats: { inference_stats: { success: { count: number } } }[] };
    const successes = async () =>
      ((await getJson(`${server.url}/v2/models/m/stats`)).body as Stats).model_stats[0]?.inference_stats
        .success.count;
    assert.equal(await successes(), 1);
    const again = await postJson(`${server.url}/v2/repository/models/m/load`, {});
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.equal(await successes(), 1, "the model was not loaded again: its statistics go on");
    // A new version in its folder: loaded.
    mkdirSync(join(r.path, "m", "2"));
    writeFileSync(join(r.path, "m", "2", "model.onnx"), plusVersionModel(2));
    writeFileSync(join(r.path, "m", "config.pbtxt"), 'backend: "onnxruntime"\nversion_policy: { all: {} }\n');
    assert.equal((await postJson(`${server.url}/v2/repository/models/m/load`, {})).status, 200);
    assert.deepEqual((await getJson(`${server.url}/v2/models/m`)).body.versions, ["1", "2"]);
  });
});

// Triton's GetPathModifiedTime (model_repository_manager.cc) takes the latest time of
// everything under a model's folder, at every level, following links (stat()): a load
// request, and poll mode, see a change however deep it is. seqserve bounds the walk
// (source-signature.ts): a folder linked into itself is walked once, and one past the
// bound still has its shallow files looked at, the load saying the rest is not.
const DEEP_CONFIG = `
backend: "typescript"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
`;
const deepHandler = (module: string) => `import { VALUE } from "${module}";
export default {
  execute(requests: any[]) {
    return requests.map(() => ({ outputs: { OUTPUT: { datatype: "INT32", shape: [1, 1], data: Int32Array.of(VALUE) } } }));
  },
};
`;
/** A handler model answering the VALUE of its 1/lib/sub/value.ts, three levels down its folder. */
function deepRepository(): { path: string; model: string; setValue: (value: number) => void } {
  const r = handlerRepository({
    deep: {
      config: DEEP_CONFIG,
      files: {
        "1/model.ts": deepHandler("./lib/sub/value.ts"),
        "1/lib/sub/value.ts": "export const VALUE = 1;\n",
      },
    },
  });
  cleanups.push(() => r.remove());
  const model = join(r.path, "deep");
  return {
    path: r.path,
    model,
    setValue: (value) =>
      writeFileSync(join(model, "1", "lib", "sub", "value.ts"), `export const VALUE = ${value};\n`),
  };
}
const deepValue = async (server: TestServer): Promise<unknown> => {
  const answer = await postJson(`${server.url}/v2/models/deep/infer`, {
    inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [0] }],
  });
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return outputData(answer, "OUTPUT")[0];
};

describe("a change three levels down a model's folder (1/lib/sub/value.ts)", () => {
  it("explicit mode: a load request loads the model anew", async () => {
    const deep = deepRepository();
    const server = await started(deep.path, { modelControlMode: "explicit", loadModels: ["deep"] });
    assert.equal(await deepValue(server), 1);
    deep.setValue(22);
    const load = await postJson(`${server.url}/v2/repository/models/deep/load`, {});
    assert.equal(load.status, 200, JSON.stringify(load.body));
    assert.equal(await deepValue(server), 22);
  });

  it("poll mode: the next poll loads the model anew, also with a link looping back up the folder", async () => {
    const deep = deepRepository();
    // 1/lib/sub/up is 1/lib, and 1/lib/root the model's folder: each folder is walked once.
    symlinkSync("..", join(deep.model, "1", "lib", "sub", "up"));
    symlinkSync(deep.model, join(deep.model, "1", "lib", "root"));
    const lines: LogLine[] = [];
    const server = await started(
      deep.path,
      { modelControlMode: "poll", repositoryPollSecs: 1 },
      memoryLogger(lines),
    );
    assert.equal(await deepValue(server), 1);
    deep.setValue(22);
    await waitFor("the poll to load the changed model", async () =>
      (await deepValue(server)) === 22 ? true : undefined,
    );
    // Walked round the loop, the folder would have seemed past the bound.
    assert.deepEqual(
      lines.filter((line) => line.event === "model_folder_large"),
      [],
    );
  });

  it(`a folder of more than ${SIGNATURE_MAX_ENTRIES} files and folders loads, says changes past them are not seen, and a change to its shallow files is`, async () => {
    const deep = deepRepository();
    // 1/lib/data sorts before 1/model.ts: walked level by level, model.ts still counts.
    mkdirSync(join(deep.model, "1", "lib", "data"));
    for (let i = 0; i <= SIGNATURE_MAX_ENTRIES; i++)
      writeFileSync(join(deep.model, "1", "lib", "data", `${i}`), "");
    const lines: LogLine[] = [];
    const server = await started(
      deep.path,
      { modelControlMode: "explicit", loadModels: ["deep"] },
      memoryLogger(lines),
    );
    assert.equal(await deepValue(server), 1);
    assert.deepEqual(
      lines.filter((line) => line.event === "model_folder_large").map((line) => line.msg),
      [
        `model 'deep': its folder '${deep.model}' holds more than ${SIGNATURE_MAX_ENTRIES} files and folders; a change past the first ${SIGNATURE_MAX_ENTRIES} (read level by level) is not seen by poll mode nor by a load request`,
      ],
    );
    writeFileSync(join(deep.model, "1", "lib", "other.ts"), "export const VALUE = 333;\n");
    writeFileSync(join(deep.model, "1", "model.ts"), deepHandler("./lib/other.ts"));
    assert.equal((await postJson(`${server.url}/v2/repository/models/deep/load`, {})).status, 200);
    assert.equal(await deepValue(server), 333);
  });
});
