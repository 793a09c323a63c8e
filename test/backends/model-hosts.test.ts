import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, readFile, stat, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, test } from "node:test";
import { promisify } from "node:util";
import { loadOnnxModel, type OnnxHosts, onnxHosts } from "../../src/backends/onnx/onnx-backend.ts";
import { onnxSessionOptions } from "../../src/backends/onnx/session-options.ts";
import { ModelHosts } from "../../src/backends/worker/model-hosts.ts";
import { siblingModule } from "../../src/backends/worker/spawn-worker.ts";
import { WorkerExecutor } from "../../src/backends/worker/worker-executor.ts";
import type { ModelExecutor } from "../../src/core/executor.ts";
import type { BytesElements, Tensor } from "../../src/core/tensor.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { OnnxModelBuilder } from "../../tools/onnx/onnx-model-builder.ts";
import { addSubModel, identityModel } from "../../tools/onnx/test-models.ts";
import { modelFiles, rejection } from "./support/onnx-test-kit.ts";

// Model instances sharing worker threads (--onnx-worker-threads): placement, sessions
// shared between models over the same bytes, and that instances on one thread answer their own runs, come and go without disturbing each
// other (a model's old and new version too, whose instances have the same names), and
// all come back after the thread dies.

const logger = silentLogger();
const utf8 = new TextEncoder();
const models = modelFiles("seqserve-hosts-");
const modelFile = models.file;
const ONNX_WORKER = siblingModule(
  new URL("../../src/backends/onnx/onnx-backend.ts", import.meta.url).href,
  "onnx-worker",
);

const ints = (...values: number[]): Tensor => ({
  datatype: "INT32",
  shape: [1, values.length],
  data: Int32Array.from(values),
});

const floats = (...values: number[]): Tensor => ({
  datatype: "FP32",
  shape: [1, values.length],
  data: Float32Array.from(values),
});

/** OUTPUT0 = INPUT0 × `weights` (FP32 [1, n]): models of one size whose answers tell their weights apart. */
const scaleModel = (weights: number[]): Uint8Array =>
  new OnnxModelBuilder({ opset: 17 })
    .input("INPUT0", "FP32", [1, weights.length])
    .output("OUTPUT0", "FP32", [1, weights.length])
    .initializer("W", "FP32", [1, weights.length], Float32Array.from(weights))
    .node("Mul", ["INPUT0", "W"], ["OUTPUT0"])
    .toBytes();

/** Writes `bytes` as `<folder>/model.onnx`, alone in its folder as a repository keeps a version's file; its path. */
async function aloneFile(folder: string, bytes: Uint8Array): Promise<string> {
  await mkdir(join(models.dir(), folder));
  return modelFile(`${folder}/model`, bytes);
}

/** One instance of `modelName` from `modelPath`, placed on `hosts`. */
const loadOne = (hosts: OnnxHosts, modelName: string, modelPath: string) =>
  loadOnnxModel({ modelName, modelPath, instanceCount: 1, hosts, logger });

/** Whether a model's (first) instance runs on a session another instance on its thread loaded. */
const sharesSession = (model: { executors: readonly ModelExecutor[] }): boolean =>
  (model.executors[0] as WorkerExecutor).sharesSession;

const text = (...strings: string[]): Tensor => ({
  datatype: "BYTES",
  shape: [strings.length],
  data: strings.map((s) => utf8.encode(s)),
});

async function first(
  executor: ModelExecutor,
  inputs: Record<string, Tensor>,
  output: string,
): Promise<unknown[]> {
  const { outputs } = await executor.run(new Map(Object.entries(inputs)), [output]);
  const tensor = outputs.get(output)!;
  if (tensor.datatype === "BYTES")
    return (tensor.data as BytesElements).map((e) => Buffer.from(e).toString());
  return [...(tensor.data as Int32Array)];
}

describe("ModelHosts placement", () => {
  const entry = new URL("file:///unused-worker.js");

  test("threads of their own up to the limit, then shared, a model's instances spread apart", () => {
    const hosts = new ModelHosts(entry, 2);
    const a0 = hosts.place("a", "a_0#1");
    const a1 = hosts.place("a", "a_0#2");
    assert.notEqual(a0, a1, "a model's second instance gets the second thread");
    hosts.place("b", "b_0#3");
    const b1 = hosts.place("b", "b_1#4");
    assert.deepEqual(hosts.sizes, [2, 2], "no third thread; b's instances on different threads");
    assert.equal(b1, a1);
    hosts.place("c", "c_0#5");
    assert.deepEqual(hosts.sizes, [3, 2]);
  });

  test("with no limit every instance has a thread; a thread left empty is used again", () => {
    const hosts = new ModelHosts(entry, 0);
    const a = hosts.place("a", "a_0#1");
    hosts.place("a", "a_1#2");
    hosts.place("b", "b_0#3");
    assert.deepEqual(hosts.sizes, [1, 1, 1]);
    a.placed.delete("a_0#1");
    assert.equal(hosts.place("c", "c_0#4"), a);
    assert.deepEqual(hosts.sizes, [1, 1, 1]);
  });

  test("another model's instance joins the thread holding its session key, not a thread of its own", () => {
    const hosts = new ModelHosts(entry, 4);
    const a0 = hosts.place("a", "a_0#1", "same-bytes");
    hosts.place("c", "c_0#2", "other-bytes");
    assert.equal(hosts.place("b", "b_0#3", "same-bytes"), a0, "joins the session");
    const a1 = hosts.place("a", "a_1#4", "same-bytes");
    assert.notEqual(a1, a0, "a model's own instances still spread to run in parallel");
    assert.deepEqual(hosts.sizes, [2, 1, 1]);
  });

  test("with no limit, an instance that could share a session still gets a thread of its own", () => {
    const hosts = new ModelHosts(entry, 0);
    const a = hosts.place("a", "a_0#1", "same-bytes");
    assert.notEqual(hosts.place("b", "b_0#2", "same-bytes"), a);
    assert.deepEqual(hosts.sizes, [1, 1]);
  });
});

describe("instances sharing a thread", () => {
  test("two models over byte-identical files share one session on one thread; each serves while the other closes", async () => {
    const hosts = onnxHosts(2);
    const a = await loadOne(hosts, "a", await aloneFile("a_1", addSubModel("INT32", [1, 3])));
    const b = await loadOne(hosts, "b", await aloneFile("b_1", addSubModel("INT32", [1, 3])));
    const added = () => ({ INPUT0: ints(1, 2, 3), INPUT1: ints(10, 10, 10) });
    try {
      assert.deepEqual(hosts.sizes, [2], "b joined a's thread, not a second one");
      assert.deepEqual(
        [sharesSession(a), sharesSession(b)],
        [false, true],
        "b runs on the session a loaded, found by its bytes",
      );
      assert.deepEqual(await first(a.executors[0]!, added(), "OUTPUT0"), [11, 12, 13]);
      assert.deepEqual(await first(b.executors[0]!, added(), "OUTPUT1"), [-9, -8, -7]);
      await a.executors[0]!.close();
      assert.deepEqual(await first(b.executors[0]!, added(), "OUTPUT0"), [11, 12, 13]);
    } finally {
      await Promise.all([...a.executors, ...b.executors].map((e) => e.close()));
    }
  });

  test("a file rewritten in place with the same size and dates is loaded anew: sessions are shared by the bytes loaded", async () => {
    const hosts = onnxHosts(1);
    const path = await aloneFile("rewritten_1", scaleModel([1, 2, 3]));
    // Whole seconds, as an archive's entries have: the same dates can be given again exactly.
    const dates = new Date(1_700_000_000_000);
    await utimes(path, dates, dates);
    const load = () => loadOne(hosts, "rewritten", path);
    const old = await load();
    const { ino, mtimeMs } = await stat(path);
    const next = scaleModel([10, 20, 30]);
    assert.equal(next.length, (await readFile(path)).length, "the same size");
    await writeFile(path, next);
    await utimes(path, dates, dates);
    const now = await stat(path);
    assert.deepEqual(
      [now.ino, now.mtimeMs, now.size],
      [ino, mtimeMs, next.length],
      "the same inode and dates",
    );
    const reloaded = await load();
    try {
      assert.equal(sharesSession(reloaded), false, "new bytes, a session of their own");
      assert.deepEqual(
        await first(reloaded.executors[0]!, { INPUT0: floats(1, 1, 1) }, "OUTPUT0"),
        [10, 20, 30],
      );
      assert.deepEqual(await first(old.executors[0]!, { INPUT0: floats(1, 1, 1) }, "OUTPUT0"), [1, 2, 3]);
    } finally {
      await Promise.all([...old.executors, ...reloaded.executors].map((e) => e.close()));
    }
  });

  test("after their thread dies, two models that shared a session each load their own file again", async () => {
    const hosts = onnxHosts(1, { maxOldGenerationSizeMb: 32 });
    const load = async (modelName: string, bytes: Uint8Array) =>
      loadOne(hosts, modelName, await aloneFile(`${modelName}_1`, bytes));
    const same = await load("same_a", scaleModel([1, 2, 3]));
    const changing = await load("same_b", scaleModel([1, 2, 3]));
    const echo = await load("same_echo", identityModel("BYTES", [-1]));
    try {
      assert.equal(sharesSession(changing), true, "one session while their files are the same");
      assert.deepEqual(await first(same.executors[0]!, { INPUT0: floats(1, 1, 1) }, "OUTPUT0"), [1, 2, 3]);
      // same_b's file changes without a reload; then the thread dies and both load again.
      await writeFile(join(models.dir(), "same_b_1", "model.onnx"), scaleModel([10, 20, 30]));
      const mebibyte = "a".repeat(1 << 20);
      await rejection(
        first(echo.executors[0]!, { INPUT0: text(...Array.from({ length: 96 }, () => mebibyte)) }, "OUTPUT0"),
      );
      assert.deepEqual(
        await first(changing.executors[0]!, { INPUT0: floats(1, 1, 1) }, "OUTPUT0"),
        [10, 20, 30],
      );
      assert.deepEqual(await first(same.executors[0]!, { INPUT0: floats(1, 1, 1) }, "OUTPUT0"), [1, 2, 3]);
      assert.deepEqual([sharesSession(same), sharesSession(changing)], [false, false], "each its own since");
    } finally {
      await Promise.all([...same.executors, ...changing.executors, ...echo.executors].map((e) => e.close()));
    }
  });

  // The worker's side of it: a load under a key the thread holds takes that session (so
  // it never reads its own file, here one that does not exist), and the session is freed
  // once the last instance holding it leaves.
  test("a load under a session key the thread holds uses that session, until its last holder leaves", async () => {
    const hosts = onnxHosts(1);
    // Keeps the thread alive throughout.
    const echo = await loadOne(hosts, "echo", await modelFile("echo_shared", identityModel("BYTES", [-1])));
    const sessionOptions = onnxSessionOptions({}, undefined);
    const sessionKey = "the sums session";
    const instance = (name: string, modelPath: string) =>
      new WorkerExecutor({
        name,
        entry: ONNX_WORKER,
        load: { type: "load", modelPath, sessionOptions, sessionKey },
        host: (key) => hosts.place(name, key, sessionKey),
        logger,
      });
    const absent = join(models.dir(), "absent.onnx");
    const early = instance("early_0", absent);
    const owner = instance("owner_0", await modelFile("sums_shared", addSubModel("INT32", [1, 3])));
    const borrower = instance("borrower_0", absent);
    const late = instance("late_0", absent);
    const added = () => ({ INPUT0: ints(1, 2, 3), INPUT1: ints(10, 10, 10) });
    try {
      assert.match((await rejection(early.start())).message, /absent\.onnx/, "no session under the key yet");
      await owner.start();
      await borrower.start();
      assert.deepEqual(await first(borrower, added(), "OUTPUT0"), [11, 12, 13]);
      await owner.close();
      assert.deepEqual(await first(borrower, added(), "OUTPUT1"), [-9, -8, -7], "still held by the borrower");
      await borrower.close();
      assert.match((await rejection(late.start())).message, /absent\.onnx/, "freed with its last holder");
      assert.deepEqual(await first(echo.executors[0]!, { INPUT0: text("alive") }, "OUTPUT0"), ["alive"]);
    } finally {
      await Promise.all([early, owner, borrower, late, ...echo.executors].map((e) => e.close()));
    }
  });

  test("answer their own runs, interleaved; one model closing leaves the other serving", async () => {
    const hosts = onnxHosts(1);
    const sums = await loadOnnxModel({
      modelName: "sums",
      modelPath: await modelFile("sums", addSubModel("INT32", [1, 3])),
      instanceCount: 2,
      hosts,
      logger,
    });
    const echo = await loadOnnxModel({
      modelName: "echo",
      modelPath: await modelFile("echo", identityModel("BYTES", [-1])),
      instanceCount: 1,
      hosts,
      logger,
    });
    assert.deepEqual(hosts.sizes, [3], "three instances on one thread");
    try {
      const runs = Array.from({ length: 12 }, (_, i) =>
        i % 3 === 2
          ? first(echo.executors[0]!, { INPUT0: text(`run ${i}`) }, "OUTPUT0")
          : first(sums.executors[i % 3]!, { INPUT0: ints(i, 1, 2), INPUT1: ints(1, 1, 1) }, "OUTPUT0"),
      );
      assert.deepEqual(
        await Promise.all(runs),
        Array.from({ length: 12 }, (_, i) => (i % 3 === 2 ? [`run ${i}`] : [i + 1, 2, 3])),
      );
      await Promise.all(sums.executors.map((e) => e.close()));
      assert.deepEqual(await first(echo.executors[0]!, { INPUT0: text("still") }, "OUTPUT0"), ["still"]);
      assert.deepEqual(hosts.sizes, [1]);
    } finally {
      await Promise.all([...sums.executors, ...echo.executors].map((e) => e.close()));
    }
  });

  test("a model's old and new version, whose instances have the same names, each run their own model", async () => {
    const hosts = onnxHosts(1);
    const load = async (file: string, bytes: Uint8Array) =>
      loadOnnxModel({
        modelName: "changing",
        modelPath: await modelFile(file, bytes),
        instanceCount: 1,
        hosts,
        logger,
      });
    const old = await load("changing_v1", identityModel("INT32", [1, 3]));
    const next = await load("changing_v2", addSubModel("INT32", [1, 3]));
    try {
      assert.equal(old.executors[0]!.name, next.executors[0]!.name);
      assert.deepEqual(await first(old.executors[0]!, { INPUT0: ints(1, 2, 3) }, "OUTPUT0"), [1, 2, 3]);
      // Inputs are handed over to the worker (transferred): each run gets its own.
      const added = () => ({ INPUT0: ints(1, 2, 3), INPUT1: ints(10, 10, 10) });
      assert.deepEqual(await first(next.executors[0]!, added(), "OUTPUT0"), [11, 12, 13]);
      await old.executors[0]!.close();
      assert.deepEqual(await first(next.executors[0]!, added(), "OUTPUT1"), [-9, -8, -7]);
    } finally {
      await Promise.all([...old.executors, ...next.executors].map((e) => e.close()));
    }
  });

  test("a thread that dies fails the runs of every instance on it, and each loads again on a fresh one", async () => {
    const hosts = onnxHosts(1, { maxOldGenerationSizeMb: 32 });
    const echo = await loadOnnxModel({
      modelName: "echo",
      modelPath: await modelFile("echo_dies", identityModel("BYTES", [-1])),
      instanceCount: 1,
      hosts,
      logger,
    });
    const sums = await loadOnnxModel({
      modelName: "sums",
      modelPath: await modelFile("sums_dies", addSubModel("INT32", [1, 3])),
      instanceCount: 1,
      hosts,
      logger,
    });
    try {
      const mebibyte = "a".repeat(1 << 20);
      const tooBig = text(...Array.from({ length: 96 }, () => mebibyte));
      const dying = rejection(first(echo.executors[0]!, { INPUT0: tooBig }, "OUTPUT0"));
      const neighbour = rejection(
        first(sums.executors[0]!, { INPUT0: ints(1, 2, 3), INPUT1: ints(1, 1, 1) }, "OUTPUT0"),
      );
      const [echoError, sumsError] = await Promise.all([dying, neighbour]);
      assert.match(echoError.message, /model instance 'echo_0' stopped unexpectedly \(.*memory/);
      assert.match(sumsError.message, /model instance 'sums_0' stopped unexpectedly/);

      assert.deepEqual(await first(echo.executors[0]!, { INPUT0: text("back") }, "OUTPUT0"), ["back"]);
      const sum = await first(
        sums.executors[0]!,
        { INPUT0: ints(1, 2, 3), INPUT1: ints(1, 1, 1) },
        "OUTPUT0",
      );
      assert.deepEqual(sum, [2, 3, 4]);
    } finally {
      await Promise.all([...echo.executors, ...sums.executors].map((e) => e.close()));
    }
  });

  // Both tenants leaving at once (a model's instances close together): the worker closing
  // still answers the first one's unload, so nothing of it stays on the host; the next
  // model's thread, once idle, lets the process end. (It was kept referenced for good.)
  test("all instances closing at once leave nothing behind: the next thread, idle, lets the process exit", async () => {
    const modelPath = await modelFile("sums_together", addSubModel("INT32", [1, 3]));
    const url = (path: string) => JSON.stringify(new URL(path, import.meta.url).href);
    const script = `
      const { register } = await import(${JSON.stringify(import.meta.resolve("tsx/esm/api"))});
      register();
      const { loadOnnxModel, onnxHosts } = await import(${url("../../src/backends/onnx/onnx-backend.ts")});
      const { silentLogger } = await import(${url("../../src/observability/logger.ts")});
      const hosts = onnxHosts(1);
      const load = (modelName) => loadOnnxModel({
        modelName, modelPath: ${JSON.stringify(modelPath)}, instanceCount: 2, hosts, logger: silentLogger(),
      });
      const first = await load("first");
      await Promise.all(first.executors.map((e) => e.close()));
      const next = await load("next");
      const ints = (...v) => ({ datatype: "INT32", shape: [1, 3], data: Int32Array.from(v) });
      const { outputs } = await next.executors[1].run(
        new Map([["INPUT0", ints(1, 2, 3)], ["INPUT1", ints(1, 1, 1)]]), ["OUTPUT0"]);
      console.log(JSON.stringify([...outputs.get("OUTPUT0").data]));
      // The models stay loaded: only an idle worker's reference decides whether this ends.
    `;
    // A file, not -e: the workers would inherit --input-type, which they refuse.
    const scriptPath = join(models.dir(), "close-together.mjs");
    await writeFile(scriptPath, script);
    const { stdout } = await promisify(execFile)(process.execPath, [scriptPath], { timeout: 60_000 }).catch(
      (error: { killed?: boolean }) => {
        if (error.killed) assert.fail("an idle model thread kept the process alive");
        throw error;
      },
    );
    assert.equal(stdout.trim(), "[2,3,4]");
  });
});
