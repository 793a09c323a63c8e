import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { loadOnnxModel, onnxHosts } from "../../src/backends/onnx/onnx-backend.ts";
import { glibcMallocTrim, NativeHeapTrimmer } from "../../src/backends/worker/native-heap.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { modelFiles } from "./support/onnx-test-kit.ts";

// Native memory freed by model loads and unloads is handed back to the system: once per
// burst of loads, after a load, an unload and a worker's end, and through glibc's
// malloc_trim where the C library is glibc.

const models = modelFiles("seqserve-native-heap-");

/** A trimmer whose trims (not its binding) are counted in `counts.trims`, and its bindings in `counts.binds`. */
function countingTrimmer(delayMs: number, possible = true) {
  const counts = { trims: 0, binds: 0 };
  const trimmer = new NativeHeapTrimmer(async (bindOnly) => {
    if (bindOnly) counts.binds++;
    else counts.trims++;
    return possible;
  }, delayMs);
  return { trimmer, counts };
}

describe("NativeHeapTrimmer", () => {
  test("a burst of frees makes one trim, after the last of them; the trim is bound at the first", (t) => {
    t.mock.timers.enable({ apis: ["setTimeout"] });
    const { trimmer, counts } = countingTrimmer(100);
    trimmer.soon();
    assert.deepEqual(counts, { trims: 0, binds: 1 }, "bound at once, trimmed later");
    t.mock.timers.tick(60);
    trimmer.soon();
    t.mock.timers.tick(60);
    assert.equal(counts.trims, 0, "the second free put the trim off");
    t.mock.timers.tick(40);
    assert.equal(counts.trims, 1);
    trimmer.soon();
    t.mock.timers.tick(100);
    assert.deepEqual(counts, { trims: 2, binds: 1 }, "a later free trims again, bound once");
  });

  test("where trimming is not possible, nothing more is tried once binding says so", async (t) => {
    t.mock.timers.enable({ apis: ["setTimeout"] });
    const { trimmer, counts } = countingTrimmer(10, false);
    trimmer.soon();
    await Promise.resolve();
    trimmer.soon();
    t.mock.timers.tick(10);
    assert.deepEqual(counts, { trims: 0, binds: 1 });
  });

  test("on Linux with glibc, malloc_trim is found and called", async () => {
    const header = (process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header;
    const trimmed = await glibcMallocTrim();
    if (process.platform === "linux" && header?.glibcVersionRuntime !== undefined)
      assert.equal(trimmed, true);
    else if (process.platform !== "linux") assert.equal(trimmed, false);
  });
});

describe("model worker threads", () => {
  test("tell their trimmer after each load, an instance's unload and the thread's end", async () => {
    let freed = 0;
    const hosts = onnxHosts(1, undefined, { soon: () => freed++ });
    const loaded = await loadOnnxModel({
      modelName: "sums",
      modelPath: await models.file("sums", addSubModel("INT32", [1, 3])),
      instanceCount: 2,
      hosts,
      logger: silentLogger(),
    });
    assert.equal(freed, 2, "one per instance loaded");
    // The first instance leaves a thread the second still holds: an unload, not an end.
    await loaded.executors[0]!.close();
    assert.equal(freed, 3, "the unload of one instance");
    await loaded.executors[1]!.close();
    assert.equal(freed, 4, "the thread's end");
  });
});
