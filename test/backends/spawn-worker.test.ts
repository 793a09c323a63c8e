import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { promisify } from "node:util";
import { workerExecArgv } from "../../src/backends/worker/spawn-worker.ts";
import { writeOnnxModel } from "../../tools/onnx/onnx-model-builder.ts";
import { identityModel } from "../../tools/onnx/test-models.ts";

const run = promisify(execFile);

describe("spawnWorker", () => {
  test("workers get the parent's flags without its tsx registration", () => {
    assert.deepEqual(workerExecArgv(["--import", "tsx", "--enable-source-maps"]), ["--enable-source-maps"]);
    assert.deepEqual(workerExecArgv(["--import=tsx", "--conditions=dev"]), ["--conditions=dev"]);
    assert.deepEqual(
      workerExecArgv(["--require", "/app/node_modules/tsx/dist/preflight.cjs", "--import", "./telemetry.js"]),
      ["--import", "./telemetry.js"],
    );
    assert.deepEqual(workerExecArgv(["--loader", "tsx/esm", "--no-warnings"]), ["--no-warnings"]);
  });

  // The way bin/seqserve.js starts: tsx registered by its API, no --import flag, and here a
  // process-wide flag that worker threads refuse in their execArgv.
  test("a server that registered tsx through its API, with process-wide flags, gets working instances", async () => {
    const dir = await mkdtemp(join(tmpdir(), "seqserve-spawn-"));
    try {
      const modelPath = join(dir, "identity.onnx");
      await writeOnnxModel(modelPath, identityModel("INT32", [-1]));
      const url = (path: string) => JSON.stringify(new URL(path, import.meta.url).href);
      const script = `
        const { register } = await import(${JSON.stringify(import.meta.resolve("tsx/esm/api"))});
        register();
        const { loadOnnxModel } = await import(${url("../../src/backends/onnx/onnx-backend.ts")});
        const { silentLogger } = await import(${url("../../src/observability/logger.ts")});
        const { executors } = await loadOnnxModel({
          modelName: "identity", modelPath: ${JSON.stringify(modelPath)}, instanceCount: 1, logger: silentLogger(),
        });
        const { outputs } = await executors[0].run(
          new Map([["INPUT0", { datatype: "INT32", shape: [2], data: new Int32Array([5, 6]) }]]), ["OUTPUT0"]);
        console.log(JSON.stringify([...outputs.get("OUTPUT0").data]));
        await executors[0].close();
      `;
      const { stdout } = await run(
        process.execPath,
        ["--max-old-space-size=1024", "--input-type=module", "-e", script],
        {
          timeout: 60_000,
        },
      );
      assert.equal(stdout.trim(), "[5,6]");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
