import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { loadOnnxModel } from "../../src/backends/onnx/onnx-backend.ts";
import { onnxSessionOptions } from "../../src/backends/onnx/session-options.ts";
import { ServerError } from "../../src/core/errors.ts";
import type { Tensor } from "../../src/core/tensor.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { writeOnnxModel } from "../../tools/onnx/onnx-model-builder.ts";
import { addSubModel } from "../../tools/onnx/test-models.ts";

function invalid(run: () => unknown, pattern: RegExp): void {
  assert.throws(run, (error: unknown) => {
    assert.ok(error instanceof ServerError);
    assert.equal(error.code, "INVALID_ARG");
    assert.match(error.message, pattern);
    return true;
  });
}

describe("onnxSessionOptions", () => {
  test("defaults: every graph optimization, sequential, one intra-op thread", () => {
    assert.deepEqual(onnxSessionOptions({}, undefined), {
      graphOptimizationLevel: "all",
      executionMode: "sequential",
      logSeverityLevel: 4,
      intraOpNumThreads: 1,
    });
  });

  test("graph levels map as Triton's onnxruntime backend maps them", () => {
    const level = (n: number | undefined) => onnxSessionOptions({}, n).graphOptimizationLevel;
    assert.equal(level(-1), "basic");
    assert.equal(level(0), "all");
    assert.equal(level(1), "extended");
    assert.equal(level(2), "disabled");
    // Any other level is every optimization, as Triton's backend takes it.
    assert.equal(level(3), "all");
    assert.equal(level(-7), "all");
  });

  test("thread counts, execution mode, memory options and session config entries", () => {
    const options = onnxSessionOptions(
      {
        intra_op_thread_count: "4",
        inter_op_thread_count: "2",
        execution_mode: "1",
        enable_mem_arena: "OFF",
        enable_mem_pattern: "true",
        "session.use_device_allocator_for_initializers": "1",
        state_pairs: "<<<a, b>>>",
      },
      undefined,
    );
    assert.deepEqual(options, {
      graphOptimizationLevel: "all",
      executionMode: "parallel",
      logSeverityLevel: 4,
      intraOpNumThreads: 4,
      interOpNumThreads: 2,
      enableCpuMemArena: false,
      enableMemPattern: true,
      extra: { "session.use_device_allocator_for_initializers": "1" },
    });
  });

  test("a thread count of 0 leaves the choice to ONNX Runtime", () => {
    const options = onnxSessionOptions({ intra_op_thread_count: "0", inter_op_thread_count: "0" }, undefined);
    assert.equal(options.intraOpNumThreads, undefined);
    assert.equal(options.interOpNumThreads, undefined);
  });

  test("values that cannot be read are errors naming the parameter", () => {
    invalid(
      () => onnxSessionOptions({ intra_op_thread_count: "many" }, undefined),
      /'intra_op_thread_count'.*'many'/,
    );
    invalid(() => onnxSessionOptions({ inter_op_thread_count: "-1" }, undefined), /'inter_op_thread_count'/);
    invalid(() => onnxSessionOptions({ execution_mode: "2" }, undefined), /'execution_mode'.*0 .* or 1/);
    invalid(() => onnxSessionOptions({ enable_mem_arena: "yes" }, undefined), /'enable_mem_arena'.*'yes'/);
    invalid(() => onnxSessionOptions({ enable_mem_pattern: "" }, undefined), /'enable_mem_pattern'/);
    invalid(
      () => onnxSessionOptions({ "session.use_device_allocator_for_initializers": "2" }, undefined),
      /'session.use_device_allocator_for_initializers'/,
    );
  });

  test("ONNX Runtime accepts every option this produces", async () => {
    const dir = await mkdtemp(join(tmpdir(), "seqserve-options-"));
    const path = join(dir, "model.onnx");
    await writeOnnxModel(path, addSubModel("FP32", [-1, 4]));
    const sessionOptions = onnxSessionOptions(
      {
        intra_op_thread_count: "2",
        inter_op_thread_count: "2",
        execution_mode: "1",
        enable_mem_arena: "0",
        enable_mem_pattern: "0",
        "session.use_device_allocator_for_initializers": "1",
      },
      2,
    );
    const { executors } = await loadOnnxModel({
      modelName: "options",
      modelPath: path,
      instanceCount: 1,
      sessionOptions,
      logger: silentLogger(),
    });
    try {
      const one = (): Tensor => ({ datatype: "FP32", shape: [1, 4], data: new Float32Array([1, 2, 3, 4]) });
      const { outputs } = await executors[0]!.run(
        new Map([
          ["INPUT0", one()],
          ["INPUT1", one()],
        ]),
        ["OUTPUT0"],
      );
      assert.deepEqual(outputs.get("OUTPUT0")?.data, new Float32Array([2, 4, 6, 8]));
    } finally {
      await executors[0]!.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
