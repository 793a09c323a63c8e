import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { unlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, test } from "node:test";
import { InferenceSession, Tensor as OrtTensor } from "onnxruntime-node";
import { loadOnnxModel } from "../../src/backends/onnx/onnx-backend.ts";
import { onnxSessionOptions } from "../../src/backends/onnx/session-options.ts";
import type { DataType, NumericArray } from "../../src/core/datatype.ts";
import type { ModelExecutor } from "../../src/core/executor.ts";
import type { BytesElements, Tensor } from "../../src/core/tensor.ts";
import { silentLogger } from "../../src/observability/logger.ts";
import { OnnxModelBuilder, writeOnnxModel } from "../../tools/onnx/onnx-model-builder.ts";
import {
  addSubModel,
  identityModel,
  ONNX_RUNTIME_DATATYPES,
  slowModel,
} from "../../tools/onnx/test-models.ts";
import { waitFor } from "../support/sequence-kit.ts";
import { modelFiles, rejection } from "./support/onnx-test-kit.ts";

const logger = silentLogger();
const utf8 = new TextEncoder();
const models = modelFiles("seqserve-onnx-");
const modelFile = models.file;

async function closeAll(executors: readonly ModelExecutor[]): Promise<void> {
  await Promise.all(executors.map((executor) => executor.close()));
}

/** `use` on one instance of the model `bytes`, closed afterwards whatever happens. */
async function withInstance(
  name: string,
  bytes: Uint8Array,
  use: (executor: ModelExecutor) => Promise<void>,
): Promise<void> {
  const path = await modelFile(name, bytes);
  const { executors } = await loadOnnxModel({ modelName: name, modelPath: path, instanceCount: 1, logger });
  try {
    await use(executors[0]!);
  } finally {
    await closeAll(executors);
  }
}

/** Six elements of `datatype` that exercise its range (FP16 as bit patterns, incl. NaN and -0). */
function sample(datatype: DataType): Tensor {
  const shape = [2, 3];
  switch (datatype) {
    case "BOOL":
      return { datatype, shape, data: new Uint8Array([1, 0, 0, 1, 1, 0]) };
    case "UINT8":
      return { datatype, shape, data: new Uint8Array([0, 1, 127, 128, 254, 255]) };
    case "UINT16":
      return { datatype, shape, data: new Uint16Array([0, 1, 300, 32768, 65534, 65535]) };
    case "UINT32":
      return { datatype, shape, data: new Uint32Array([0, 1, 70000, 2 ** 31, 2 ** 32 - 2, 2 ** 32 - 1]) };
    case "UINT64":
      return {
        datatype,
        shape,
        data: new BigUint64Array([0n, 1n, 2n ** 53n + 1n, 2n ** 63n, 2n ** 64n - 2n, 2n ** 64n - 1n]),
      };
    case "INT8":
      return { datatype, shape, data: new Int8Array([-128, -1, 0, 1, 100, 127]) };
    case "INT16":
      return { datatype, shape, data: new Int16Array([-32768, -1, 0, 1, 1000, 32767]) };
    case "INT32":
      return { datatype, shape, data: new Int32Array([-(2 ** 31), -1, 0, 1, 123456789, 2 ** 31 - 1]) };
    case "INT64":
      return {
        datatype,
        shape,
        data: new BigInt64Array([-(2n ** 63n), -1n, 0n, 1n, 2n ** 53n + 1n, 2n ** 63n - 1n]),
      };
    case "FP16":
      return { datatype, shape, data: new Uint16Array([0x3c00, 0x8000, 0x7e01, 0x7c00, 0x0001, 0xfbff]) };
    case "FP32":
      return {
        datatype,
        shape,
        data: new Float32Array([-0, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 1e-40, -3.4e38]),
      };
    case "FP64":
      return {
        datatype,
        shape,
        data: new Float64Array([-0, 1.5, Number.NaN, Number.NEGATIVE_INFINITY, 5e-324, 1.7e308]),
      };
    case "BYTES":
      return {
        datatype,
        shape,
        data: ["", "a", "héllo", "✓ ok", "日本語", "x".repeat(1000)].map((s) => utf8.encode(s)),
      };
    case "BF16":
      throw new Error("BF16 cannot be fed to onnxruntime-node");
  }
}

/** Raw bytes of numeric data, so NaN payloads and -0 compare exactly. */
function bits(data: NumericArray): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** The first element of a numeric output. */
function first(tensor: Tensor | undefined): number {
  assert.ok(tensor !== undefined);
  return Number((tensor.data as NumericArray)[0]);
}

/** A BYTES output as strings. */
function strings(tensor: Tensor | undefined): string[] {
  assert.ok(tensor !== undefined && tensor.datatype === "BYTES");
  return (tensor.data as BytesElements).map((e) => Buffer.from(e).toString("utf8"));
}

function clone(tensor: Tensor): Tensor {
  const data =
    tensor.datatype === "BYTES"
      ? (tensor.data as BytesElements).map((e) => e.slice())
      : (tensor.data as NumericArray).slice();
  return { datatype: tensor.datatype, shape: [...tensor.shape], data };
}

describe("ONNX executor", () => {
  test("identity for every datatype onnxruntime-node can feed returns the same data", async () => {
    // One model with an identity per datatype: one worker for all of them.
    const builder = new OnnxModelBuilder({ opset: 17 });
    for (const datatype of ONNX_RUNTIME_DATATYPES) {
      builder
        .input(`IN_${datatype}`, datatype, [-1, 3])
        .output(`OUT_${datatype}`, datatype, [-1, 3])
        .node("Identity", [`IN_${datatype}`], [`OUT_${datatype}`]);
    }
    const path = await modelFile("identities", builder.toBytes());
    const { io, executors } = await loadOnnxModel({
      modelName: "identities",
      modelPath: path,
      instanceCount: 1,
      logger,
    });
    try {
      assert.deepEqual(
        io.inputs.map((i) => [i.name, i.datatype, i.shape]),
        ONNX_RUNTIME_DATATYPES.map((dt) => [`IN_${dt}`, dt, [-1, 3]]),
      );
      const inputs = new Map(ONNX_RUNTIME_DATATYPES.map((dt) => [`IN_${dt}`, sample(dt)]));
      const expected = new Map([...inputs].map(([name, tensor]) => [name, clone(tensor)]));
      const outputNames = ONNX_RUNTIME_DATATYPES.map((dt) => `OUT_${dt}`);
      const { outputs, timings } = await executors[0]!.run(inputs, outputNames);
      assert.deepEqual([...outputs.keys()], outputNames);
      for (const datatype of ONNX_RUNTIME_DATATYPES) {
        const output = outputs.get(`OUT_${datatype}`)!;
        const want = expected.get(`IN_${datatype}`)!;
        assert.equal(output.datatype, datatype);
        assert.deepEqual(output.shape, [2, 3]);
        if (datatype === "BYTES") {
          assert.deepEqual(
            (output.data as BytesElements).map((e) => Buffer.from(e).toString("utf8")),
            (want.data as BytesElements).map((e) => Buffer.from(e).toString("utf8")),
          );
        } else {
          assert.equal(output.data.constructor, want.data.constructor, datatype);
          assert.deepEqual(bits(output.data as NumericArray), bits(want.data as NumericArray), datatype);
        }
      }
      assert.ok(timings.inferNs > 0 && timings.inputNs >= 0 && timings.outputNs >= 0);
    } finally {
      await closeAll(executors);
    }
  });

  test("instances are named <model>_<n> and each runs the model (Triton's simple)", async () => {
    const path = await modelFile("simple", addSubModel("INT32", [-1, 16]));
    const { io, executors } = await loadOnnxModel({
      modelName: "simple",
      modelPath: path,
      instanceCount: 2,
      logger,
    });
    try {
      assert.deepEqual(
        executors.map((e) => e.name),
        ["simple_0", "simple_1"],
      );
      assert.deepEqual(
        io.outputs.map((o) => o.name),
        ["OUTPUT0", "OUTPUT1"],
      );
      for (const executor of executors) {
        const a = Int32Array.from({ length: 32 }, (_, i) => i);
        const inputs = new Map<string, Tensor>([
          ["INPUT0", { datatype: "INT32", shape: [2, 16], data: a.slice() }],
          ["INPUT1", { datatype: "INT32", shape: [2, 16], data: new Int32Array(32).fill(1) }],
        ]);
        const { outputs } = await executor.run(inputs, ["OUTPUT1", "OUTPUT0"]);
        assert.deepEqual([...outputs.keys()], ["OUTPUT1", "OUTPUT0"]);
        assert.deepEqual(
          outputs.get("OUTPUT0")?.data,
          a.map((v) => v + 1),
        );
        assert.deepEqual(
          outputs.get("OUTPUT1")?.data,
          a.map((v) => v - 1),
        );
      }
    } finally {
      await closeAll(executors);
    }
  });

  test("io reports symbolic dims as -1 and types it cannot carry with their name only", async () => {
    const bytes = new OnnxModelBuilder({ opset: 17 })
      .input("A", "FP32", ["batch", 4])
      .input("B", "BF16", [-1, 2])
      .input("S", "INT64", [])
      .output("C", "FP32", ["batch", 4])
      .output("D", "BF16", [-1, 2])
      .node("Identity", ["A"], ["C"])
      .node("Identity", ["B"], ["D"])
      .toBytes();
    const path = await modelFile("bf16", bytes);
    const { io, executors } = await loadOnnxModel({
      modelName: "bf16",
      modelPath: path,
      instanceCount: 1,
      logger,
    });
    try {
      assert.deepEqual(io, {
        inputs: [
          { name: "A", datatype: "FP32", typeName: "float32", shape: [-1, 4] },
          { name: "B", datatype: undefined, typeName: "bfloat16", shape: [-1, 2] },
          { name: "S", datatype: "INT64", typeName: "int64", shape: [] },
        ],
        outputs: [
          { name: "C", datatype: "FP32", typeName: "float32", shape: [-1, 4] },
          { name: "D", datatype: undefined, typeName: "bfloat16", shape: [-1, 2] },
        ],
      });
      const error = await rejection(
        executors[0]!.run(
          new Map<string, Tensor>([
            ["A", { datatype: "FP32", shape: [1, 4], data: new Float32Array(4) }],
            ["B", { datatype: "BF16", shape: [1, 2], data: new Uint16Array(2) }],
            ["S", { datatype: "INT64", shape: [], data: new BigInt64Array(1) }],
          ]),
          ["C"],
        ),
      );
      assert.equal(error.code, "INVALID_ARG");
      assert.match(error.message, /input 'B' has datatype BF16/);
    } finally {
      await closeAll(executors);
    }
  });

  test("inputs that own their buffer are transferred; views and shared memory are copied", async () => {
    const path = await modelFile("identity_fp32", identityModel("FP32", [-1]));
    const { executors } = await loadOnnxModel({
      modelName: "identity",
      modelPath: path,
      instanceCount: 1,
      logger,
    });
    const executor = executors[0]!;
    try {
      const owned = new Float32Array([1, 2, 3]);
      const { outputs } = await executor.run(
        new Map([["INPUT0", { datatype: "FP32", shape: [3], data: owned } as Tensor]]),
        ["OUTPUT0"],
      );
      assert.equal(owned.buffer.byteLength, 0, "the caller's buffer is detached: it moved, not copied");
      assert.deepEqual(outputs.get("OUTPUT0")?.data, new Float32Array([1, 2, 3]));

      const body = new Float32Array([9, 1, 2, 3, 9]);
      const view = body.subarray(1, 4);
      const fromView = await executor.run(
        new Map([["INPUT0", { datatype: "FP32", shape: [3], data: view } as Tensor]]),
        ["OUTPUT0"],
      );
      assert.deepEqual(
        body,
        new Float32Array([9, 1, 2, 3, 9]),
        "a view's larger buffer stays with the caller",
      );
      assert.deepEqual(fromView.outputs.get("OUTPUT0")?.data, new Float32Array([1, 2, 3]));

      const shared = new Float32Array(new SharedArrayBuffer(12));
      shared.set([4, 5, 6]);
      const fromShared = await executor.run(
        new Map([["INPUT0", { datatype: "FP32", shape: [3], data: shared } as Tensor]]),
        ["OUTPUT0"],
      );
      assert.deepEqual([...shared], [4, 5, 6]);
      assert.deepEqual(fromShared.outputs.get("OUTPUT0")?.data, new Float32Array([4, 5, 6]));
    } finally {
      await closeAll(executors);
    }
  });

  test("a run whose input was already handed to another thread fails, naming it (it used to go unanswered)", async () => {
    await withInstance("identity_handed_over", identityModel("INT32", [-1]), async (executor) => {
      const input = new Map([
        ["INPUT0", { datatype: "INT32", shape: [3], data: Int32Array.of(1, 2, 3) } as Tensor],
      ]);
      await executor.run(input, ["OUTPUT0"]);
      // The first run transferred the buffer: the array is now empty. Node's postMessage
      // drops a message with a detached buffer silently, so the run must not reach it.
      const error = await rejection(executor.run(input, ["OUTPUT0"]));
      assert.equal(error.code, "INTERNAL", "the server's own mistake, not the client's");
      assert.match(
        error.message,
        /tensor 'INPUT0' holds 0 elements where its shape \[3\] needs 3: its buffer was already handed/,
      );
      const { outputs } = await executor.run(
        new Map([["INPUT0", { datatype: "INT32", shape: [1], data: Int32Array.of(7) } as Tensor]]),
        ["OUTPUT0"],
      );
      assert.deepEqual([...(outputs.get("OUTPUT0")!.data as Int32Array)], [7]);
    });
  });

  test("a run ONNX Runtime refuses fails with its message and the instance stays usable", async () => {
    const path = await modelFile("simple_errors", addSubModel("INT32", [-1, 16]));
    const { executors } = await loadOnnxModel({
      modelName: "simple",
      modelPath: path,
      instanceCount: 1,
      logger,
    });
    const executor = executors[0]!;
    const run = (a: Tensor, b: Tensor, outputs = ["OUTPUT0"]) =>
      executor.run(
        new Map([
          ["INPUT0", a],
          ["INPUT1", b],
        ]),
        outputs,
      );
    const good = (): Tensor => ({ datatype: "INT32", shape: [1, 16], data: new Int32Array(16).fill(2) });
    try {
      const badShape = await rejection(
        run({ datatype: "INT32", shape: [1, 15], data: new Int32Array(15) }, good()),
      );
      assert.equal(badShape.code, "INVALID_ARG");
      assert.match(badShape.message, /Got invalid dimensions for input: INPUT0/);

      const badType = await rejection(
        run({ datatype: "FP32", shape: [1, 16], data: new Float32Array(16) }, good()),
      );
      assert.equal(badType.code, "INVALID_ARG");
      assert.match(badType.message, /Unexpected input data type/);

      const badOutput = await rejection(run(good(), good(), ["OUTPUT9"]));
      assert.equal(badOutput.code, "INVALID_ARG");
      assert.match(badOutput.message, /unexpected inference output 'OUTPUT9'/);

      const missing = await rejection(executor.run(new Map([["INPUT0", good()]]), ["OUTPUT0"]));
      assert.equal(missing.code, "INVALID_ARG");
      assert.match(missing.message, /missing input 'INPUT1'/);

      const { outputs } = await run(good(), good(), ["OUTPUT0"]);
      assert.deepEqual(outputs.get("OUTPUT0")?.data, new Int32Array(16).fill(4));
    } finally {
      await closeAll(executors);
    }
  });

  test("a corrupt model file fails to load with ONNX Runtime's message and the file", async () => {
    const path = join(models.dir(), "corrupt.onnx");
    await writeFile(path, Buffer.from("this is not an onnx model"));
    const error = await rejection(
      loadOnnxModel({ modelName: "corrupt", modelPath: path, instanceCount: 2, logger }),
    );
    assert.equal(error.code, "INTERNAL");
    assert.match(error.message, /protobuf parsing failed/i);
    assert.ok(error.message.includes(path), error.message);
  });

  test("a missing model file fails to load, naming the file", async () => {
    const path = join(models.dir(), "nowhere.onnx");
    const error = await rejection(
      loadOnnxModel({ modelName: "nowhere", modelPath: path, instanceCount: 1, logger }),
    );
    assert.equal(error.code, "UNAVAILABLE");
    assert.ok(error.message.includes(path));
  });

  test("a failed load leaves no worker thread running", {
    skip: !existsSync("/proc/self/task"),
  }, async () => {
    const path = join(models.dir(), "corrupt2.onnx");
    await writeFile(path, Buffer.from([0xff, 0xff, 0xff]));
    await rejection(loadOnnxModel({ modelName: "warm", modelPath: path, instanceCount: 1, logger }));
    const threads = () => readdirSync("/proc/self/task").length;
    const before = threads();
    await rejection(loadOnnxModel({ modelName: "corrupt", modelPath: path, instanceCount: 3, logger }));
    // A thread ends a little after its worker's exit: what matters is that none stays.
    await waitFor("the failed load's threads to end", async () => (threads() <= before ? true : undefined));
  });

  test("the event loop keeps turning while a model runs", async () => {
    await withInstance("slow", slowModel(), async (executor) => {
      let ticks = 0;
      const timer = setInterval(() => ticks++, 1);
      const { outputs } = await executor.run(
        new Map([["INPUT0", { datatype: "FP32", shape: [1], data: new Float32Array([2]) } as Tensor]]),
        ["OUTPUT0"],
      );
      clearInterval(timer);
      assert.ok(ticks > 1, `the main thread's timer fired ${ticks} time(s) during the run`);
      assert.ok(Math.abs(first(outputs.get("OUTPUT0")) - 2) < 1e-3);
    });
  });

  test("a run handed over while another runs reports its wait with the instance (queue time, not compute)", async () => {
    await withInstance("slow_wait", slowModel(), async (executor) => {
      const input = (): Map<string, Tensor> =>
        new Map([["INPUT0", { datatype: "FP32", shape: [1], data: new Float32Array([1]) } as Tensor]]);
      const before = performance.now();
      const runs = [executor.run(input(), ["OUTPUT0"]), executor.run(input(), ["OUTPUT0"])] as const;
      // Both were posted within this much; the first may have begun meanwhile.
      const postingNs = (performance.now() - before) * 1e6;
      const [firstRun, secondRun] = await Promise.all(runs);
      // The worker runs one at a time: the second began only once the first had run.
      const { waitNs } = secondRun.timings;
      assert.ok(
        waitNs !== undefined && waitNs + postingNs >= firstRun.timings.inferNs,
        JSON.stringify({ first: firstRun.timings, second: secondRun.timings, postingNs }),
      );
    });
  });

  // A worker dies the way a real one does: its JS heap runs out while it turns a huge
  // BYTES input into strings (Node ends such a worker; the process lives on).
  const heapLimit = { maxOldGenerationSizeMb: 32 };
  const text = (strings: readonly string[]): Tensor => ({
    datatype: "BYTES",
    shape: [strings.length],
    data: strings.map((s) => utf8.encode(s)),
  });
  const tooBig = (): Tensor => {
    const mebibyte = new Uint8Array(1 << 20).fill(0x61);
    return { datatype: "BYTES", shape: [96], data: Array.from({ length: 96 }, () => mebibyte) };
  };

  test("a worker that dies mid-run fails the runs it held, and the next run gets a fresh worker", async () => {
    const path = await modelFile("identity_bytes", identityModel("BYTES", [-1]));
    const { executors } = await loadOnnxModel({
      modelName: "text",
      modelPath: path,
      instanceCount: 1,
      workerResourceLimits: heapLimit,
      logger,
    });
    const executor = executors[0]!;
    try {
      const dying = rejection(executor.run(new Map([["INPUT0", tooBig()]]), ["OUTPUT0"]));
      const queuedBehind = rejection(executor.run(new Map([["INPUT0", text(["queued"])]]), ["OUTPUT0"]));
      for (const error of await Promise.all([dying, queuedBehind])) {
        assert.equal(error.code, "INTERNAL");
        assert.match(error.message, /model instance 'text_0' stopped unexpectedly \(.*memory/);
      }

      const { outputs } = await executor.run(new Map([["INPUT0", text(["still", "here"])]]), ["OUTPUT0"]);
      assert.deepEqual(strings(outputs.get("OUTPUT0")), ["still", "here"]);
    } finally {
      await closeAll(executors);
    }
  });

  test("a restart that cannot load fails the runs waiting for it; a later run tries again", async () => {
    const path = await modelFile("comes_and_goes", identityModel("BYTES", [-1]));
    const { executors } = await loadOnnxModel({
      modelName: "flaky",
      modelPath: path,
      instanceCount: 1,
      workerResourceLimits: heapLimit,
      logger,
    });
    const executor = executors[0]!;
    try {
      await unlink(path);
      await rejection(executor.run(new Map([["INPUT0", tooBig()]]), ["OUTPUT0"]));
      const error = await rejection(executor.run(new Map([["INPUT0", text(["a"])]]), ["OUTPUT0"]));
      assert.equal(error.code, "INTERNAL");
      assert.match(error.message, /failed to load model instance 'flaky_0'/);
      assert.ok(error.message.includes(path));

      await writeOnnxModel(path, identityModel("BYTES", [-1]));
      const { outputs } = await executor.run(new Map([["INPUT0", text(["back"])]]), ["OUTPUT0"]);
      assert.deepEqual(strings(outputs.get("OUTPUT0")), ["back"]);
    } finally {
      await closeAll(executors);
    }
  });

  test("closing with runs in flight fails them with UNAVAILABLE; later runs too", async () => {
    const path = await modelFile("slow_close", slowModel());
    const { executors } = await loadOnnxModel({
      modelName: "slow",
      modelPath: path,
      instanceCount: 1,
      logger,
    });
    const executor = executors[0]!;
    const input = () =>
      new Map([["INPUT0", { datatype: "FP32", shape: [1], data: new Float32Array([1]) } as Tensor]]);
    const runs = [executor.run(input(), ["OUTPUT0"]), executor.run(input(), ["OUTPUT0"])].map(rejection);
    await executor.close();
    for (const error of await Promise.all(runs)) assert.equal(error.code, "UNAVAILABLE");
    assert.equal((await rejection(executor.run(input(), ["OUTPUT0"]))).code, "UNAVAILABLE");
  });

  const sileroPath = "examples/models/silero_vad/1/model.onnx";
  test("Silero VAD v5 through an executor is bit-identical to an in-process session", async () => {
    const batch = 3;
    const audio = Float32Array.from(
      { length: batch * 512 },
      (_, i) => Math.sin(i / 7) * 0.3 + Math.sin(i / 2.3) * 0.1,
    );
    const state = Float32Array.from({ length: 2 * batch * 128 }, (_, i) => Math.cos(i) * 0.05);
    const sr = new BigInt64Array([16000n]);

    const session = await InferenceSession.create(sileroPath, { intraOpNumThreads: 1, logSeverityLevel: 3 });
    const expected = await session.run({
      input: new OrtTensor("float32", audio.slice(), [batch, 512]),
      state: new OrtTensor("float32", state.slice(), [2, batch, 128]),
      sr: new OrtTensor("int64", sr.slice(), []),
    });
    await session.release();

    const { io, executors } = await loadOnnxModel({
      modelName: "silero_vad",
      modelPath: sileroPath,
      instanceCount: 1,
      sessionOptions: onnxSessionOptions({}, undefined),
      logger,
    });
    try {
      assert.deepEqual(
        io.inputs.map((i) => [i.name, i.datatype]),
        [
          ["input", "FP32"],
          ["state", "FP32"],
          ["sr", "INT64"],
        ],
      );
      const { outputs } = await executors[0]!.run(
        new Map<string, Tensor>([
          ["input", { datatype: "FP32", shape: [batch, 512], data: audio }],
          ["state", { datatype: "FP32", shape: [2, batch, 128], data: state }],
          ["sr", { datatype: "INT64", shape: [], data: sr }],
        ]),
        ["output", "stateN"],
      );
      const output = outputs.get("output")!;
      const stateN = outputs.get("stateN")!;
      assert.deepEqual(output.shape, [batch, 1]);
      assert.deepEqual(stateN.shape, [2, batch, 128]);
      assert.deepEqual(bits(output.data as NumericArray), bits(expected.output!.data as Float32Array));
      assert.deepEqual(bits(stateN.data as NumericArray), bits(expected.stateN!.data as Float32Array));
    } finally {
      await closeAll(executors);
    }
  });
});
