import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { describe, test } from "node:test";
import { promisify } from "node:util";
import { loadOnnxModel, onnxHosts } from "../../src/backends/onnx/onnx-backend.ts";
import {
  capMallocArenas,
  glibcMallocTrim,
  NativeHeapTrimmer,
} from "../../src/backends/worker/native-heap.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";
import { modelFiles } from "./support/onnx-test-kit.ts";

// Native memory freed by model loads and unloads is handed back to the system: once per
// burst of loads, after a load, an unload and a worker's end, and through glibc's
// malloc_trim where the C library is glibc; and the arenas it is kept in are capped.

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

const onGlibc =
  process.platform === "linux" &&
  (process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header
    ?.glibcVersionRuntime !== undefined;

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
    const trimmed = await glibcMallocTrim();
    if (onGlibc) assert.equal(trimmed, true);
    else if (process.platform !== "linux") assert.equal(trimmed, false);
  });
});

/**
 * How many malloc arenas a fresh process has after four threads allocated at once, with
 * the arenas capped at `cap` first (or not, when undefined): glibc's malloc_stats lists
 * each arena. The process loads the compiled module (`npm test` builds it), as the
 * `seqserve` command does before anything else: under a TypeScript loader, its threads
 * would have made their arenas before the cap.
 */
async function arenasAfterFourThreads(cap: number | undefined): Promise<number> {
  const code = `
    import { Worker } from "node:worker_threads";
    import koffi from "koffi";
    import { capMallocArenas } from ${JSON.stringify(new URL("../../dist/backends/worker/native-heap.js", import.meta.url).href)};
    const cap = ${cap ?? "undefined"};
    if (cap !== undefined && !(await capMallocArenas(cap, {}))) throw new Error("not capped");
    const work = "const kept = []; for (let i = 0; i < 4000; i++) kept.push(Buffer.allocUnsafeSlow(512 + i));";
    const threads = Array.from({ length: 4 }, () => new Worker(work, { eval: true }));
    await Promise.all(threads.map((thread) => new Promise((resolve) => thread.on("exit", resolve))));
    koffi.load("libc.so.6").func("void malloc_stats()")();
  `;
  const { stderr } = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", code]);
  return stderr.split("\n").filter((line) => /^Arena \d+:/.test(line)).length;
}

describe("malloc arenas", () => {
  test("capped, the threads that start after share that many arenas; uncapped, each gets its own", {
    skip: onGlibc ? false : "glibc only",
  }, async () => {
    assert.ok(
      (await arenasAfterFourThreads(undefined)) > 2,
      "without the cap, threads make arenas of their own",
    );
    const capped = await arenasAfterFourThreads(2);
    assert.ok(capped <= 2, `capped at 2, the process has ${capped} arenas`);
  });

  test("an operator's MALLOC_ARENA_MAX is left as given", async () => {
    assert.equal(await capMallocArenas(2, { MALLOC_ARENA_MAX: "4" }), false);
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
