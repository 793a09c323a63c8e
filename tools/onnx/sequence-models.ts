import type { DataType } from "../../src/core/datatype.ts";
import { OnnxModelBuilder } from "./onnx-model-builder.ts";

// Small stateful models for the examples and the sequence-batcher tests. Their state is
// implicit (an input fed from an output of the previous step), so they run under
// seqserve's sequence batcher exactly as Triton's implicit-state models do.

/** The accumulator's START / READY controls and its state, as a config's sequence_batching lists them. */
export const ACCUMULATOR_CONTROLS = `
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "STATE" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]`;

/**
 * A config.pbtxt for accumulatorModel(): `batching` is the body of its sequence_batching
 * section besides the controls and state (a strategy, timeouts); `extra` follows the rest.
 */
export function accumulatorConfig(name: string, maxBatchSize: number, batching: string, extra = ""): string {
  return accumulatorConfigWith(ACCUMULATOR_INPUT, name, maxBatchSize, batching, extra);
}

/**
 * A config.pbtxt for accumulatorModel({ scaled: true }), as accumulatorConfig: SCALE is a
 * scalar every request of a batch shares (`shared_inputs`, as Silero VAD's `sr`).
 */
export function scaledAccumulatorConfig(
  name: string,
  maxBatchSize: number,
  batching: string,
  extra = "",
): string {
  return accumulatorConfigWith(
    `${ACCUMULATOR_INPUT},\n  { name: "SCALE" data_type: TYPE_INT32 dims: [ ] }`,
    name,
    maxBatchSize,
    batching,
    `parameters { key: "shared_inputs" value { string_value: "SCALE" } }\n${extra}`,
  );
}

const ACCUMULATOR_INPUT = '{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }';

function accumulatorConfigWith(
  inputs: string,
  name: string,
  maxBatchSize: number,
  batching: string,
  extra: string,
): string {
  return `
name: "${name}"
backend: "onnxruntime"
max_batch_size: ${maxBatchSize}
input [ ${inputs} ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  ${batching}
  ${ACCUMULATOR_CONTROLS}
}
instance_group [ { count: 1 kind: KIND_CPU } ]
${extra}
`;
}

/**
 * The accumulator, Triton's classic sequence example with implicit state:
 * `acc = STATE * (1 - START) + INPUT * READY`, OUTPUT = STATE_OUT = acc. INPUT is INT32
 * [batch, 1]; START and READY are INT32 [batch, 1] control tensors (int32_false_true
 * [0, 1]); STATE / STATE_OUT are INT32 [batch, 1]. A padding row (READY 0) leaves its state
 * as it was, and START clears it even if the server passed the old one.
 */
export function accumulatorModel(variant: AccumulatorVariant = {}): Uint8Array {
  const builder = new OnnxModelBuilder({ opset: 17 }).input(
    "INPUT",
    "INT32",
    variant.variableWidth ? ["batch", "width"] : ["batch", 1],
  );
  if (variant.scaled) builder.input("SCALE", "INT32", []);
  builder
    .input("START", "INT32", ["batch", 1])
    .input("READY", "INT32", ["batch", 1])
    .input("STATE", "INT32", ["batch", 1])
    .output("OUTPUT", "INT32", ["batch", 1])
    .output("STATE_OUT", "INT32", ["batch", 1])
    .initializer("one", "INT32", [1], new Int32Array([1]));
  let added = "INPUT";
  if (variant.variableWidth) {
    builder
      .initializer("axis1", "INT64", [1], [1])
      .node("ReduceSum", ["INPUT", "axis1"], ["sum"], { keepdims: 1 });
    added = "sum";
  }
  builder.node("Sub", ["one", "START"], ["keep"]).node("Mul", ["STATE", "keep"], ["kept"]);
  if (variant.scaled) {
    builder.node("Mul", [added, "SCALE"], ["scaled"]);
    added = "scaled";
  }
  return builder
    .node("Mul", [added, "READY"], ["added"])
    .node("Add", ["kept", "added"], ["OUTPUT"])
    .node("Identity", ["OUTPUT"], ["STATE_OUT"])
    .toBytes();
}

/** Variants of the accumulator for tests of batching rules. */
export interface AccumulatorVariant {
  /** INPUT is [batch, width] with any width, and the row's sum is added: for shape-keyed batching. */
  readonly variableWidth?: boolean;
  /** An INT32 scalar input SCALE multiplies INPUT: a shared (unbatched) input. */
  readonly scaled?: boolean;
}

/**
 * Echoes every control tensor in the datatype the config gives it, to check each
 * encoding exactly: inputs START, END, READY of `flagType` and CORRID of `corridType`, all
 * [batch, 1]; outputs OUT_* their copies; plus INPUT → OUTPUT (INT32 [batch, 1]).
 */
export function controlEchoModel(flagType: DataType, corridType: DataType): Uint8Array {
  const b = new OnnxModelBuilder({ opset: 17 })
    .input("INPUT", "INT32", ["batch", 1])
    .output("OUTPUT", "INT32", ["batch", 1])
    .node("Identity", ["INPUT"], ["OUTPUT"]);
  for (const name of ["START", "END", "READY"]) {
    b.input(name, flagType, ["batch", 1])
      .output(`OUT_${name}`, flagType, ["batch", 1])
      .node("Identity", [name], [`OUT_${name}`]);
  }
  return b
    .input("CORRID", corridType, ["batch", 1])
    .output("OUT_CORRID", corridType, ["batch", 1])
    .node("Identity", ["CORRID"], ["OUT_CORRID"])
    .toBytes();
}

/**
 * A config.pbtxt for growingStateModel(), named "growing": `batching` is the body of its
 * sequence_batching section besides the state (a strategy, timeouts); `extra` follows it.
 */
export function growingStateConfig(batching: string, extra = ""): string {
  return `
name: "growing"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "LENGTH" data_type: TYPE_INT64 dims: [ 1 ] }
]
sequence_batching {
  ${batching}
  state [ { input_name: "CACHE" output_name: "CACHE_OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
${extra}`;
}

/**
 * A state that grows by one column per step, like a decoder's KV cache:
 * CACHE_OUT = concat(CACHE, INPUT) along axis 1; OUTPUT = the sum of CACHE_OUT's row and
 * LENGTH = its column count. INPUT FP32 [batch, 1]; CACHE FP32 [batch, steps].
 */
export function growingStateModel(): Uint8Array {
  return new OnnxModelBuilder({ opset: 17 })
    .input("INPUT", "FP32", ["batch", 1])
    .input("CACHE", "FP32", ["batch", "steps"])
    .output("OUTPUT", "FP32", ["batch", 1])
    .output("LENGTH", "INT64", ["batch", 1])
    .output("CACHE_OUT", "FP32", ["batch", "steps_out"])
    .initializer("axis1", "INT64", [1], [1])
    .initializer("index1", "INT64", [1], [1])
    .node("Concat", ["CACHE", "INPUT"], ["CACHE_OUT"], { axis: 1 })
    .node("ReduceSum", ["CACHE_OUT", "axis1"], ["OUTPUT"], { keepdims: 1 })
    .node("Shape", ["CACHE_OUT"], ["shape"])
    .node("Gather", ["shape", "index1"], ["columns"], { axis: 0 })
    .node("Shape", ["INPUT"], ["input_shape"])
    .node("Slice", ["input_shape", "zero", "one_index"], ["rows"])
    .initializer("zero", "INT64", [1], [0])
    .initializer("one_index", "INT64", [1], [1])
    .node("Concat", ["rows", "one_index"], ["length_shape"], { axis: 0 })
    .node("Expand", ["columns", "length_shape"], ["LENGTH"])
    .toBytes();
}
