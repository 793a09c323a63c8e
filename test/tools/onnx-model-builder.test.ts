import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { InferenceSession, Tensor } from "onnxruntime-node";
import {
  attribute,
  OnnxGraphBuilder,
  OnnxModelBuilder,
  writeOnnxModel,
} from "../../tools/onnx/onnx-model-builder.ts";
import {
  addSubModel,
  identityModel,
  ONNX_RUNTIME_DATATYPES,
  slowModel,
} from "../../tools/onnx/test-models.ts";

// Every model the builder writes must load and run in onnxruntime-node in-process.

const quiet = { logSeverityLevel: 3 } as const;

function sampleTensor(datatype: (typeof ONNX_RUNTIME_DATATYPES)[number], dims: number[]): Tensor {
  const n = dims.reduce((a, b) => a * b, 1);
  const ints = Array.from({ length: n }, (_, i) => (i * 7) % 100);
  switch (datatype) {
    case "BOOL":
      return new Tensor(
        "bool",
        Uint8Array.from(ints, (v) => v % 2),
        dims,
      );
    case "UINT8":
      return new Tensor("uint8", Uint8Array.from(ints), dims);
    case "UINT16":
      return new Tensor("uint16", Uint16Array.from(ints), dims);
    case "UINT32":
      return new Tensor(
        "uint32",
        Uint32Array.from(ints, (v) => v + 4e9),
        dims,
      );
    case "UINT64":
      return new Tensor(
        "uint64",
        BigUint64Array.from(ints, (v) => BigInt(v) + (1n << 63n)),
        dims,
      );
    case "INT8":
      return new Tensor(
        "int8",
        Int8Array.from(ints, (v) => -v),
        dims,
      );
    case "INT16":
      return new Tensor(
        "int16",
        Int16Array.from(ints, (v) => -v * 300),
        dims,
      );
    case "INT32":
      return new Tensor(
        "int32",
        Int32Array.from(ints, (v) => -v * 1e7),
        dims,
      );
    case "INT64":
      return new Tensor(
        "int64",
        BigInt64Array.from(ints, (v) => -BigInt(v) << 40n),
        dims,
      );
    case "FP16":
      // Raw half-precision bit patterns, including a NaN payload and -0.
      return new Tensor(
        "float16",
        Uint16Array.from(ints, (v, i) => (i === 0 ? 0x7e01 : i === 1 ? 0x8000 : v)),
        dims,
      );
    case "FP32":
      return new Tensor(
        "float32",
        Float32Array.from(ints, (v) => v / 3),
        dims,
      );
    case "FP64":
      return new Tensor(
        "float64",
        Float64Array.from(ints, (v) => v / 3),
        dims,
      );
    case "BYTES":
      return new Tensor(
        "string",
        ints.map((v) => `é${v}✓`),
        dims,
      );
  }
}

describe("OnnxModelBuilder", () => {
  for (const datatype of ONNX_RUNTIME_DATATYPES) {
    test(`identity model of ${datatype} round-trips its data`, async () => {
      const session = await InferenceSession.create(identityModel(datatype, [-1, 4]), quiet);
      const input = sampleTensor(datatype, [3, 4]);
      const { OUTPUT0 } = await session.run({ INPUT0: input });
      assert.ok(OUTPUT0 instanceof Tensor);
      assert.equal(OUTPUT0.type, input.type);
      assert.deepEqual(OUTPUT0.dims, [3, 4]);
      assert.deepEqual(OUTPUT0.data, input.data);
      await session.release();
    });
  }

  test("-1 dims are unnamed, string dims symbolic, [] a scalar", async () => {
    const bytes = new OnnxModelBuilder({ opset: 17 })
      .input("A", "FP32", [-1, "batch", 3])
      .input("B", "INT64", [])
      .output("C", "FP32", [-1, "batch", 3])
      .node("Identity", ["A"], ["C"])
      .toBytes();
    const session = await InferenceSession.create(bytes, quiet);
    assert.deepEqual(session.inputMetadata, [
      { name: "A", isTensor: true, type: "float32", shape: ["", "batch", 3] },
      { name: "B", isTensor: true, type: "int64", shape: [] },
    ]);
    await session.release();
  });

  test("addSubModel computes OUTPUT0 = IN0 + IN1 and OUTPUT1 = IN0 - IN1", async () => {
    for (const datatype of ["INT32", "FP32"] as const) {
      const session = await InferenceSession.create(addSubModel(datatype), quiet);
      const type = datatype === "INT32" ? "int32" : "float32";
      const numbers = Array.from({ length: 32 }, (_, i) => i);
      const a = datatype === "INT32" ? Int32Array.from(numbers) : Float32Array.from(numbers);
      const b = datatype === "INT32" ? new Int32Array(32).fill(1) : new Float32Array(32).fill(1);
      const out = await session.run({
        INPUT0: new Tensor(type, a, [2, 16]),
        INPUT1: new Tensor(type, b, [2, 16]),
      });
      assert.deepEqual(
        out.OUTPUT0?.data,
        a.map((v) => v + 1),
      );
      assert.deepEqual(
        out.OUTPUT1?.data,
        a.map((v) => v - 1),
      );
      assert.deepEqual(out.OUTPUT0?.dims, [2, 16]);
      await session.release();
    }
  });

  test("slowModel answers its input", async () => {
    // Small and shallow: the answer is what is checked here, not the time.
    const session = await InferenceSession.create(slowModel({ size: 16, depth: 3 }), quiet);
    const { OUTPUT0 } = await session.run({ INPUT0: new Tensor("float32", new Float32Array([2.5]), [1]) });
    assert.ok(OUTPUT0 !== undefined);
    assert.deepEqual(OUTPUT0.dims, [1]);
    assert.ok(Math.abs((OUTPUT0.data as Float32Array)[0]! - 2.5) < 1e-4);
    await session.release();
  });

  test("initializers of every kind of data", async () => {
    const bytes = new OnnxModelBuilder({ opset: 17 })
      .input("X", "INT64", [2])
      .output("SUM", "INT64", [2])
      .output("HALF", "FP16", [2])
      .output("FLAG", "BOOL", [2])
      .output("TEXT", "BYTES", [2])
      .initializer("big", "INT64", [2], [1n << 40n, -3n])
      .initializer("half", "FP16", [2], new Uint16Array([0x3c00, 0xc000]))
      .initializer("flag", "BOOL", [2], [true, false])
      .initializer("text", "BYTES", [2], ["ä", "b"])
      .node("Add", ["X", "big"], ["SUM"])
      .node("Identity", ["half"], ["HALF"])
      .node("Identity", ["flag"], ["FLAG"])
      .node("Identity", ["text"], ["TEXT"])
      .toBytes();
    const session = await InferenceSession.create(bytes, quiet);
    const out = await session.run({ X: new Tensor("int64", new BigInt64Array([1n, 1n]), [2]) });
    assert.deepEqual(out.SUM?.data, new BigInt64Array([(1n << 40n) + 1n, -2n]));
    assert.deepEqual(out.HALF?.data, new Uint16Array([0x3c00, 0xc000]));
    assert.deepEqual(out.FLAG?.data, new Uint8Array([1, 0]));
    assert.deepEqual(out.TEXT?.data, ["ä", "b"]);
    await session.release();
  });

  test("attributes: int, float, string, ints, floats, strings, tensor, graph", async () => {
    const thenBranch = new OnnxGraphBuilder("then")
      .output("branch", "INT64", [1])
      .node("Constant", [], ["branch"], { value_ints: [1] });
    const elseBranch = new OnnxGraphBuilder("else")
      .output("branch", "INT64", [1])
      .node("Constant", [], ["branch"], { value_ints: [0] });
    const bytes = new OnnxModelBuilder({ opset: 17 })
      .input("X", "FP32", [2, 3])
      .input("COND", "BOOL", [])
      .output("CAST", "INT32", [2, 3])
      .output("LEAKY", "FP32", [2, 3])
      .output("T", "FP32", [3, 2])
      .output("F", "FP32", [2])
      .output("WHOLE", "FP32", [])
      .output("S", "BYTES", [])
      .output("SS", "BYTES", [2])
      .output("K", "INT64", [2, 2])
      .output("BRANCH", "INT64", [1])
      .node("Cast", ["X"], ["CAST"], { to: 6 })
      .node("LeakyRelu", ["X"], ["LEAKY"], { alpha: 0.5 })
      .node("Transpose", ["X"], ["T"], { perm: [1, 0] })
      .node("Constant", [], ["F"], { value_floats: [0.25, -1.5] })
      .node("Constant", [], ["WHOLE"], { value_float: attribute.float(2) })
      .node("Constant", [], ["S"], { value_string: "héllo" })
      .node("Constant", [], ["SS"], { value_strings: ["a", "b"] })
      .node("Constant", [], ["K"], { value: attribute.tensor("INT64", [2, 2], [1, 2, 3, 4]) })
      .node("If", ["COND"], ["BRANCH"], {
        then_branch: attribute.graph(thenBranch),
        else_branch: attribute.graph(elseBranch),
      })
      .toBytes();
    const session = await InferenceSession.create(bytes, quiet);
    const x = new Float32Array([1.5, -2, 3, -4, 5, -6.5]);
    const out = await session.run({
      X: new Tensor("float32", x, [2, 3]),
      COND: new Tensor("bool", new Uint8Array([1]), []),
    });
    assert.deepEqual(out.CAST?.data, new Int32Array([1, -2, 3, -4, 5, -6]));
    assert.deepEqual(out.LEAKY?.data, new Float32Array([1.5, -1, 3, -2, 5, -3.25]));
    assert.deepEqual(out.T?.data, new Float32Array([1.5, -4, -2, 5, 3, -6.5]));
    assert.deepEqual(out.F?.data, new Float32Array([0.25, -1.5]));
    assert.deepEqual(out.WHOLE?.data, new Float32Array([2]));
    assert.deepEqual(out.S?.data, ["héllo"]);
    assert.deepEqual(out.SS?.data, ["a", "b"]);
    assert.deepEqual(out.K?.data, new BigInt64Array([1n, 2n, 3n, 4n]));
    assert.deepEqual(out.BRANCH?.data, new BigInt64Array([1n]));
    await session.release();
  });

  test("writeOnnxModel writes a file onnxruntime loads by path", async () => {
    const dir = await mkdtemp(join(tmpdir(), "onnx-builder-"));
    try {
      const path = join(dir, "model.onnx");
      await writeOnnxModel(path, identityModel("FP32", [2]));
      const session = await InferenceSession.create(path, quiet);
      const { OUTPUT0 } = await session.run({ INPUT0: new Tensor("float32", new Float32Array([1, 2]), [2]) });
      assert.deepEqual(OUTPUT0?.data, new Float32Array([1, 2]));
      await session.release();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test("tensor data must match its dims and datatype", () => {
    assert.throws(
      () => new OnnxModelBuilder({ opset: 17 }).initializer("w", "FP32", [3], [1, 2]),
      /2 elements given for dims \[3\]/,
    );
    assert.throws(
      () => new OnnxModelBuilder({ opset: 17 }).initializer("w", "FP32", [2], new Int32Array(2)),
      /FP32 data must be a Float32Array/,
    );
  });
});
