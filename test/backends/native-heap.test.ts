import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { loadOnnxModel, onnxHosts } from "../../src/backends/onnx/onnx-backend.ts";
import { glibcMallocTrim, NativeHeapTrimmer } from "../../src/backends/worker/native-heap.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { modelFiles } from "./support/onnx-test-kit.ts";

// Native memory freed by model loads and unloads is handed back to the system: once per
// burst of loads, after a load and after an unload, and through glibc's malloc_trim where
// the C library is glibc.

const models = modelFiles("seqserve-native-heap-");

/** Resolves once `condition()` holds, checking each few milliseconds (bounded, so a failure is a failure, not a hang). */
async function eventually(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  assert.ok(condition(), what);
}

describe("NativeHeapTrimmer", () => {
  test("a burst of frees makes one trim, after the last of them", (t) => {
    t.mock.timers.enable({ apis: ["setTimeout"] });
    let trims = 0;
    const trimmer = new NativeHeapTrimmer(() => {
      trims++;
      return true;
    }, 100);
    trimmer.soon();
    t.mock.timers.tick(60);
    trimmer.soon();
    t.mock.timers.tick(60);
    assert.equal(trims, 0, "the second free put the trim off");
    t.mock.timers.tick(40);
    assert.equal(trims, 1);
    trimmer.soon();
    t.mock.timers.tick(100);
    assert.equal(trims, 2, "a later free trims again");
  });

  test("where trimming is not possible, it is tried once and never again", (t) => {
    t.mock.timers.enable({ apis: ["setTimeout"] });
    let tries = 0;
    const trimmer = new NativeHeapTrimmer(() => {
      tries++;
      return false;
    }, 10);
    trimmer.soon();
    t.mock.timers.tick(10);
    trimmer.soon();
    t.mock.timers.tick(10);
    assert.equal(tries, 1);
  });

  test("on Linux with glibc, malloc_trim is found and called", () => {
    const header = (process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header;
    const glibc = process.platform === "linux" && header?.glibcVersionRuntime !== undefined;
    assert.equal(glibcMallocTrim(), glibc);
  });
});

describe("model worker threads", () => {
  test("trim after a model loads and after it unloads", async () => {
    let trims = 0;
    const trimmer = new NativeHeapTrimmer(() => {
      trims++;
      return true;
    }, 1);
    const loaded = await loadOnnxModel({
      modelName: "sums",
      modelPath: await models.file("sums", addSubModel("INT32", [1, 3])),
      instanceCount: 1,
      hosts: onnxHosts(1, undefined, trimmer),
      logger: silentLogger(),
    });
    await eventually(() => trims === 1, "a trim follows the load");
    await Promise.all(loaded.executors.map((e) => e.close()));
    await eventually(() => trims === 2, "a trim follows the unload");
  });
});
