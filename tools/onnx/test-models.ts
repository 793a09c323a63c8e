import type { DataType } from "../../src/core/datatype.ts";
import { type OnnxDim, OnnxModelBuilder } from "./onnx-model-builder.ts";

// Canonical small models for tests, built in code so no binary files live in the repo.

/** Every datatype onnxruntime-node can feed and fetch (BF16 has no tensor type there). */
export const ONNX_RUNTIME_DATATYPES = [
  "BOOL",
  "UINT8",
  "UINT16",
  "UINT32",
  "UINT64",
  "INT8",
  "INT16",
  "INT32",
  "INT64",
  "FP16",
  "FP32",
  "FP64",
  "BYTES",
] as const satisfies readonly DataType[];

/** OUTPUT0 = INPUT0, for any datatype (BYTES is an ONNX string tensor). */
export function identityModel(datatype: DataType, dims: readonly OnnxDim[] = [-1, 16]): Uint8Array {
  return new OnnxModelBuilder({ opset: 17 })
    .input("INPUT0", datatype, dims)
    .output("OUTPUT0", datatype, dims)
    .node("Identity", ["INPUT0"], ["OUTPUT0"])
    .toBytes();
}

/**
 * Triton's "simple" model: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1. `dims` is
 * the full shape the model declares, the batch dimension first (Triton's simple model is
 * INT32 [-1, 16] with max_batch_size 8). ONNX Runtime's CPU kernels cover every numeric
 * datatype it can feed except BOOL.
 */
export function addSubModel(datatype: DataType = "INT32", dims: readonly OnnxDim[] = [-1, 16]): Uint8Array {
  return new OnnxModelBuilder({ opset: 17 })
    .input("INPUT0", datatype, dims)
    .input("INPUT1", datatype, dims)
    .output("OUTPUT0", datatype, dims)
    .output("OUTPUT1", datatype, dims)
    .node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"])
    .node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])
    .toBytes();
}

export interface SlowModelOptions {
  /** Side of the square matrices multiplied. */
  readonly size?: number;
  /** Matrix products per run. */
  readonly depth?: number;
}

/**
 * A model whose one run keeps a CPU busy for a noticeable time (with the defaults, about
 * 100-300 ms on one intra-op thread of a current x86 core), for tests of what happens while
 * a model runs. INPUT0 FP32 [1] is broadcast to a size×size matrix that is multiplied
 * `depth` times by a constant averaging matrix; OUTPUT0 FP32 [1] is the mean of the result,
 * which equals INPUT0 (up to rounding), so callers can also check the answer.
 */
export function slowModel(options: SlowModelOptions = {}): Uint8Array {
  const { size = 512, depth = 48 } = options;
  const builder = new OnnxModelBuilder({ opset: 17 })
    .input("INPUT0", "FP32", [1])
    .output("OUTPUT0", "FP32", [1])
    .initializer("square", "INT64", [2], [size, size])
    .initializer("one", "INT64", [1], [1])
    .initializer("average", "FP32", [size, size], new Float32Array(size * size).fill(1 / size))
    .node("Expand", ["INPUT0", "square"], ["product_0"]);
  for (let i = 0; i < depth; i++) builder.node("MatMul", [`product_${i}`, "average"], [`product_${i + 1}`]);
  return builder
    .node("ReduceMean", [`product_${depth}`], ["mean"], { keepdims: 0 })
    .node("Reshape", ["mean", "one"], ["OUTPUT0"])
    .toBytes();
}
