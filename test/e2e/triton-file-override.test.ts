import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { callError, TestClient } from "../grpc/support/grpc-harness.ts";
import { getJson, postJson } from "../support/http-client.ts";
import { touchModel } from "../support/model-repository.ts";
import { metricValue } from "../support/sequence-kit.ts";
import { startTestServer, type TestServer } from "../support/test-server.ts";
import { plusVersionModel, waitUntil } from "./support/serving.ts";

// Triton's model file override, as its lifecycle test (test_file_override,
// test_file_override_security) drives it over HTTP and gRPC: a load that sends the model's
// files with a config loads them in place of the repository's folder, under the
// repository's name or a new one; without a config it is refused and the loaded version
// stays; a load without files goes back to the repository; files may not land outside
// the model's folder; the folder goes when the model is unloaded.

const CONFIG = JSON.stringify({ backend: "onnxruntime" });

/** The folders seqserve made for sent model files. */
const overrideFolders = (): string[] =>
  readdirSync(tmpdir()).filter((name) => name.startsWith("seqserve-model-"));

/** Waits until the folders of sent files are those there were before (a replaced one goes once its version has unloaded). */
const foldersBack = (before: readonly string[]) =>
  waitUntil("the folders of sent files removed", async () => overrideFolders().join() === before.join());

describe("Triton's model file override (load with file:<version>/<name>)", () => {
  let server: TestServer;
  let grpc: TestClient;
  let foldersBefore: string[];
  before(async () => {
    foldersBefore = overrideFolders();
    server = await startTestServer(
      { m: { onnx: { 3: plusVersionModel(3) } } },
      { modelControlMode: "explicit", loadModels: ["m"] },
    );
    grpc = new TestClient(server.grpcPort);
  });
  after(async () => {
    grpc.close();
    await server.stop();
  });

  const ready = async (model: string, version: string) =>
    (await fetch(`${server.url}/v2/models/${model}/versions/${version}/ready`)).status === 200;
  /** What `model` adds to its input: its version's number. */
  const adds = async (model: string): Promise<number> => {
    const answer = await postJson(`${server.url}/v2/models/${model}/infer`, {
      inputs: [{ name: "INPUT0", datatype: "INT32", shape: [1, 1], data: [100] }],
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    return (answer.body.outputs as { data: number[] }[])[0]!.data[0]! - 100;
  };
  const base64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");
  /** Triton's failure counter of a model version (reason OTHER), undefined when it has no series. */
  const failures = (model: string, version: string) =>
    metricValue(server.metricsUrl, "nv_inference_request_failure", { model, version, reason: "OTHER" });
  const httpLoad = (model: string, parameters: Record<string, string>) =>
    postJson(`${server.url}/v2/repository/models/${model}/load`, { parameters });
  const grpcLoad = (model: string, parameters: Record<string, object>) =>
    grpc.unary("RepositoryModelLoad", { model_name: model, parameters });

  it("HTTP: sent files load in place of the repository's folder, under its name or a new one", async () => {
    assert.deepEqual([await ready("m", "3"), await adds("m")], [true, 3]);

    // Without a config: refused as Triton refuses it (its repository poll fails), and the
    // loaded version goes on.
    const noConfig = await httpLoad("m", { "file:1/model.onnx": base64(plusVersionModel(5)) });
    assert.equal(noConfig.status, 500);
    assert.equal(
      noConfig.body.error,
      "failed to load 'm', failed to poll from model repository: load parameter 'config' must be specified for model file override",
    );
    assert.deepEqual([await ready("m", "3"), await adds("m")], [true, 3]);

    // A new name: served from the files alone, beside the repository's model.
    const added = await httpLoad("sent", {
      config: CONFIG,
      "file:1/model.onnx": base64(plusVersionModel(7)),
    });
    assert.equal(added.status, 200, JSON.stringify(added.body));
    assert.deepEqual([await ready("sent", "1"), await adds("sent"), await adds("m")], [true, 7, 3]);

    // The repository's name: its version 3 gives way to the sent version 1.
    const replaced = await httpLoad("m", {
      config: CONFIG,
      "file:1/model.onnx": base64(plusVersionModel(5)),
    });
    assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
    assert.deepEqual([await ready("m", "1"), await ready("m", "3"), await adds("m")], [true, false, 5]);
    // A version's metric series go with it, as Triton removes an unloaded model's.
    assert.deepEqual([await failures("m", "1"), await failures("m", "3")], [0, undefined]);

    // Unloaded and loaded without files: the repository's folder again.
    assert.equal((await postJson(`${server.url}/v2/repository/models/m/unload`, {})).status, 200);
    assert.equal(await failures("m", "1"), undefined);
    assert.equal((await postJson(`${server.url}/v2/repository/models/m/load`, {})).status, 200);
    assert.deepEqual([await ready("m", "1"), await ready("m", "3"), await adds("m")], [false, true, 3]);
    // Loaded again in place, the version keeps its series: the new load and the old share
    // them, and its counters go on from the old load's (Triton's reporter is found again),
    // while its statistics start anew.
    const successes = () =>
      metricValue(server.metricsUrl, "nv_inference_request_success", { model: "m", version: "3" });
    // Loaded anew after its unload, it counted from zero: the one request since.
    const served = await successes();
    assert.equal(served, 1);
    // Its file touched: a load of a model whose folder did not change changes nothing.
    touchModel(server.repositoryPath, "m", "3/model.onnx");
    assert.equal((await postJson(`${server.url}/v2/repository/models/m/load`, {})).status, 200);
    assert.equal(await failures("m", "3"), 0);
    assert.equal(await successes(), served);
    assert.equal(await adds("m"), 3);
    assert.equal(await successes(), served + 1);
    const stats = (await getJson(`${server.url}/v2/models/m/versions/3/stats`)).body.model_stats as {
      inference_stats: { success: { count: number } };
    }[];
    assert.equal(stats[0]!.inference_stats.success.count, 1);
    // Unloaded and loaded again with no scrape between: counted anew all the same.
    assert.equal((await postJson(`${server.url}/v2/repository/models/m/unload`, {})).status, 200);
    assert.equal((await postJson(`${server.url}/v2/repository/models/m/load`, {})).status, 200);
    assert.equal(await adds("m"), 3);
    assert.equal(await successes(), 1);

    // A name no repository has cannot be loaded again without its files; once unloaded it
    // is forgotten (Triton's index lists what the repositories hold), series and all.
    assert.equal(await failures("sent", "1"), 0);
    assert.equal((await postJson(`${server.url}/v2/repository/models/sent/unload`, {})).status, 200);
    const entries = (await postJson(`${server.url}/v2/repository/index`, {})).body as unknown as {
      name: string;
      version: string;
      state: string;
    }[];
    // m's version 1, served from sent files before, is listed as unloaded, as Triton lists it.
    assert.deepEqual(
      entries.map((e) => `${e.name}/${e.version}/${e.state}`),
      ["m/1/UNAVAILABLE", "m/3/READY"],
    );
    assert.equal(await failures("sent", "1"), undefined);
    const gone = await postJson(`${server.url}/v2/repository/models/sent/load`, {});
    assert.equal(gone.status, 500);
    assert.deepEqual(gone.body, { error: "failed to load 'sent', failed to poll from model repository" });
    // Every folder of sent files went with its model.
    await foldersBack(foldersBefore);
  });

  it("gRPC: the files as bytes; a load without files goes back to the repository", async () => {
    await grpcLoad("m", {
      config: { string_param: CONFIG },
      "file:2/model.onnx": { bytes_param: plusVersionModel(9) },
    });
    assert.deepEqual([await ready("m", "2"), await ready("m", "3"), await adds("m")], [true, false, 9]);
    await grpcLoad("m", {});
    assert.deepEqual([await ready("m", "2"), await ready("m", "3"), await adds("m")], [false, true, 3]);
    const noConfig = await callError(
      grpcLoad("m", { "file:1/model.onnx": { bytes_param: plusVersionModel(5) } }),
    );
    assert.equal(noConfig.code, status.INTERNAL);
    // As Triton's gRPC frontend: other parameters and files that are not bytes are named.
    const bogus = await callError(
      grpcLoad("m", { config: { string_param: CONFIG }, bogus: { string_param: "1" } }),
    );
    assert.deepEqual(
      [bogus.code, bogus.details],
      [status.INVALID_ARGUMENT, "unrecognized load parameter 'bogus'."],
    );
    const text = await callError(
      grpcLoad("m", { config: { string_param: CONFIG }, "file:1/model.onnx": { string_param: "x" } }),
    );
    assert.deepEqual(
      [text.code, text.details],
      [
        status.INVALID_ARGUMENT,
        "invalid value type for load parameter 'file:1/model.onnx', expected bytes_param.",
      ],
    );
    // A leading "/" is the model folder's root, as Triton joins it.
    await grpcLoad("rooted", {
      config: { string_param: CONFIG },
      "file:/1/model.onnx": { bytes_param: plusVersionModel(4) },
    });
    assert.deepEqual([await ready("rooted", "1"), await adds("rooted")], [true, 4]);
    await grpc.unary("RepositoryModelUnload", { model_name: "rooted" });
    await foldersBack(foldersBefore);
  });

  it("names are checked as Triton checks them; a name whose sent files did not load stays unknown", async () => {
    for (const name of ["", "  ", "..", "a/b"]) {
      const error = await callError(
        grpcLoad(name, {
          config: { string_param: CONFIG },
          "file:1/model.onnx": { bytes_param: plusVersionModel(4) },
        }),
      );
      assert.equal(error.code, status.INVALID_ARGUMENT, JSON.stringify(name));
      assert.match(
        error.details,
        /Model name cannot be empty|model name must not contain path traversal characters/,
      );
    }
    await httpLoad("ghost", { config: CONFIG, "file:../x": base64(new TextEncoder().encode("x")) });
    await httpLoad("ghost2", { config: "{", "file:1/model.onnx": base64(plusVersionModel(4)) });
    const index = (await postJson(`${server.url}/v2/repository/index`, {})).body as unknown as {
      name: string;
    }[];
    const names = index.map((entry) => entry.name);
    assert.ok(!names.includes("ghost") && !names.includes("ghost2"), names.join());
    assert.equal((await getJson(`${server.url}/v2/models/ghost2`)).status, 404);
    await foldersBack(foldersBefore);
  });

  it("a file may not land outside the model's folder; nothing is written, nothing changes", async () => {
    const outside = join(tmpdir(), `seqserve-escape-${process.pid}.txt`);
    for (const path of [
      "../../escape.txt",
      `../seqserve-escape-${process.pid}.txt`,
      `/../seqserve-escape-${process.pid}.txt`,
      "1/../../x",
    ]) {
      const answer = await httpLoad("m", {
        config: CONFIG,
        [`file:${path}`]: base64(new TextEncoder().encode("x")),
      });
      assert.equal(answer.status, 500, path);
      assert.match(
        answer.body.error as string,
        /^failed to load 'm', failed to poll from model repository: .*must stay within model directory/,
        path,
      );
    }
    assert.equal(existsSync(outside), false);
    // A path given both as a file and as a folder is named.
    const both = await httpLoad("m", {
      config: CONFIG,
      "file:1": base64(new TextEncoder().encode("x")),
      "file:1/model.onnx": base64(plusVersionModel(5)),
    });
    assert.equal(both.status, 500);
    assert.match(both.body.error as string, /both as a file and as a folder/);
    assert.deepEqual([await ready("m", "3"), await adds("m")], [true, 3]);
    await foldersBack(foldersBefore);
  });

  it("a config may not name a label file outside the model's folder (its lines go back to clients)", async () => {
    const labelled = (labelFilename: string) =>
      JSON.stringify({
        max_batch_size: 8,
        input: [{ name: "INPUT0", data_type: "TYPE_INT32", dims: [1] }],
        output: [{ name: "OUTPUT0", data_type: "TYPE_INT32", dims: [1], label_filename: labelFilename }],
      });
    for (const path of ["../../../../../../../../etc/passwd", "/etc/passwd", "3/../.."]) {
      const answer = await httpLoad("m", { config: labelled(path) });
      assert.equal(answer.status, 400, `${path}: ${JSON.stringify(answer.body)}`);
      assert.match(
        answer.body.error as string,
        /label_filename .* must name a file in the model's folder/,
        path,
      );
    }
    // The loaded version serves on, and its classes carry no line of any file.
    const classes = await postJson(`${server.url}/v2/models/m/infer`, {
      inputs: [{ name: "INPUT0", datatype: "INT32", shape: [1, 1], data: [0] }],
      outputs: [{ name: "OUTPUT0", parameters: { classification: 1 } }],
    });
    assert.equal(classes.status, 200, JSON.stringify(classes.body));
    assert.deepEqual((classes.body.outputs as { data: string[] }[])[0]!.data, ["3:0"]);
  });

  it("a label file that cannot be read fails the load, as Triton's label provider fails it", async () => {
    const config = JSON.stringify({
      max_batch_size: 8,
      input: [{ name: "INPUT0", data_type: "TYPE_INT32", dims: [1] }],
      output: [{ name: "OUTPUT0", data_type: "TYPE_INT32", dims: [1], label_filename: "absent.txt" }],
    });
    const answer = await httpLoad("m", { config });
    assert.equal(answer.status, 400, JSON.stringify(answer.body));
    assert.match(
      answer.body.error as string,
      /failed to open text file for read 'absent\.txt' \(the labels of output 'OUTPUT0' of model 'm'\): No such file or directory/,
    );
    assert.doesNotMatch(
      answer.body.error as string,
      /\/tmp|seqserve-/,
      "the server's own path stays in its log",
    );
    assert.deepEqual([await ready("m", "3"), await adds("m")], [true, 3]);
  });
});
